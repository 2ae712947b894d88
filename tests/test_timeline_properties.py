"""Property tests: every invariant holds on the simulator's output over generated seeds and configs."""

from collections import Counter
from datetime import timedelta

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.catalog import catalog_inventory, item_fit, load_catalog, load_taxonomy
from pipeline.life_state import replay
from pipeline.rng import derive_rng
from pipeline.s1_personas.sample_personas import persona_from_seed, sample_builtin_seed
from pipeline.s2_timeline.coherence import check_timeline, short_periods
from pipeline.s2_timeline.periods import period_windows
from pipeline.s2_timeline.simulate_timeline import simulate_timeline
from schemas.config import DEFAULT_TOPICS, Period, RunConfig, TimelineSettings

INVENTORY = catalog_inventory(list(DEFAULT_TOPICS))


@st.composite
def configs(draw) -> RunConfig:
    topics = draw(st.lists(st.sampled_from(DEFAULT_TOPICS), min_size=1, max_size=6, unique=True))
    gaps = draw(st.lists(st.integers(min_value=1, max_value=400), min_size=0, max_size=4))
    offsets = [0]
    for gap in gaps:
        offsets.append(offsets[-1] + gap)
    lo = draw(st.integers(1, 4))
    timeline = TimelineSettings(
        initial_prefs_min=lo,
        initial_prefs_max=lo + draw(st.integers(0, 3)),
        topic_update_probability=draw(st.floats(0.0, 1.0)),
        cross_topic_fraction=draw(st.floats(0.0, 1.0)),
        max_topics_per_event=draw(st.integers(1, 4)),
        followup_probability=draw(st.floats(0.0, 1.0)),
        continue_chain_probability=draw(st.floats(0.0, 1.0)),
        new_item_fraction=draw(st.floats(0.0, 1.0)),
        max_versions=draw(st.integers(1, 6)),
        routine_per_period=draw(st.floats(0.0, 4.0)),
        background_events=draw(st.integers(0, 4)),
    )
    return RunConfig(
        seed=draw(st.integers(0, 2**31)),
        topics=topics,
        periods=[Period(name=f"P{i}", offset_days=o) for i, o in enumerate(offsets)],
        timeline=timeline,
    )


def simulate(config: RunConfig, index: int):
    seed = sample_builtin_seed(index, run_seed=config.seed, taxonomy=load_taxonomy())
    persona = persona_from_seed(seed, run_seed=config.seed)
    rng = derive_rng(config.seed, persona.persona_id, "simulate_timeline")
    return simulate_timeline(persona, INVENTORY, config=config, rng=rng)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), index=st.integers(0, 10_000))
def test_simulated_timelines_hold_every_invariant(config: RunConfig, index: int):
    t = simulate(config, index)
    events = {e.event_id: e for e in t.events}
    assert len(events) == len(t.events)
    g = nx.DiGraph()
    g.add_nodes_from(events)
    for edge in t.edges:
        assert events[edge.parent_event_id].time < events[edge.child_event_id].time
        g.add_edge(edge.parent_event_id, edge.child_event_id)
    assert nx.is_directed_acyclic_graph(g)
    windows = period_windows(config)
    last_end = windows[-1].events_end
    for pref, chain in t.chains().items():
        assert [v.version for v in chain] == list(range(1, len(chain) + 1))
        assert len(chain) <= config.timeline.max_versions
        for v in chain:
            if v.version > 1:
                assert v.caused_by_event_id is not None
            if v.caused_by_event_id:
                cause = events[v.caused_by_event_id]
                assert cause.time < v.valid_from and cause.kind == "preference_update"
                assert any(events[p].kind == "life_event" for p in g.predecessors(cause.event_id))
                assert v.valid_from < last_end
        for a, b in zip(chain, chain[1:], strict=False):
            assert a.valid_to == b.valid_from and a.stance != b.stance
            assert t.as_of(pref, b.valid_from) == b
            assert t.as_of(pref, b.valid_from - timedelta(seconds=1)) == a
        assert chain[-1].valid_to is None
    for e in t.events:
        window = next(w for w in windows if w.name == e.period)
        assert window.events_start <= e.time < window.events_end
        if e.kind == "routine":
            (key,) = e.pref_refs
            pref, version = key.rsplit("@", 1)
            assert t.as_of(pref, e.time).version == int(version)


