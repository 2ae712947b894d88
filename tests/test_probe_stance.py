"""The option-only probe, the adversarial filter, the stance checker, the routine banks, and the
abstention / no-change items (labelled correctly by construction, checked against the turns)."""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path

import pytest

from pipeline.catalog import load_taxonomy
from pipeline.checks.stance import expressed, stance_problem
from pipeline.config import load_config
from pipeline.cues import implicit_problem
from pipeline.llm import LLM
from pipeline.run.persona_text import build_persona_text
from pipeline.s1_personas.sample_personas import sample_personas
from pipeline.s3_text.beats import Beat, beat_problem, fallback_exchange
from pipeline.s4_queries.facts import Facts
from pipeline.s4_queries.filtering import ProbeFailed, filter_queries
from pipeline.s4_queries.gates import OUTDATED_TYPES, structural_problems
from pipeline.s4_queries.generate_queries import generate_queries
from pipeline.s4_queries.plan import persona_facts
from pipeline.s4_queries.probe import run_probe
from pipeline.tokens import count_tokens
from schemas.llm import LLMSettings
from schemas.query import Evidence, Option, Query

WORDS = "amber birch cedar delta ember fjord grove heath inlet juniper kelp larch marsh nectar onyx".split()


def synthetic(n_personas: int, per: int, marker: str | None, seed: int = 0) -> list[Query]:
    """Queries whose options are random words; with ``marker``, the correct option alone carries it."""
    rng = random.Random(seed)
    out = []
    for p in range(n_personas):
        for k in range(per):
            correct = rng.randrange(4)
            texts = [" ".join(rng.sample(WORDS, 5)) for _ in range(4)]
            if marker:
                texts[correct] += f" {marker}"
            else:
                texts = [t + " " + rng.choice(WORDS) for t in texts]
            options = [Option(text=t, role="correct" if i == correct else "generic", grounding=["x"])
                       for i, t in enumerate(texts)]
            out.append(Query(query_id=f"q{p}_{k}", persona_id=f"p{p}", type="suggest_new_ideas", topic="t",
                             as_of=datetime(2025, 1, 1), question="What would you suggest for me?", options=options,
                             correct_index=correct, evidence=[Evidence(session_id="s", turn_index=0)]))
    return out


def test_probe_catches_a_planted_marker():
    result = run_probe(synthetic(20, 10, marker="zebra"), folds=5, rounds=1)
    assert result.accuracy > 0.9
    assert len(result.leaks()) > 150


def test_probe_stays_near_chance_without_a_leak():
    result = run_probe(synthetic(20, 10, marker=None), folds=5, rounds=2)
    assert 0.1 < result.accuracy < 0.4
    assert set(result.by_type) == {"suggest_new_ideas"}


def test_probe_needs_two_personas():
    assert run_probe(synthetic(1, 5, marker="zebra")).accuracy is None


def test_filter_fails_closed_when_the_leak_cannot_be_redrawn():
    config = load_config("default", n_personas=20)
    with pytest.raises(ProbeFailed, match="nothing published"):
        filter_queries(synthetic(20, 10, marker="zebra"), {}, config=_budget(config, 0.0))


def test_filter_leaves_a_clean_set_alone():
    config = load_config("default", n_personas=20)
    queries = synthetic(20, 10, marker=None)
    kept, report = filter_queries(queries, {}, config=_budget(config, 0.0, max_accuracy=0.5))
    assert kept == queries and report.dropped == {} and report.before[0].accuracy is not None


def _budget(config, budget: float, max_accuracy: float = 0.3):
    probe = config.queries.probe.model_copy(update={"filter_budget": budget, "max_accuracy": max_accuracy})
    return config.model_copy(update={"queries": config.queries.model_copy(update={"probe": probe})})


@pytest.mark.parametrize(("text", "item", "stance", "ok"), [
    ("I love my life, and I love my love of Korean fried chicken", "Korean fried chicken", "dislike", False),
    ("I used to love craft beer, but now I can't stand it", "craft beer", "dislike", True),
    ("I used to love craft beer, but now I can't stand it", "craft beer", "like", False),
    ("I am not a fan of jazz any more.", "jazz", "dislike", True),
    ("I have gone off sushi lately.", "sushi", "dislike", True),
    ("I no longer enjoy hiking.", "hiking", "dislike", True),
    ("I no longer enjoy hiking.", "hiking", "like", False),
    ("I really enjoy hiking.", "hiking", "like", True),
    ("I don't really like opera.", "opera", "dislike", True),
    ("I can't get enough of green tea.", "green tea", "like", True),
    ("Things like jazz are on the radio.", "jazz", "like", False),
    ("I love cooking, but I can't stand spicy hotpot.", "spicy hotpot", "dislike", True),
])
def test_stance_checker_cases(text, item, stance, ok):
    assert (stance_problem(text, item, stance) is None) == ok


