"""`personagen export longmemeval` read the way LongMemEval's scripts read it (github.com/xiaowu0162/LongMemEval).

What its code reads: `json.load` of a list (retrieval accepts nothing else); the nine keys of every
entry; `zip(haystack_dates, haystack_session_ids, haystack_sessions)` (equal lengths, or zip cuts);
per-turn ids `session_id + '_' + str(i + 1)`; for every session id containing "answer", each user
turn's `has_answer` read without a default; ground truth = the ids containing "answer"; the judge's
prompt picked by `question_type` (six known types) and by "_abs" in the id; dates sorted as strings.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.cli.app import app
from pipeline.dataset import load
from pipeline.dataset.export_longmemeval import (
    ENTRY_KEYS,
    haystack,
    lme_date,
    longmemeval_entries,
    longmemeval_entry,
)
from pipeline.s5_assembly import fit
from pipeline.tokens import count_tokens
from schemas.query import Evidence
from tests.support.harness import lme_history, lme_prompt
from tests.support.smoke import publish_smoke

LME_TYPES = {"single-session-user", "single-session-assistant", "single-session-preference", "multi-session",
             "temporal-reasoning", "knowledge-update"}
DATE = "%Y/%m/%d (%a) %H:%M"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return publish_smoke(tmp_path_factory.mktemp("smoke"))


@pytest.fixture(scope="module")
def exported(smoke, tmp_path_factory):
    out = tmp_path_factory.mktemp("lme")
    result = CliRunner().invoke(app, ["export", "longmemeval", str(smoke), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def read_like_longmemeval(entry: dict) -> None:
    """The checks LongMemEval's loaders imply, on one entry; an assertion names what they would trip on."""
    assert set(ENTRY_KEYS) <= set(entry)
    ids, dates, sessions = entry["haystack_session_ids"], entry["haystack_dates"], entry["haystack_sessions"]
    assert len(ids) == len(dates) == len(sessions) > 0
    for when in [*dates, entry["question_date"]]:
        assert datetime.strptime(when, DATE).strftime(DATE) == when
    assert dates == sorted(dates) and dates[-1] <= entry["question_date"]
    assert entry["question_type"] in LME_TYPES
    assert isinstance(entry["answer"], str) and entry["answer"]
    corpus = []
    for sid, session in zip(ids, sessions, strict=True):
        assert isinstance(sid, str) and session
        for i, turn in enumerate(session):
            assert turn["role"] in ("user", "assistant") and isinstance(turn["content"], str)
            corpus.append(f"{sid}_{i + 1}")
            if "answer" in sid:
                assert type(turn["has_answer"]) is bool  # every turn of an evidence session, read without .get
            else:
                assert "has_answer" not in turn
    assert len(set(corpus)) == len(corpus)
    correct = [sid for sid in ids if "answer" in sid]
    assert correct == entry["answer_session_ids"]
    assert set(entry["answer_session_ids"]) <= set(ids)
    assert all(sid.startswith("answer_") for sid in correct)
    for sid, session in zip(ids, sessions, strict=True):
        if "answer" in sid:
            assert any(t["has_answer"] for t in session)
    assert ("_abs" in entry["question_id"]) == (not correct)


def test_every_entry_reads_like_longmemeval_and_each_budget_has_its_file(smoke, exported):
    ds = load(smoke)
    files = sorted(p.name for p in exported.glob("*.json"))
    assert files == ["longmemeval_1500.json", "longmemeval_2000.json"]
    assert f"run_generation.py --in_file {exported / 'longmemeval_1500.json'} " in (exported / "README.md").read_text()
    total = 0
    for name in files:
        entries = json.loads((exported / name).read_text(encoding="utf-8"))
        assert isinstance(entries, list)
        assert len({e["question_id"] for e in entries}) == len(entries)
        for entry in entries:
            read_like_longmemeval(entry)
        total += sum("derived_from" not in e for e in entries)
    assert total == len(ds.placements)


