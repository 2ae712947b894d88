"""The eval's context modes: what history each sends (oracle, recent, rag), and that none reads past the
question or, for rag, the options and labels."""

from __future__ import annotations

import json

import pytest

from pipeline.dataset import load
from pipeline.evaluation.evaluate import EvalSettings, Views, evaluate, question_message, select_items
from pipeline.evaluation.history import (
    MODES,
    HistorySettings,
    context_view,
    history_indices,
    history_tokens,
    rag_units,
)
from pipeline.evaluation.retrieval import scores, terms, top_k
from pipeline.llm import LLM
from schemas.llm import LLMSettings
from schemas.query import Option
from tests.support.eval_data import publish_tiny


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return load(publish_tiny(tmp_path_factory.mktemp("modes")))


@pytest.fixture(scope="module")
def items(ds):
    return select_items(ds, EvalSettings())


def _turn_index(view, session_id: str, turn_index: int) -> int:
    segment = next(s for s in view.segments if s.session_id == session_id)
    return segment.first_turn + turn_index


def test_a_view_holds_the_materialized_messages_and_the_placement_token_counts(ds):
    for context in ds.contexts:
        view = context_view(ds, context.context_id)
        assert view.messages == ds.materialize_context(context.context_id)
        bounds = [view.head] + [b for s in view.segments for b in (s.start, s.stop)] + [len(view.messages)]
        assert bounds == sorted(bounds) and all(a == b for a, b in zip(bounds[0::2], bounds[1::2], strict=True))
        assert all(view.messages[s.start].role == "system" for s in view.segments)  # each session opens with its date
        for p in (p for p in ds.placements if p.context_id == context.context_id):
            assert history_tokens(view, list(range(p.end_index))) == p.context_tokens


def test_oracle_holds_every_evidence_turn_its_sessions_dates_and_nothing_after_the_question(ds, items):
    views = Views(ds)
    for item in items:
        view = views.get(item.placement.context_id)
        indices = history_indices(view, item.placement, item.query, "oracle", HistorySettings())
        assert indices == sorted(set(indices)) and max(indices) < item.placement.end_index
        evidence = {_turn_index(view, e.session_id, e.turn_index) for e in item.query.evidence}
        assert evidence <= set(indices)
        kept = {s.session_id for s in view.segments if set(range(s.start, s.stop)) & set(indices)}
        assert kept == {e.session_id for e in item.query.evidence}
        for segment in (s for s in view.segments if s.session_id in kept):
            assert segment.start in indices  # the session's date message
        assert indices[:view.head] == list(range(view.head))


def test_an_abstention_gets_no_session_in_oracle_mode(ds, items):
    item = items[0]
    view = context_view(ds, item.placement.context_id)
    abstention = item.query.model_copy(update={"evidence": []})
    assert history_indices(view, item.placement, abstention, "oracle", HistorySettings()) == list(range(view.head))


def test_recent_keeps_the_latest_whole_turns_that_fit_with_their_dates(ds, items):
    budget = 300
    for item in items[::5]:
        view = context_view(ds, item.placement.context_id)
        end = item.placement.end_index
        indices = history_indices(view, item.placement, item.query, "recent", HistorySettings(recent_tokens=budget))
        turns = [i for i in indices if view.messages[i].role != "system"]
        assert turns and turns == [i for i in range(turns[0], end) if view.messages[i].role != "system"]
        assert sum(view.tokens[i] for i in turns) <= budget
        before = max((i for i in range(turns[0]) if view.messages[i].role != "system"), default=None)
        if before is not None:
            assert sum(view.tokens[i] for i in turns) + view.tokens[before] > budget
        dated = {s.start for s in view.segments if set(range(s.first_turn, s.stop)) & set(turns)}
        assert dated <= set(indices)