def test_expressed_reads_negations():
    assert expressed("I don't enjoy it") == {"dislike"}
    assert expressed("I never avoid it") == {"like"}
    assert expressed("We talked about the weather.") == set()


def test_every_routine_summary_expresses_its_stance():
    banks = load_taxonomy().routine_summaries
    assert set(banks) == {"like", "dislike"}
    for stance, bank in banks.items():
        for summary in bank:
            assert "{item}" in summary
            text = "By the way, I " + summary.replace("{item}", "craft beer tastings") + "."
            assert stance_problem(text, "craft beer tastings", stance) is None, summary


@pytest.mark.parametrize("kind", ["initial_preference", "preference_update", "routine"])
@pytest.mark.parametrize("stance", ["like", "dislike"])
def test_fallback_turns_pass_the_stance_check(kind, stance):
    beat = Beat(kind=kind, topic="foodRecommendation", item="craft beer tastings", stance=stance,
                reason="I love how it brings people together.", event="tried craft beer tastings again",
                pref_versions=["p@1"], event_ids=["e"])
    user, assistant = fallback_exchange(beat, "food")
    assert beat_problem(beat, user, assistant, unvoiced=[], max_tokens=200, count=count_tokens) is None


@pytest.fixture(scope="module")
def personas(tmp_path_factory):
    config = load_config("default", n_personas=6, seed=5)
    llm = LLM(LLMSettings(llm="fake", cache_path=Path(tmp_path_factory.mktemp("c")) / "cache.sqlite",
                          backoff_s=0, backoff_max_s=0))
    out = []
    for seed in sample_personas(config.n_personas, run_seed=config.seed, settings=config.personas):
        text = build_persona_text(seed, config=config, llm=llm)
        queries, _ = generate_queries(text.persona, text.timeline, text.sessions, llm=llm, config=config,
                                      inventory=text.inventory)
        out.append((config, text, queries))
    return out


def test_routines_never_contradict_their_version(personas):
    for _, text, _ in personas:
        versions = {p.key: p for p in text.timeline.preferences}
        for e in text.timeline.events:
            if e.kind == "routine":
                v = versions[e.pref_refs[0]]
                assert stance_problem(f"I {e.summary}.", v.item, v.stance) is None, e.summary


def test_abstention_and_no_change_items_are_true_by_construction(personas):
    forms = set()
    for config, text, queries in personas:
        facts: Facts = persona_facts(text.persona, text.timeline, text.sessions, config=config, inventory=text.inventory)
        for q in queries:
            assert structural_problems(q, facts) == [], q.query_id
            form = q.provenance["form"]
            forms.add((q.type, form))
            correct = q.options[q.correct_index]
            if form == "abstention":
                assert q.abstains() and not q.evidence
                what = correct.grounding[0].removeprefix("absent:")
                turns = [t.content for s in text.sessions for t in s.turns]
                if not what.startswith("topic:"):
                    assert not any(what.casefold() in t.casefold() for t in turns)
            if form == "no_change":
                pref = correct.grounding[0].split("@")[0]
                assert facts.updates(pref, q.as_of) == 0 and q.evidence
            if q.n_pref_updates and q.type in OUTDATED_TYPES:
                assert any(o.role == "outdated_preference" for o in q.options)
    assert ("track_full_preference_evolution", "no_change") in forms
    assert any(f == "abstention" for _, f in forms)


def test_every_user_turn_voicing_a_version_says_its_stance_or_shows_it_unnamed(personas):
    for _, text, _ in personas:
        versions = {p.key: p for p in text.timeline.preferences}
        for s in text.sessions:
            for t in s.turns:
                if t.role == "user" and t.pref_versions and t.voicing == "implicit":  # shown, never said
                    v = versions[t.pref_versions[-1]]
                    assert implicit_problem(t.content, None, v.item, "") is None, t.content
                elif t.role == "user" and t.pref_versions:
                    v = versions[t.pref_versions[-1]]
                    assert stance_problem(t.content, v.item, v.stance) is None, t.content


def test_a_query_redrawn_to_no_avail_is_dropped_within_the_same_budget(monkeypatch):
    import pipeline.s4_queries.filtering as filtering

    monkeypatch.setattr(filtering, "_redrawn", lambda query, *args: query)  # no sound new draw exists
    config = _budget(load_config("default", n_personas=20), 0.3, max_accuracy=1.0)
    probe = config.queries.probe.model_copy(update={"max_type_accuracy": 1.0 - 1e-9, "filter_passes": 1})
    config = config.model_copy(update={"queries": config.queries.model_copy(update={"probe": probe})})
    queries = synthetic(20, 10, marker="zebra")
    kept, report = filter_queries(queries, {}, config=config)
    # every query leaks: the budget (60 queries) is spent once on redraws, and the same queries are then dropped
    assert sum(report.dropped.values()) == 60 == len(queries) - len(kept)