def test_the_haystack_is_the_history_before_the_anchor_and_the_answer_is_the_correct_option(smoke, exported):
    ds = load(smoke)
    queries = {q.query_id: q for q in ds.queries}
    placements = {(p.context_id, p.query_id): p for p in ds.placements}
    for path in exported.glob("*.json"):
        for entry in json.loads(path.read_text(encoding="utf-8")):
            if "derived_from" in entry:
                continue  # test_derived_entries_...
            q = queries[entry["question_id"].removesuffix("_abs")]
            p = placements[(entry["context_id"], q.query_id)]
            visible = [m for m in ds.materialize_context(p.context_id, upto=p.end_index) if m.role != "system"]
            flat = [(t["role"], t["content"]) for s in entry["haystack_sessions"] for t in s]
            assert flat == [(m.role, m.content) for m in visible]
            assert entry["answer"] == q.options[q.correct_index].text
            assert entry["options"][q.correct_index] == f"{entry['correct_option']} {entry['answer']}"
            assert entry["question_date"] == lme_date(q.as_of)
            marked = {(sid.removeprefix("answer_"), i) for sid, s in
                      zip(entry["haystack_session_ids"], entry["haystack_sessions"], strict=True)
                      for i, t in enumerate(s) if t.get("has_answer")}
            assert marked == {(e.session_id, e.turn_index) for e in q.evidence}


def test_a_query_without_evidence_turns_is_an_abstention_entry(smoke):
    ds = load(smoke)
    p = ds.placements[0]
    q = next(q for q in ds.queries if q.query_id == p.query_id).model_copy(update={"evidence": []})
    context = next(c for c in ds.contexts if c.context_id == p.context_id)
    entry = longmemeval_entry(q, p, context, [ds.session(sid) for sid in context.session_ids])
    assert entry["question_id"] == f"{q.query_id}_abs" and entry["answer_session_ids"] == []
    read_like_longmemeval(entry)
    assert all("has_answer" not in t for s in entry["haystack_sessions"] for t in s)


def test_evidence_in_two_sessions_makes_a_recall_query_multi_session(smoke):
    ds = load(smoke)
    p = max(ds.placements, key=lambda p: p.end_index)
    context = next(c for c in ds.contexts if c.context_id == p.context_id)
    sessions = [ds.session(sid) for sid in context.session_ids]
    seen = [s for s in haystack(context, sessions, p.end_index) if s.session.kind == "topic"][:2]
    q = next(q for q in ds.queries if q.query_id == p.query_id).model_copy(update={
        "type": "recall_user_shared_facts",
        "evidence": [Evidence(session_id=s.session.session_id, turn_index=0) for s in seen]})
    assert len(seen) == 2
    assert longmemeval_entry(q, p, context, sessions)["question_type"] == "multi-session"
    one = q.model_copy(update={"evidence": q.evidence[:1]})
    assert longmemeval_entry(one, p, context, sessions)["question_type"] == "single-session-user"


