"""The relational probe (each option's relations to the other options of its query) and the gate that
decides with the estimate's uncertainty: refuses a certain leak, reports a figure from a small sample."""

from __future__ import annotations

import random
from datetime import datetime

import pytest

from pipeline.baselines import wilson
from pipeline.config import load_config
from pipeline.s4_queries.filtering import ProbeFailed, _targets, filter_queries
from pipeline.s4_queries.probe import LINEAR, OPTION_ONLY, TREES, ProbeResult, judge, run_probes
from pipeline.s4_queries.relational import query_rows
from schemas.query import Evidence, Option, Query

VOCAB = [f"{a}{b}" for a in "bcdfghklmnprstvz" for b in ("ara", "elo", "imu", "ond", "usk", "ea")]


def _query(p: int, k: int, texts: list[str], correct: int, qtype: str = "generalize_to_new_scenarios",
           question: str = "What would you keep in mind for me?") -> Query:
    options = [Option(text=t, role="correct" if i == correct else "generic", grounding=["x"]) for i, t in enumerate(texts)]
    return Query(query_id=f"q{p}_{k}_{qtype[:3]}", persona_id=f"p{p}", type=qtype, topic="t", as_of=datetime(2025, 1, 1),
                 question=question, options=options, correct_index=correct, evidence=[Evidence(session_id="s", turn_index=0)])


def _say(item: str, reason: str) -> str:
    return f"Because you {reason}, I would plan around {item}."


def item_sets(n_personas: int, per: int, *, planted: bool, seed: int = 0) -> list[Query]:
    """Four options "because REASON, ... ITEM" of random words. Planted: the correct option shares its item
    with one option and its reason with another (the only option related to two others); otherwise a
    2 x 2 of two items x two reasons, where every option shares its item with one and its reason with one."""
    rng = random.Random(seed)
    out = []
    for p in range(n_personas):
        for k in range(per):
            a, b, c = (" ".join(rng.sample(VOCAB, 2)) for _ in range(3))
            r, s, t = (" ".join(rng.sample(VOCAB, 2)) for _ in range(3))
            pairs = [(a, r), (a, s), (b, r), (c, t)] if planted else [(a, r), (a, s), (b, r), (b, s)]
            order = list(range(4))
            rng.shuffle(order)
            texts = [_say(*pairs[i]) for i in order]
            correct = order.index(0) if planted else rng.randrange(4)
            out.append(_query(p, k, texts, correct))
    return out


def test_features_see_shared_clauses_prefixes_and_mirrors():
    rows = query_rows("How have my feelings developed?", [
        "At first you enjoyed tea, and at present you avoid it.",
        "At first you enjoyed tea, then you avoided it, and at present you enjoy it.",
        "At first you avoided tea, then you enjoyed it, and at present you avoid it.",
        "This is the first I am hearing of tea from you.",
    ])
    from pipeline.s4_queries import relational
    names = relational.FEATURES
    assert len(names) == len(rows[0])
    at = {n: i for i, n in enumerate(names)}
    assert rows[0][at["stance_prefix_of_other"]] == 1.0 and rows[1][at["has_stance_prefix"]] == 1.0
    assert rows[1][at["mirror"]] == 1.0 and rows[2][at["mirror"]] == 1.0 and rows[0][at["mirror"]] == 0.0
    assert rows[3][at["frame_odd_one_out"]] == 1.0 and rows[1][at["frame_odd_one_out"]] == 0.0


def test_relational_probe_finds_a_leak_the_per_option_probe_cannot_see():
    results = {r.name: r for r in run_probes(item_sets(20, 10, planted=True), folds=5, rounds=1)}
    assert results[OPTION_ONLY].accuracy < 0.4
    assert results[TREES].accuracy > 0.9 and results[LINEAR].accuracy > 0.9
    assert len(results[TREES].leaks()) > 150


def test_relational_probe_reads_chance_on_exchangeable_sets():
    for r in run_probes(item_sets(20, 10, planted=False), folds=5, rounds=2):
        assert 0.1 < r.accuracy < 0.4, r.name
        assert r.n_queries == 200 and r.n_by_type == {"generalize_to_new_scenarios": 200}


