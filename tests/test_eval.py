"""`personagen eval` over a small fake-backend dataset: scripted judges, skips, CIs, outputs, resume."""

from __future__ import annotations

import hashlib
import json
import random

import pyarrow.parquet as pq
import pytest

from pipeline.dataset import load
from pipeline.evaluation.evaluate import (
    EvalSettings,
    default_window,
    evaluate,
    question_message,
    run_eval,
    run_name,
    select_items,
)
from pipeline.evaluation.summary import EvalRow, accuracy, bootstrap_ci, distance_bucket
from pipeline.llm import LLM
from pipeline.llm.errors import PromptTooLong
from pipeline.tokens import message_tokens
from schemas.llm import LLMSettings
from tests.support.eval_data import publish_tiny


@pytest.fixture(scope="module")
def version(tmp_path_factory):
    return publish_tiny(tmp_path_factory.mktemp("eval"))


@pytest.fixture(scope="module")
def ds(version):
    return load(version)


def make_llm(tmp_path, script: str, **settings) -> LLM:
    return LLM(LLMSettings(llm=f"fake?answer={script}", cache_path=tmp_path / "llm.sqlite", max_tokens=64, **settings))


def _contains_point(summary) -> bool:
    slices = [summary.overall] + [a for group in summary.groups.values() for a in group]
    return all(a.ci_low <= a.accuracy <= a.ci_high for a in slices)


def test_a_judge_that_always_answers_correctly_scores_100_percent(tmp_path, version, ds):
    run = run_eval(version, llm=make_llm(tmp_path, "correct"), settings=EvalSettings())
    s = run.summary
    assert s.n_items == len(ds.placements) == s.n_scored
    assert s.overall.accuracy == 1.0 and (s.overall.ci_low, s.overall.ci_high) == (1.0, 1.0)
    assert s.n_skipped == s.n_unparsed == s.n_failed == 0
    assert _contains_point(s)
    assert {a.key for a in s.groups["budget"]} == {"budget=2k", "budget=4k"}


def test_a_judge_that_always_answers_a_scores_the_share_of_correct_answers_in_position_a(tmp_path, version, ds):
    queries = {q.query_id: q for q in ds.queries}
    share = sum(queries[p.query_id].correct_index == 0 for p in ds.placements) / len(ds.placements)
    run = run_eval(version, llm=make_llm(tmp_path, "a"), settings=EvalSettings())
    assert 0 < share < 1
    assert run.summary.overall.accuracy == pytest.approx(share)
    assert _contains_point(run.summary)
    rows = pq.read_table(run.path / "results.parquet").to_pylist()
    assert {r["parsed_letter"] for r in rows} == {"a"}
    assert all(r["correct"] == (r["correct_position"] == 0) for r in rows)


def test_unparseable_answers_count_wrong_and_are_recorded(tmp_path, version):
    run = run_eval(version, llm=make_llm(tmp_path, "none"), settings=EvalSettings(limit=5))
    assert run.summary.n_unparsed == run.summary.n_scored == 5 and run.summary.overall.accuracy == 0.0
    rows = pq.read_table(run.path / "results.parquet").to_pylist()
    assert all(r["status"] == "unparsed" and r["prediction"] and r["parsed_letter"] is None for r in rows)


def test_a_context_longer_than_the_window_is_skipped_and_counted(tmp_path, ds):
    llm = make_llm(tmp_path, "correct")
    settings = EvalSettings(window=3000)
    items = select_items(ds, settings)
    too_long = [i for i in items if i.placement.context_tokens + message_tokens(question_message(i.query).content) + 64
                > 3000]
    assert 0 < len(too_long) < len(items)
    rows = evaluate(ds, llm=llm, settings=settings)
    skipped = [r for r in rows if r.status == "skipped"]
    assert {r.query_id + r.context_id for r in skipped} == {i.query.query_id + i.placement.context_id for i in too_long}
    assert all("> window 3,000" in r.skipped_reason and r.prediction is None for r in skipped)
    sent = {json.dumps(req.messages) for req in llm.backend.requests}  # placements sending the same prompt share it
    assert llm.backend.calls == len(sent) <= len(items) - len(too_long)
    assert all(r.status == "answered" for r in rows if r not in skipped)
    assert all(len("".join(m["content"] for m in req.messages)) > 0 for req in llm.backend.requests)


def test_skipped_rows_are_left_out_of_accuracy_and_named_in_the_table(tmp_path, version):
    run = run_eval(version, llm=make_llm(tmp_path, "correct"), settings=EvalSettings(window=3000), name="w3k")
    s = run.summary
    assert s.n_skipped > 0 and s.n_scored == s.n_items - s.n_skipped and s.overall.n == s.n_scored
    assert s.overall.accuracy == 1.0
    assert f"{s.n_skipped} skipped (longer than the window)" in run.markdown
    assert run.path == version / "evals" / "w3k"


def test_mcq_sends_the_history_up_to_the_placement_then_the_question(tmp_path, ds):
    llm = make_llm(tmp_path, "correct")
    evaluate(ds, llm=llm, settings=EvalSettings(limit=4))
    expected = []
    for item in select_items(ds, EvalSettings(limit=4)):
        history = ds.materialize_context(item.placement.context_id, item.placement.end_index)
        expected.append([m.model_dump() for m in (*history, question_message(item.query))])
    sent = [r.messages for r in llm.backend.requests]
    assert sorted(map(json.dumps, sent)) == sorted(map(json.dumps, expected))
    assert all(r.free_text for r in llm.backend.requests)
    last = sent[0][-1]["content"]
    assert "\n(a) " in last and "\n(d) " in last and "<final_answer>" in last