def test_dates_use_english_weekdays_and_budget_selects_one_file(smoke, tmp_path):
    assert lme_date(datetime(2023, 5, 30, 23, 40)) == "2023/05/30 (Tue) 23:40"
    result = CliRunner().invoke(app, ["export", "longmemeval", str(smoke), "--out", str(tmp_path), "--budget", "1500"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".personagen-out") == ["README.md", "longmemeval_1500.json"]
    result = CliRunner().invoke(app, ["export", "longmemeval", str(smoke), "--out", str(tmp_path), "--budget", "3k"])
    assert result.exit_code == 2 and "--budget 3,000" in result.output and "budgets: 1,500, 2,000" in result.output


def test_no_entry_is_truncated_by_the_reader_and_its_prompt_fits_the_model(smoke, exported):
    """run_generation.py's JSON history, rebuilt as it builds it, within max_retrieval_length for a model of the
    budget's size (126,200 at 128k: 128,000 - gen_length 800 - 1000); the whole prompt within the budget."""
    ds = load(smoke)
    for budget in sorted({c.budget_tokens for c in ds.contexts}):
        cap = fit.lme_history_cap(budget)
        entries = json.loads((exported / f"longmemeval_{budget}.json").read_text(encoding="utf-8"))
        assert entries
        for entry in entries:
            prompt, truncated = lme_prompt(entry, cap)
            assert not truncated, entry["question_id"]
            assert count_tokens(lme_history(entry)) <= cap
            assert count_tokens(prompt) + fit.lme_reserve(budget) - fit.LME_PROMPT_RESERVE <= budget
    assert fit.lme_history_cap(128_000) == 126_200 and fit.lme_history_cap(32_000) == 30_200


def test_a_history_over_the_cap_is_what_the_reader_truncates(smoke, exported):
    """The rebuilt reader does cut: an entry's history at a cap one token short is truncated."""
    entry = json.loads((exported / "longmemeval_2000.json").read_text(encoding="utf-8"))[-1]
    n = count_tokens(lme_history(entry))
    assert lme_prompt(entry, n)[1] is False and lme_prompt(entry, n - 1)[1] is True


def _print_qa_metrics(entries: list[dict]) -> float:
    """LongMemEval's print_qa_metrics.py task average, every answer judged right: nan unless all six types occur."""
    type2acc = {t: [] for t in ["single-session-user", "single-session-preference", "single-session-assistant",
                                "multi-session", "temporal-reasoning", "knowledge-update"]}
    for entry in entries:
        type2acc[entry["question_type"]].append(1)
    return float(np.mean([np.mean(v) for v in type2acc.values()]))


def test_every_export_has_all_six_types_so_the_task_average_is_a_number(exported):
    for path in exported.glob("*.json"):
        entries = json.loads(path.read_text(encoding="utf-8"))
        assert {e["question_type"] for e in entries} == LME_TYPES, path.name
        assert _print_qa_metrics(entries) == 1.0
        derived = [e for e in entries if "derived_from" in e]
        assert 0 < len(derived) < len(entries) / 2  # beside our own questions, not above them


def test_derived_entries_rest_on_their_marked_turns_in_the_parents_haystack(smoke, exported):
    ds = load(smoke)
    versions = {v.key: v for v in ds.preferences}
    seen = Counter()
    for path in exported.glob("*.json"):
        entries = json.loads(path.read_text(encoding="utf-8"))
        parents = {e["question_id"].removesuffix("_abs"): e for e in entries if "derived_from" not in e}
        for e in (e for e in entries if "derived_from" in e):
            parent = parents[e["derived_from"]]
            plain = lambda x: [[(t["role"], t["content"]) for t in s] for s in x["haystack_sessions"]]  # noqa: E731
            assert plain(e) == plain(parent)
            assert [i.removeprefix("answer_") for i in e["haystack_session_ids"]] == [
                i.removeprefix("answer_") for i in parent["haystack_session_ids"]]
            assert e["haystack_dates"] == parent["haystack_dates"] and e["question_date"] == parent["question_date"]
            marked = [(d, t) for d, sid, s in zip(e["haystack_dates"], e["haystack_session_ids"], e["haystack_sessions"],
                                                  strict=True) for t in s if t.get("has_answer")]
            if e["question_type"] == "temporal-reasoning":
                (d1, first), (d2, second) = marked
                days = (datetime.strptime(d2, DATE).date() - datetime.strptime(d1, DATE).date()).days
                assert e["answer"] == f"{days} days" and days > 0
                assert first["role"] == second["role"] == "user"
            else:
                ((_, reply),) = marked
                assert reply["role"] == "assistant" and e["answer"] == reply["content"]
            seen[e["question_type"]] += 1
    assert seen["temporal-reasoning"] and seen["single-session-assistant"]
    assert versions  # the versions the questions name come from the dataset's own tables


def test_a_temporal_question_names_the_two_stances_of_one_item(smoke):
    ds = load(smoke)
    entries = [e for c in {c.budget_tokens for c in ds.contexts}
               for e in longmemeval_entries(ds, [x for x in ds.contexts if x.budget_tokens == c])
               if e["question_type"] == "temporal-reasoning"]
    items = {v.item for v in ds.preferences if v.version > 1}
    assert entries and all(any(f" {i} and the day" in e["question"] for i in items) for e in entries)
    assert all(e["question"].startswith("How many days passed between the day I first told you that I ") for e in entries)