def _result(name: str, accuracy: float, n: int, by_type: dict[str, tuple[float, int]] | None = None) -> ProbeResult:
    by_type = by_type or {}
    return ProbeResult(name=name, n_queries=n, folds=5, rounds=2, accuracy=accuracy,
                       by_type={t: a for t, (a, _) in by_type.items()}, n_by_type={t: m for t, (_, m) in by_type.items()})


def test_gate_refuses_only_a_certain_leak_and_reports_the_rest():
    gate = dict(max_accuracy=0.30, max_type_accuracy=0.35, min_type_queries=30)
    certain = judge([_result(TREES, 0.45, 600)], **gate)
    assert [(f.scope, f.refuse) for f in certain] == [("overall", True)]
    assert certain[0].low == pytest.approx(wilson(0.45, 600)[0]) and certain[0].low > 0.30
    small = judge([_result(OPTION_ONLY, 0.40, 50)], **gate)  # 40% of 50: the interval reaches below 30%
    assert [(f.scope, f.refuse) for f in small] == [("overall", False)]
    few = judge([_result(LINEAR, 0.25, 400, {"track": (0.9, 20), "provide": (0.6, 200)})], **gate)
    assert {(f.scope, f.refuse) for f in few} == {("track", False), ("provide", True)}
    assert few[0].scope == "provide"  # the refused one first
    assert judge([_result(OPTION_ONLY, 0.25, 400, {"track": (0.3, 100)})], **gate) == []


def test_the_higher_probe_decides():
    gate = dict(max_accuracy=0.30, max_type_accuracy=1.0, min_type_queries=30)
    found = judge([_result(OPTION_ONLY, 0.24, 800), _result(TREES, 0.42, 800)], **gate)
    assert [(f.probe, f.refuse) for f in found] == [(TREES, True)]


def test_filter_targets_the_union_of_the_probes_confident_sets():
    queries = item_sets(2, 3, planted=True)
    ids = [q.query_id for q in queries]
    one = _result(OPTION_ONLY, 0.5, 6, {"generalize_to_new_scenarios": (0.5, 6)})
    two = _result(TREES, 0.5, 6, {"generalize_to_new_scenarios": (0.5, 6)})
    one.confident = {q: 2 * (q == ids[0]) for q in ids}
    two.confident = {q: 2 * (q in ids[1:3]) for q in ids}
    assert _targets([one, two], queries, 0.27) == sorted(ids[:3])


def _config(budget: float = 0.0, **probe):
    config = load_config("default", n_personas=20)
    settings = config.queries.probe.model_copy(update={"filter_budget": budget, **probe})
    return config.model_copy(update={"queries": config.queries.model_copy(update={"probe": settings})})


def test_filter_refuses_a_relational_leak_naming_probe_type_interval_and_what_to_do():
    with pytest.raises(ProbeFailed) as caught:
        filter_queries(item_sets(20, 10, planted=True), {}, config=_config())
    line = str(caught.value)
    assert line.startswith("queries: the relational ") and " probe answers " in line
    assert "% of all queries without the history (95% CI " in line and ", n=200), above queries.probe.max_accuracy 30%" in line
    assert "nothing published. Run with more personas or a different --seed" in line and "personagen audit" in line
    assert "; also relational " in line  # the other probe's refused figures follow the worst


def test_filter_reports_but_does_not_refuse_a_leaky_type_with_few_queries():
    clean = item_sets(20, 9, planted=False)
    leaky = [q.model_copy(update={"type": "track_full_preference_evolution", "query_id": q.query_id + "t"})
             for q in item_sets(20, 1, planted=True, seed=5)]
    kept, report = filter_queries(clean + leaky, {}, config=_config(min_type_queries=30))
    assert len(kept) == 200
    track = [f for f in report.findings if f.scope == "track_full_preference_evolution"]
    assert track and not any(f.refuse for f in track) and track[0].low > 0.35
    with pytest.raises(ProbeFailed, match="of the track_full_preference_evolution queries .* n=20.*max_type_accuracy 35%"):
        filter_queries(clean + leaky, {}, config=_config(min_type_queries=10))
