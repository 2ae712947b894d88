"""generate_queries with the fake backend: grounded labels, outdated distractors, balanced positions,
gates that fail closed, code-written fallback wording, and baselines near chance."""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

import pipeline.s4_queries.generate_queries as gq
from pipeline.baselines import baseline_report, lexical_overlap_accuracy, longest_option_accuracy
from pipeline.catalog import load_catalog, load_taxonomy
from pipeline.cli.app import app
from pipeline.config import load_config
from pipeline.llm import LLM
from pipeline.rng import derive_rng
from pipeline.run.persona_text import build_persona_text
from pipeline.s1_personas.sample_personas import sample_personas
from pipeline.s4_queries.chains import chain_set
from pipeline.s4_queries.gates import (
    OUTDATED_TYPES,
    code_wording,
    length_problem,
    overlap_problem,
    structural_problems,
    wording_problem,
)
from pipeline.s4_queries.generate_queries import QueryStats, generate_queries
from pipeline.s4_queries.plan import balanced_positions, persona_facts, plan_queries
from pipeline.s4_queries.wording import topic_situations
from pipeline.tokens import count_tokens
from schemas.llm import LLMSettings
from schemas.query import QUERY_TYPES, Evidence

TOPICS = ["foodRecommendation", "travelPlanning", "bookRecommendation", "therapy", "movieRecommendation"]


def fake_llm(tmp_path: Path, faults: str = "") -> LLM:
    return LLM(LLMSettings(llm=f"fake?{faults}" if faults else "fake", cache_path=tmp_path / "cache.sqlite",
                           backoff_s=0, backoff_max_s=0))


def config_for(n: int, seed: int = 3, **queries):
    config = load_config("default", n_personas=n, seed=seed, topics=TOPICS)
    return config.model_copy(update={"queries": config.queries.model_copy(update=queries)})


def run(config, llm, judge=None):
    """(persona text, queries, stats) for every persona of the config."""
    out = []
    for seed in sample_personas(config.n_personas, run_seed=config.seed, settings=config.personas):
        text = build_persona_text(seed, config=config, llm=llm)
        queries, stats = generate_queries(text.persona, text.timeline, text.sessions, llm=llm, config=config, judge=judge,
                                          inventory=text.inventory)  # as the pipeline calls it
        out.append((text, queries, stats))
    return out


@pytest.fixture(scope="module")
def fifty(tmp_path_factory):
    config = config_for(50)
    return config, run(config, fake_llm(tmp_path_factory.mktemp("fifty")))


def test_fifty_personas_every_kept_query_is_structurally_valid(fifty):
    config, results = fifty
    for text, queries, stats in results:
        facts = persona_facts(text.persona, text.timeline, text.sessions, config=config)
        for q in queries:
            assert structural_problems(q, facts) == [], q.query_id
            assert len(q.options) == config.queries.n_options
        assert stats.kept == len(queries)
        assert stats.kept + sum(stats.drops.values()) == stats.planned
        assert "structural" not in stats.drops


def test_fifty_personas_update_queries_carry_an_outdated_option(fifty):
    _, results = fifty
    updates = [q for _, queries, _ in results for q in queries if q.n_pref_updates and q.type in OUTDATED_TYPES]
    assert len(updates) > 250
    for q in updates:
        outdated = [o for o in q.options if o.role == "outdated_preference"]
        assert outdated and all(o.grounding for o in outdated)


def test_fifty_personas_positions_are_uniform(fifty):
    _, results = fifty
    queries = [q for _, qs, _ in results for q in qs]
    counts = Counter(q.correct_index for q in queries)
    for position in range(4):
        assert abs(counts[position] / len(queries) - 0.25) <= 0.03, counts


def test_fifty_personas_all_types_for_personas_with_changes(fifty):
    _, results = fifty
    with_changes = 0
    for text, queries, _ in results:
        # two changed preferences at least: with one, its only revisit question may fail a wording gate
        if sum(len(chain) > 1 for chain in text.timeline.chains().values()) >= 2:
            with_changes += 1
            assert {q.type for q in queries} == set(QUERY_TYPES), text.persona.persona_id
    assert with_changes >= 30