def test_no_context_mode_sends_only_the_question(tmp_path, ds):
    llm = make_llm(tmp_path, "b")
    rows = evaluate(ds, llm=llm, settings=EvalSettings(mode="no-context", limit=6))
    questions = {r.query_id for r in rows}  # a query placed in two contexts asks the same question once
    assert [len(r.messages) for r in llm.backend.requests] == [1] * len(questions) and len(rows) == 6
    assert all(r.prompt_tokens < 200 for r in rows)


def test_a_rerun_resumes_from_the_cache_without_calling_the_model(tmp_path, version):
    first = run_eval(version, llm=make_llm(tmp_path, "c"), settings=EvalSettings(limit=6), name="resume")
    again = make_llm(tmp_path, "c")
    second = run_eval(version, llm=again, settings=EvalSettings(limit=6), name="resume")
    assert again.backend.calls == 0
    assert pq.read_table(second.path / "results.parquet")["cached"].to_pylist() == [True] * 6
    assert second.summary.overall == first.summary.overall


def test_scripts_do_not_share_cache_entries(tmp_path, ds):
    evaluate(ds, llm=make_llm(tmp_path, "a"), settings=EvalSettings(limit=3))
    rows = evaluate(ds, llm=make_llm(tmp_path, "b"), settings=EvalSettings(limit=3))
    assert {r.parsed_letter for r in rows} == {"b"}


def test_results_sit_next_to_the_version_and_leave_its_tables_untouched(tmp_path, version):
    manifest = json.loads((version / "manifest.json").read_text())
    run = run_eval(version, llm=make_llm(tmp_path, "correct"), settings=EvalSettings(budget=2000, limit=4))
    assert run.path.name == "mcq-fake-fake-answer-correct-2k"
    assert sorted(p.name for p in run.path.iterdir()) == [".personagen-out", "results.parquet", "summary.json",
                                                          "summary.md"]
    table = pq.read_table(run.path / "results.parquet")
    assert table.num_rows == 4 and set(table["budget_tokens"].to_pylist()) == {2000}
    for column in ("persona_id", "query_id", "type", "topic", "distance_bucket", "prediction", "parsed_letter",
                   "correct", "input_tokens", "output_tokens", "latency_s", "skipped_reason"):
        assert column in table.column_names
    for name, entry in manifest["files"].items():
        assert hashlib.sha256((version / name).read_bytes()).hexdigest() == entry["sha256"]
    assert "| overall | 4 | 100.0% | [100.0%, 100.0%] |" in (run.path / "summary.md").read_text()


def test_baselines_are_computed_without_a_model(tmp_path, version):
    s = run_eval(version, llm=make_llm(tmp_path, "none"), settings=EvalSettings()).summary
    assert s.baselines["random"] == 0.25
    assert 0 <= s.baselines["longest_option"] <= 1 and 0 <= s.baselines["lexical_overlap"] <= 1
    assert "| random | 25.0% |" in render(s)


def render(summary) -> str:
    from pipeline.evaluation.summary import render_markdown

    return render_markdown(summary)


def test_limit_spreads_over_budgets_and_an_unknown_budget_is_a_user_error(ds):
    from pipeline.errors import UserError

    items = select_items(ds, EvalSettings(limit=4))
    assert len(items) == 4 and {i.budget_tokens for i in items} == {2000, 4000}
    with pytest.raises(UserError, match="no placements at budget 9999"):
        select_items(ds, EvalSettings(budget=9999))


def _row(persona: str, correct: bool) -> EvalRow:
    return EvalRow(persona_id=persona, query_id="q", context_id="c", type="t", topic="x", budget_tokens=1000,
                   distance_tokens=10, distance_bucket="<1k", correct_letter="a", correct_position=0,
                   status="answered", correct=correct)


def test_bootstrap_ci_resamples_personas_and_brackets_the_estimate():
    rows = [_row(f"p{i % 5}", (i * 7) % 3 == 0) for i in range(40)]
    a = accuracy("overall", rows, n_boot=500, seed=1)
    assert a.ci_low <= a.accuracy <= a.ci_high and a.ci_low < a.ci_high
    assert a == accuracy("overall", list(reversed(rows)), n_boot=500, seed=1)
    one_persona = [_row("p", i % 2 == 0) for i in range(10)]
    assert bootstrap_ci(one_persona, n_boot=100, rng=random.Random(0)) == (0.5, 0.5)


def test_distance_buckets_and_run_names():
    assert [distance_bucket(t) for t in (0, 999, 1000, 20_000, 300_000)] == ["<1k", "<1k", "1k-4k", "16k-64k", "256k+"]
    assert run_name("local:SmolLM2-135M.gguf", EvalSettings(budget=32_000)) == "mcq-local-SmolLM2-135M.gguf-32k"


def test_default_windows_follow_the_backend(tmp_path):
    assert default_window(LLM(LLMSettings(llm="local", cache_path=tmp_path / "a.sqlite", n_ctx=2048))) == 2048
    assert default_window(LLM(LLMSettings(llm="openai:gpt-4o-mini", cache_path=tmp_path / "b.sqlite"))) == 128_000


def test_a_prompt_the_models_tokenizer_finds_too_long_is_skipped_not_failed(tmp_path, ds, monkeypatch):
    """The window is checked in o200k tokens; SmolLM2's tokenizer can count more: that call is skipped (no rerun
    would change it), not a failure that makes eval exit non-zero."""
    llm = make_llm(tmp_path, "correct")

    async def too_long(*_, **__):
        raise PromptTooLong("embedded model rejected the request: the prompt is 771 tokens, the context 760")

    monkeypatch.setattr(llm, "achat", too_long)
    rows = evaluate(ds, llm=llm, settings=EvalSettings(limit=3))
    assert rows and all(r.status == "skipped" and "in the model's tokens" in r.skipped_reason for r in rows)