@pytest.mark.parametrize("granularity", ["session", "turn"])
def test_rag_never_reads_the_options_or_the_labels(ds, items, granularity):
    """Options rewritten to the evidence turns' words, the key and the evidence moved: the same retrieval."""
    settings = HistorySettings(granularity=granularity, k=2)
    changed = 0
    for item in items:
        view = context_view(ds, item.placement.context_id)
        query = item.query
        evidence = " ".join(ds.session(e.session_id).turns[e.turn_index].content for e in query.evidence)
        poisoned = query.model_copy(update={
            "options": [Option(text=f"{evidence} {i}", role="correct" if i == 0 else "generic") for i in range(4)],
            "correct_index": 0, "evidence": [], "type": "generalize_to_new_scenarios"})
        same = history_indices(view, item.placement, query, "rag", settings)
        assert history_indices(view, item.placement, poisoned, "rag", settings) == same
        asked = query.model_copy(update={"question": evidence})
        changed += history_indices(view, item.placement, asked, "rag", settings) != same
    assert changed > 0  # the question does steer retrieval, so the equality above is not vacuous


def test_rag_retrieves_an_exchange_about_what_the_question_names(ds, items):
    """Asked with an evidence turn's words, the top exchange names the same item (the fake text repeats an
    item in several turns, so not always the evidence turn itself)."""
    exact = 0
    for item in items:
        view = context_view(ds, item.placement.context_id)
        ev = item.query.evidence[0]
        target = _turn_index(view, ev.session_id, ev.turn_index)
        units = rag_units(view, item.placement.end_index, view.messages[target].content,
                          HistorySettings(granularity="turn", k=1))
        (unit,) = units
        named = view.messages[target].content.split(".")[0].split(" ", 2)[2]  # "I (dis)like <item>"
        assert named in view.messages[unit.start].content and unit.stop <= item.placement.end_index
        exact += unit.start <= target < unit.stop
    assert exact > len(items) / 2


def test_bm25_ranks_by_score_then_recency():
    docs = [terms(t) for t in ("jazz records at home", "a quiet garden", "jazz concert tonight jazz", "a quiet garden",
                               "fresh bread", "a long run", "tea time", "rainy weekend")]
    assert top_k(terms("jazz"), docs, 2) == [2, 0]
    assert top_k(terms("garden"), docs, 1) == [3]  # equal scores: the later (more recent) one
    assert scores([], docs) == [0.0] * 8 and top_k(terms("jazz"), [], 3) == []


def _llm(tmp_path, script="correct") -> LLM:
    return LLM(LLMSettings(llm=f"fake?answer={script}", cache_path=tmp_path / "llm.sqlite", max_tokens=32))


def test_every_mode_sends_its_history_then_the_question_and_a_rerun_calls_nothing(tmp_path, ds):
    settings = EvalSettings(limit=6)
    llm = _llm(tmp_path)
    rows = evaluate(ds, llm=llm, settings=settings, modes=MODES)
    assert len(rows) == 6 * len(MODES) and llm.backend.calls <= len(rows)
    views, expected = Views(ds), []
    for item in select_items(ds, settings):
        for mode in MODES:
            indices = [] if mode == "no-context" else history_indices(
                views.get(item.placement.context_id), item.placement, item.query, mode, settings.history())
            history = [views.get(item.placement.context_id).messages[i] for i in indices]
            expected.append([m.model_dump() for m in (*history, question_message(item.query))])
    # every distinct prompt once: modes (and placements of one query) that send the same messages share a call
    sent = [json.dumps(r.messages) for r in llm.backend.requests]
    assert len(sent) == len(set(sent)) and set(sent) == set(map(json.dumps, expected))
    sizes = {m: sum(r.history_messages for r in rows if r.mode == m) for m in MODES}
    assert sizes["no-context"] == 0 < sizes["oracle"] < sizes["mcq"] and 0 < sizes["rag"] < sizes["mcq"]
    assert all(r.correct for r in rows)
    again = _llm(tmp_path)
    assert [r.correct for r in evaluate(ds, llm=again, settings=settings, modes=MODES)] == [True] * len(rows)
    assert again.backend.calls == 0