def test_fifty_personas_baselines_stay_near_chance_and_calls_stay_low(fifty):
    _, results = fifty
    queries = [q for _, qs, _ in results for q in qs]
    total = QueryStats()
    for _, _, stats in results:
        total.merge(stats)
    report = baseline_report(queries)
    print(f"\nkept {total.kept}/{total.planned}, baselines {report}, {gq.gate_report(total)}")
    assert longest_option_accuracy(queries) <= 0.30
    assert lexical_overlap_accuracy(queries) <= 0.30
    assert total.llm_calls / total.kept <= 2
    assert sum(total.drops.values()) / total.planned <= 0.05
    types = Counter(q.type for q in queries)
    assert min(types.values()) >= 100  # every type well represented


def test_anchored_queries_sit_in_the_final_session_after_their_evidence(fifty):
    _, results = fifty
    anchored = 0
    for text, queries, _ in results:
        sessions = {s.session.session_id: s for s in text.sessions}
        for q in (q for q in queries if q.anchor_session_id):
            anchored += 1
            anchor = sessions[q.anchor_session_id]
            last = max((s for s in text.sessions if s.session.topic == q.topic), key=lambda s: s.session.time)
            assert anchor is last and q.as_of == anchor.session.time
            assert anchor.turns[q.anchor_turn_index].role == "user"
            for ev in q.evidence:
                ev_session = sessions[ev.session_id].session
                assert (ev_session.time, ev.turn_index) < (anchor.session.time, q.anchor_turn_index) or \
                    ev_session.time < anchor.session.time
    assert anchored > 200


def test_persona_queries_do_not_depend_on_n(tmp_path):
    llm = fake_llm(tmp_path)
    one = run(config_for(1, seed=11), llm)[0][1]
    three = run(config_for(3, seed=11), llm)[0][1]
    assert [q.model_dump() for q in one] == [q.model_dump() for q in three]


def test_same_seed_and_cache_give_identical_queries(tmp_path):
    first = run(config_for(2, seed=5), fake_llm(tmp_path / "a"))
    second = run(config_for(2, seed=5), fake_llm(tmp_path / "a"))
    assert [q.model_dump() for _, qs, _ in first for q in qs] == [q.model_dump() for _, qs, _ in second for q in qs]


def test_faulty_model_falls_back_to_code_wording_or_drops_with_a_reason(tmp_path):
    config = config_for(3, seed=4)
    text_llm = fake_llm(tmp_path / "text")
    bad = fake_llm(tmp_path / "bad", "malformed_json=0.7&schema_violation=0.2")
    fallbacks = failures = 0  # over the three personas: which of them the faults hit depends on their prompts
    for seed in sample_personas(3, run_seed=config.seed, settings=config.personas):
        text = build_persona_text(seed, config=config, llm=text_llm)
        queries, stats = generate_queries(text.persona, text.timeline, text.sessions, llm=bad, config=config)
        facts = persona_facts(text.persona, text.timeline, text.sessions, config=config)
        fallbacks += stats.wording_fallbacks
        failures += stats.gate_failures.get("model_call", 0)
        assert all(structural_problems(q, facts) == [] for q in queries)
        fallback = [q for q in queries if q.provenance.get("wording") == "code"]
        assert len(fallback) == stats.wording_fallbacks
        assert len(stats.dropped) == sum(stats.drops.values()) == stats.planned - len(queries)
    assert fallbacks > 0 and failures > 0


def test_a_judge_that_always_knows_drops_every_query_with_its_reason(tmp_path, monkeypatch):
    config = config_for(1, seed=2)
    llm = fake_llm(tmp_path)
    monkeypatch.setattr(gq, "judge_hits", lambda query, judge, settings, rng: settings.judge_shuffles)
    ((_, queries, stats),) = run(config, llm, judge=llm)
    # every query the wording gates let through reaches the judge, which drops it; one whose code wording fails the
    # length or overlap gate first is dropped there, before any judge
    assert queries == [] and sum(stats.drops.values()) == stats.planned and stats.drops["judge"] >= stats.planned - 2
    assert set(stats.drops) <= {"judge", "length", "overlap"}
    assert all(reason.startswith(("judge:", "length:", "overlap:")) for reason in stats.dropped.values())