@settings(max_examples=20, deadline=None)
@given(config=configs(), index=st.integers(0, 10_000))
def test_same_seed_same_timeline(config: RunConfig, index: int):
    assert simulate(config, index) == simulate(config, index)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), index=st.integers(0, 10_000))
def test_life_events_fit_the_life_state_and_every_change_follows_its_effect(config: RunConfig, index: int):
    """Replayed in time order from the sampled attributes, no life event breaks a precondition or repeats;
    every change turns an item its event names, by the event's effect, on a facet the item carries, with the
    stance in its direction."""
    seed = sample_builtin_seed(index, run_seed=config.seed, taxonomy=load_taxonomy())
    t = simulate(config, index)
    lives = [e.summary for e in t.events if e.kind == "life_event"]
    assert replay(seed.attributes, lives, load_taxonomy()) == []
    persona = persona_from_seed(seed, run_seed=config.seed)  # and the whole life holds together, for any periods
    assert check_timeline(persona, t, load_taxonomy(), config.periods[0].name, short_periods(config)) == []
    facets = load_catalog().item_facets()
    versions = {p.key: p for p in t.preferences}
    specs = load_taxonomy().event_specs()
    by_id = {e.event_id: e for e in t.events}
    for e in t.events:
        if e.kind != "preference_update":
            continue
        new = versions[e.pref_refs[-1]]
        assert e.facet in facets[(new.topic, new.item)]
        assert new.stance == ("like" if e.direction == "+" else "dislike")
        cause = by_id[e.cause_event_id]
        effects = specs[cause.summary][1].parsed_effects(load_taxonomy().topic_aliases)
        assert (new.topic, e.facet, e.direction) in {(x.topic, x.facet, x.direction) for x in effects}
        assert new.item in specs[cause.summary][1].items  # only an item the event names
    fits = item_fit(load_catalog(), seed.attributes)
    for v in t.preferences:  # nobody holds an item outside the ages (no 85-year-old climber) or genders it fits
        assert fits(v.topic, v.item), (v.item, seed.attributes.age, seed.attributes.gender_identity)


def test_a_plan_of_60_personas_spreads_its_event_summaries():
    from pipeline.config import load_config
    from pipeline.run.plan import build_plan

    plan = build_plan(load_config("default", n_personas=60, seed=7))
    per_persona = Counter(s for t in plan.timelines for s in {e.summary for e in t.events if e.kind == "life_event"})
    assert len(per_persona) >= 200
    assert max(per_persona.values()) <= 0.2 * 60


def test_nobody_who_stopped_drinking_is_drawn_an_event_that_pushes_drink_up():
    """Giving up alcohol (or starting at a mosque) sets the life state `drinking: abstains`; every event whose
    effects push alcohol or wine up excludes it, so a wine diploma cannot follow "gave up alcohol for good"."""
    tax = load_taxonomy()
    seed = next(s for s in (sample_builtin_seed(i, run_seed=3, taxonomy=tax) for i in range(200))
                if 25 <= s.attributes.age <= 80)
    lives = ["gave up alcohol for good", "became a regular at a local pub quiz"]
    assert replay(seed.attributes, lives, tax) == ["'became a regular at a local pub quiz': drinking is abstains"]
    pushing = [summary for summary, (_, spec) in tax.event_specs().items()
               if any(e.facet in ("alcohol", "wine") and e.direction == "+" for e in spec.parsed_effects(tax.topic_aliases))]
    specs = tax.event_specs()
    assert pushing and all("abstains" in specs[s][1].excludes.get("drinking", [])
                           or specs[s][1].requires.get("drinking") == ["drinks"] for s in pushing)