def test_a_chance_level_judge_keeps_queries_and_is_recorded(tmp_path):
    config = config_for(1, seed=2)
    llm = fake_llm(tmp_path)
    ((_, queries, stats),) = run(config, llm, judge=llm)
    assert stats.judge_calls >= 3 * stats.kept > 0
    assert all("judge" in q.provenance for q in queries)


def test_length_gate_uses_the_median_in_tokens():
    assert length_problem(["one two three four", "one two three five", "one two three six"], 0.25) is None
    assert length_problem(["one two three four", "one two three five", "a b c d e f g h i j k l"], 0.25)


def test_overlap_gate_rejects_only_a_unique_maximum():
    options = ["ramen every friday", "pasta on sundays", "hiking trips", "board games"]
    assert overlap_problem("Where should I get ramen on friday?", options, 0)
    assert overlap_problem("Where should I get ramen on friday?", options, 1) is None
    assert overlap_problem("Ramen or pasta on friday sundays?", options, 0) is None  # a tie
    assert overlap_problem("What should I do?", options, 2) is None


def _plans(tmp_path, n_options=4):
    config = config_for(1, seed=6, n_options=n_options)
    ((text, _, _),) = run(config, fake_llm(tmp_path))
    facts = persona_facts(text.persona, text.timeline, text.sessions, config=config)
    return facts, plan_queries(facts, settings=config.queries, rng=derive_rng(config.seed, "test"))


def test_wording_gates_reject_named_answers_and_third_person(tmp_path):
    _, plans = _plans(tmp_path)
    plan = next(p for p in plans if p.type == "acknowledge_latest_preferences")
    texts = [o.text for o in plan.options]
    assert wording_problem(plan, f"Do I still like {plan.answer}?", texts, 0.25)[0] == "answer_in_question"
    assert wording_problem(plan, "What does the user want lately?", texts, 0.25)[0] == "first_person"
    assert wording_problem(plan, plan.ask, [texts[0]] * 4, 0.25)[0] == "duplicate_options"


def test_code_wording_passes_the_length_gate_by_construction(tmp_path):
    facts, plans = _plans(tmp_path, n_options=5)
    for plan in plans:
        stretched = plan.model_copy(update={"options": [
            o.model_copy(update={"text": o.text + (" It is a long story." * 3 if i == 1 else "")})
            for i, o in enumerate(plan.options)]})
        wording = code_wording(stretched, 0.25)
        if wording is not None:
            assert length_problem(wording[1], 0.25) is None
            assert all(t.startswith(o.text) for t, o in zip(wording[1], stretched.options, strict=True))
    assert max(count_tokens(o.text) for p in plans for o in p.options) > 0
    assert all(len(p.options) == 5 for p in plans)


def test_structural_validation_catches_broken_labels(tmp_path):
    facts, plans = _plans(tmp_path)
    plan = next(p for p in plans if p.type == "revisit_reasons_behind_preference_updates" and p.n_pref_updates)
    query = plan.to_query(plan.ask, [o.text for o in plan.options], {})
    assert structural_problems(query, facts) == []
    outdated = next(i for i, o in enumerate(query.options) if o.role == "outdated_preference")
    swapped = [o.model_copy(update={"grounding": query.options[outdated].grounding}) if o.role == "correct" else o
               for o in query.options]
    assert structural_problems(query.model_copy(update={"options": swapped}), facts)
    early = query.model_copy(update={"as_of": facts.timeline.preferences[0].valid_from - timedelta(days=1)})
    assert structural_problems(early, facts)
    final = facts.final(plan.topic)
    late = Evidence(session_id=final.session.session_id, turn_index=len(final.turns) - 2)
    anchored = query.model_copy(update={"anchor_session_id": final.session.session_id, "anchor_turn_index": 0,
                                        "as_of": final.session.time, "evidence": [*query.evidence, late]})
    assert structural_problems(anchored, facts)


def test_a_wrong_reason_that_caused_the_change_is_caught(tmp_path):
    facts, plans = _plans(tmp_path)
    plan = next(p for p in plans if p.type == "revisit_reasons_behind_preference_updates" and p.n_pref_updates)
    query = plan.to_query(plan.ask, [o.text for o in plan.options], {"focal": plan.focal})
    assert structural_problems(query, facts) == []
    cause = facts.causes(plan.focal)[-1].event_id
    wrong = next(i for i, o in enumerate(query.options) if o.role == "wrong_reason")
    options = [o.model_copy(update={"grounding": [cause]}) if i == wrong else o for i, o in enumerate(query.options)]
    assert "a wrong reason the persona lived is a cause of the item, or the item changed after it" in \
        structural_problems(query.model_copy(update={"options": options}), facts)


def test_balanced_positions_cover_each_position_per_block():
    positions = balanced_positions(10, 4, random.Random(1))
    assert sorted(positions[:4]) == [0, 1, 2, 3] and sorted(positions[4:8]) == [0, 1, 2, 3]


def test_queries_cli_writes_the_table_and_reports(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["queries", "--n", "2", "--profile", "smoke", "--llm", "fake",
                                      "--out", str(out), "--cache", str(tmp_path / "cache.sqlite")])
    assert result.exit_code == 0, result.output
    assert (out / "queries.parquet").exists() and (out / "turns.parquet").exists()
    for line in ("LLM calls per kept query", "wording fallback rate", "longest option", "lexical overlap"):
        assert line in result.output


# -- exchangeable option sets (issue 23) ------------------------------------------------------------------
def _kept(fifty, qtype):
    return [q for _, queries, _ in fifty[1] for q in queries if q.type == qtype]


def _facts(fifty, persona_id):
    config, results = fifty
    text = next(t for t, _, _ in results if t.persona.persona_id == persona_id)
    return persona_facts(text.persona, text.timeline, text.sessions, config=config, inventory=text.inventory)


def test_chain_sets_are_closed_under_mirror_and_prefix_and_draw_the_role():
    mirror = lambda c: tuple("dislike" if s == "like" else "like" for s in c)  # noqa: E731
    rng, roles = random.Random(0), Counter()
    for length in (1, 2, 3):
        stances = ["like", "dislike", "like"][:length]
        for n in (3, 4):
            for _ in range(200):
                shown = [tuple(c) for c in chain_set(stances, n, rng)]
                assert shown[0] == tuple(stances) and len(set(shown)) == n
                if n == 4:  # every chain has its mirror; the longer two have their one-step prefix
                    assert all(mirror(c) in shown for c in shown)
                    long = max(map(len, shown))
                    assert all(c[:-1] in shown for c in shown if len(c) == long)
                else:  # {A, mirror of A, prefix of A}
                    assert any({a, mirror(a), a[:-1]} == set(shown) for a in shown if len(a) > 1)
                    if length > 1:
                        roles["full" if shown[0][:-1] in shown else "mirror"] += 1
    assert 0.4 < roles["full"] / sum(roles.values()) < 0.6


def test_track_always_shows_the_forgetful_reply_and_three_chains(fifty):
    for q in _kept(fifty, "track_full_preference_evolution"):
        assert sum(o.role == "forgetful" or (o.role == "correct" and q.abstains()) for o in q.options) == 1
        assert sum("all along" in o.text for o in q.options) <= 1


def _stance_of(text: str) -> str:
    """The stance a reply acts on, from the variant's verbs (enjoy / love against avoid / dislike)."""
    return "like" if re.search(r"\byou (?:still )?(?:enjoy|love)\b|which you (?:enjoy|love)", text) else "dislike"


def test_generalize_is_two_reasons_by_two_stances_about_a_situation_of_its_topic(fifty):
    for q in _kept(fifty, "generalize_to_new_scenarios"):
        reasons = Counter(o.grounding[-1] for o in q.options)
        stances = Counter(_stance_of(o.text) for o in q.options)
        assert sorted(reasons.values()) == [2, 2] and sorted(stances.values()) == [2, 2], [o.text for o in q.options]
        assert q.provenance["situation"] in topic_situations(q.topic).situations, q.provenance


def _items_named(q, facts) -> list[str]:
    """The longest item of the persona's pools each option names."""
    pool = {v.item for v in facts.timeline.preferences} | {i.name for t in facts.pools.inventory.values() for i in t}
    pool |= {v.item for _, v in facts.pools.shadow_current(q.topic)} | {i.name for i in facts.pools._items(q.topic)}
    return [max((i for i in pool if i in o.text), key=len, default="") for o in q.options]


def test_item_by_stance_designs_show_every_item_twice(fifty):
    for qtype in ("acknowledge_latest_preferences", "provide_preference_aligned_recommendations"):
        for q in _kept(fifty, qtype)[:80]:
            facts = _facts(fifty, q.persona_id)
            if qtype == "provide_preference_aligned_recommendations":  # "X over Y": the row's item is the one acted on
                items = Counter(_provide_item(o.text) for o in q.options)
            else:
                items = Counter(_items_named(q, facts))
            assert sorted(items.values()) == [2, 2], (qtype, [o.text for o in q.options])


def _provide_item(text: str) -> str:
    """The item a recommendation reply keeps or swaps out (the one its stance is about)."""
    for pattern in (r"again, as you \w+ (?:it|them), rather than", r"\brather than (.+?), as you", r"\bover (.+?), which you",
                    r"\band not (.+?), which you"):
        if m := re.search(pattern, text):
            if m.groups():
                return m.group(1)
            break
    for pattern in (r"^I would go for (.+?) again", r"^Pick (.+?), which you", r"^My pick would be (.+?), which you"):
        if m := re.search(pattern, text):
            return m.group(1)
    raise AssertionError(text)


def test_every_provide_option_recommends_one_thing_over_another(fifty):
    for q in _kept(fifty, "provide_preference_aligned_recommendations"):
        for o in q.options:
            assert re.search(r"^(I would go for|Pick|My pick would be) ", o.text) and re.search(r"rather than|over|and not", o.text)


def test_revisit_names_its_item_and_no_wrong_reason_caused_a_change_of_it(fifty):
    """Two reasons x the two stances as unchanged: every option shares its form with one other; no wrong reason is
    an event the persona lived (every one would have turned the item, and caused no version of it)."""
    seen = 0
    forms = Counter()
    for q in _kept(fifty, "revisit_reasons_behind_preference_updates"):
        facts = _facts(fifty, q.persona_id)
        pref = q.provenance["focal"]
        item = facts.timeline.versions(pref)[-1].item
        assert item in q.question  # "has not changed" is about this item only, never another of the topic
        reasons = [o for o in q.options if o.role == "wrong_reason" or (o.role == "correct" and len(o.grounding) == 2)]
        assert len(reasons) == 2 and len(q.options) == 4
        forms[q.provenance.get("form", "statement")] += 1
        causes = {c.event_id for c in facts.causes(pref)} | {f"taxonomy:{c.summary}" for c in facts.causes(pref)}
        lived = {e.summary for e in facts.timeline.events}
        for o in q.options:
            if o.role == "wrong_reason":
                assert not set(o.grounding) & causes
                assert all(g.startswith("taxonomy:") and g.removeprefix("taxonomy:") not in lived for g in o.grounding)
                seen += 1
    assert seen > 100
    assert 0.35 < forms["no_change"] / sum(forms.values()) < 0.65  # as often as the design shows "has not changed"


def test_never_held_items_are_drawn_at_the_rate_personas_hold_them(fifty):
    """A never-held item (suggest's new idea, a decoy row, an abstention's item) is drawn at the rate the reference
    personas hold it, so an item many personas hold is no sign of a held one across the dataset."""
    config, results = fifty
    facts = _facts(fifty, results[0][0].persona.persona_id)
    topic = next(t for t in facts.by_topic if len(facts.pools.fresh_items(t, random.Random(0), 99)) >= 8)
    pool = facts.pools.fresh_items(topic, random.Random(0), 99)
    holds = facts.pools.holds
    common, rare = max(pool, key=lambda i: holds.get(i, 0)), min(pool, key=lambda i: holds.get(i, 0))
    assert holds.get(common, 0) >= 2 + holds.get(rare, 0)
    drawn = Counter(facts.pools.fresh_items(topic, random.Random(k), 1)[0] for k in range(600))
    assert drawn[common] > 1.5 * drawn[rare]


def test_a_wrong_reason_is_of_the_true_causes_kind(fifty):
    """Wrong reasons of a changed preference are of its cause's kind (a minor experience beside a minor cause, no
    year abroad beside a weekend), wherever the taxonomy has enough of that kind that reach the item."""
    from pipeline.s4_queries.sources import event_kind

    same = total = 0
    for q in _kept(fifty, "generalize_to_new_scenarios"):
        facts = _facts(fifty, q.persona_id)
        cause = facts.timeline.event(next(g for g in q.options[q.correct_index].grounding if g.startswith("evt_")))
        for o in (o for o in q.options if o.role == "wrong_reason"):
            total += 1
            same += event_kind(o.grounding[0].removeprefix("taxonomy:")) == event_kind(cause.summary)
    assert total > 50 and same / total > 0.9


def test_recall_asks_about_the_topic_in_every_form(fifty):
    for q in _kept(fifty, "recall_user_shared_facts"):
        assert topic_situations(q.topic).phrase in q.question, q.question


def test_correct_stance_is_balanced_where_both_stances_are_shown(fifty):
    for qtype in ("generalize_to_new_scenarios", "provide_preference_aligned_recommendations"):
        stances = Counter(_stance_of(q.options[q.correct_index].text) for q in _kept(fifty, qtype))
        assert 0.38 < stances["like"] / sum(stances.values()) < 0.62, (qtype, stances)


def test_recall_distractors_are_of_the_answers_kind(fifty):
    lives = {s for c in load_taxonomy().life_event_categories.values() for s in c.summaries}
    checked = 0
    for q in _kept(fifty, "recall_user_shared_facts"):
        correct = q.options[q.correct_index]
        if q.abstains() or not correct.grounding:
            continue
        facts = _facts(fifty, q.persona_id)
        if facts.timeline.event(correct.grounding[0]).kind != "life_event":
            continue
        generic = [o.grounding[0].removeprefix("taxonomy:") for o in q.options if o.role == "generic"]
        assert generic and all(s in lives for s in generic), generic
        checked += 1
    assert checked >= 10  # life events are told only in a topic they belong to: fewer in a two-topic run


def _source(topic: str, item: str) -> str:
    catalog = load_catalog()
    return "catalog" if item in {i.name for i in catalog.topics[topic].items} else "model"


def test_the_second_item_of_an_item_by_stance_design_shares_the_focal_items_source(fifty):
    """A catalog name and a model-written one read differently: the decoy item comes from the focal's source."""
    same = total = 0
    for q in _kept(fifty, "provide_preference_aligned_recommendations"):
        items = {_provide_item(o.text) for o in q.options}
        sources = {_source(q.topic, i) for i in items}
        same, total = same + (len(sources) == 1), total + 1
    assert total > 50 and same / total > 0.9, (same, total)


def test_the_inventory_keeps_a_catalog_share_and_changes_run_both_ways(fifty):
    config, results = fifty
    need = math.ceil(config.text.catalog_share * config.text.inventory_size)
    directions = Counter()
    for text, _, _ in results:
        for topic, items in text.inventory.items():
            assert sum(_source(topic, i.name) == "catalog" for i in items) >= need
        for pid in {p.pref_id for p in text.timeline.preferences}:
            chain = text.timeline.versions(pid)
            if len(chain) > 1:
                directions[chain[0].stance] += 1
    # held dislikes turn too (before the catalog share, a fake run's were never turned: 0 of 594)
    assert directions["dislike"] > 0.5 * directions["like"], directions
