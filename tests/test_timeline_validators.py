"""Each validator rejects a hand-broken timeline with a message naming what is wrong."""

from datetime import datetime, timedelta

import pytest

from schemas.timeline import Event, EventEdge, PreferenceVersion, Timeline, TimelineError

T0 = datetime(2025, 1, 1, 9, 0)
P = "per_x"


def ev(eid: str, hours: int, kind: str = "life_event") -> Event:
    return Event(event_id=eid, persona_id=P, time=T0 + timedelta(hours=hours), period="WEEK", kind=kind, summary=eid)


def ver(version: int, stance: str, start: int, end: int | None, cause: str | None) -> PreferenceVersion:
    return PreferenceVersion(
        pref_id="pref_a", version=version, persona_id=P, topic="foodRecommendation", item="ramen", stance=stance,
        valid_from=T0 + timedelta(hours=start), valid_to=None if end is None else T0 + timedelta(hours=end),
        caused_by_event_id=cause,
    )


def good_parts():
    events = [ev("life", 1), ev("upd", 2, "preference_update")]
    edges = [EventEdge(parent_event_id="life", child_event_id="upd", relation="causes")]
    prefs = [ver(1, "like", -100, 3, None), ver(2, "dislike", 3, None, "upd")]
    return events, edges, prefs


def build(events, edges, prefs) -> Timeline:
    return Timeline(persona_id=P, events=events, edges=edges, preferences=prefs)


def test_valid_timeline_and_as_of():
    t = build(*good_parts())
    assert t.as_of("pref_a", T0).stance == "like"
    assert t.as_of("pref_a", T0 + timedelta(hours=3)).stance == "dislike"
    assert t.as_of("pref_a", T0 - timedelta(hours=200)) is None
    assert [e.event_id for e in t.root_causes("upd")] == ["life"]


def test_cycle_is_rejected():
    events, edges, prefs = good_parts()
    edges.append(EventEdge(parent_event_id="upd", child_event_id="life", relation="causes"))
    with pytest.raises(TimelineError, match="event graph has a cycle: (life -> upd -> life|upd -> life -> upd)"):
        build(events, edges, prefs)


def test_effect_before_cause_is_rejected():
    events, edges, prefs = good_parts()
    events[1] = ev("upd", 0, "preference_update")
    with pytest.raises(TimelineError, match="edge life -> upd: parent .* is not strictly earlier"):
        build(events, edges, prefs)


def test_version_valid_before_its_cause_is_rejected():
    events, edges, _ = good_parts()
    prefs = [ver(1, "like", -100, 1, None), ver(2, "dislike", 1, None, "upd")]
    with pytest.raises(TimelineError, match="pref_a@2: cause upd .* is not earlier than valid_from"):
        build(events, edges, prefs)


def test_overlapping_versions_are_rejected():
    events, edges, _ = good_parts()
    prefs = [ver(1, "like", -100, 5, None), ver(2, "dislike", 3, None, "upd")]
    with pytest.raises(TimelineError, match="versions 1 and 2 overlap"):
        build(events, edges, prefs)


def test_open_ended_earlier_version_overlaps():
    events, edges, _ = good_parts()
    prefs = [ver(1, "like", -100, None, None), ver(2, "dislike", 3, None, "upd")]
    with pytest.raises(TimelineError, match="overlap"):
        build(events, edges, prefs)


def test_uncaused_change_is_rejected():
    events, edges, _ = good_parts()
    prefs = [ver(1, "like", -100, 3, None), ver(2, "dislike", 3, None, None)]
    with pytest.raises(TimelineError, match="pref_a@2: change has no causing event"):
        build(events, edges, prefs)


def test_non_alternating_stance_is_rejected():
    events, edges, _ = good_parts()
    prefs = [ver(1, "like", -100, 3, None), ver(2, "like", 3, None, "upd")]
    with pytest.raises(TimelineError, match="do not alternate stance"):
        build(events, edges, prefs)


def test_dangling_ids_are_rejected():
    events, edges, prefs = good_parts()
    with pytest.raises(TimelineError, match="dangling event id ghost"):
        build(events, edges + [EventEdge(parent_event_id="ghost", child_event_id="upd", relation="causes")], prefs)
    prefs[1] = ver(2, "dislike", 3, None, "ghost")
    with pytest.raises(TimelineError, match="dangling cause ghost"):
        build(events, edges, prefs)


def test_version_gap_and_duplicates_are_rejected():
    events, edges, prefs = good_parts()
    prefs[1] = prefs[1].model_copy(update={"version": 3})
    with pytest.raises(TimelineError, match=r"versions \[1, 3\] are not 1..n"):
        build(events, edges, prefs)
    with pytest.raises(TimelineError, match="duplicate event id life"):
        build(events + [ev("life", 5)], edges, good_parts()[2])


def test_a_change_against_its_effect_direction_is_rejected():
    events, edges, prefs = good_parts()
    events[1] = events[1].model_copy(update={"cause_event_id": "life", "facet": "spicy", "direction": "-",
                                            "pref_refs": ["pref_a@1", "pref_a@2"]})
    build(events, edges, prefs)  # dislike follows a facet pushed down
    events[1] = events[1].model_copy(update={"direction": "+"})
    with pytest.raises(TimelineError, match="spicy \\+ but the new stance is dislike"):
        build(events, edges, prefs)
    events[1] = events[1].model_copy(update={"cause_event_id": "upd", "direction": "-"})
    with pytest.raises(TimelineError, match="not a life event causing it"):
        build(events, edges, prefs)


def test_the_validator_replays_life_states_and_checks_effects():
    from pipeline.catalog import load_taxonomy
    from pipeline.dataset.validate import validate_tables
    from pipeline.s1_personas.sample_personas import persona_from_seed, sample_builtin_seed

    seeds = (sample_builtin_seed(i, run_seed=1, taxonomy=load_taxonomy()) for i in range(200))
    seed = next(s for s in seeds if s.attributes.age < 40 and s.attributes.occupation_group not in ("student", "retired"))
    persona = persona_from_seed(seed, run_seed=1)
    pid = persona.persona_id

    def life(eid, hours, summary):
        return Event(event_id=eid, persona_id=pid, time=T0 + timedelta(hours=hours), period="WEEK", kind="life_event",
                     summary=summary)

    events = [life("a", 1, "retired after more than thirty years of work"), life("b", 2, "joined a local book club"),
              life("c", 3, "joined a local book club"),
              Event(event_id="u", persona_id=pid, time=T0 + timedelta(hours=4), period="WEEK", kind="preference_update",
                    summary="went off ramen", pref_refs=["pref_a@1", "pref_a@2"], cause_event_id="b",
                    facet="literary", direction="-")]
    edges = [EventEdge(parent_event_id="b", child_event_id="u", relation="causes")]
    prefs = [p.model_copy(update={"persona_id": pid}) for p in good_parts()[2]]
    prefs[1] = prefs[1].model_copy(update={"caused_by_event_id": "u", "item": "epic fantasy series",
                                           "topic": "bookRecommendation", "valid_from": T0 + timedelta(hours=5)})
    prefs[0] = prefs[0].model_copy(update={"item": "epic fantasy series", "topic": "bookRecommendation",
                                           "valid_to": T0 + timedelta(hours=5)})
    empty = {name: [] for name in ("sessions", "turns", "queries", "contexts", "placements")}
    report = validate_tables({"personas": [persona], "events": events, "event_edges": edges, "preferences": prefs,
                              **empty}, period_order=["WEEK"])
    text = "\n".join(report.errors)
    assert f"age {seed.attributes.age} outside 58-75" in text
    assert "'joined a local book club': happens twice" in text
    assert "'epic fantasy series' (bookRecommendation) has no facet 'literary'" in text


def test_the_validator_rejects_an_update_of_an_item_its_event_does_not_name():
    from pipeline.catalog import load_catalog, load_taxonomy
    from pipeline.dataset.validate import validate_tables
    from pipeline.s1_personas.sample_personas import persona_from_seed, sample_builtin_seed

    tax, facets = load_taxonomy(), load_catalog().item_facets()
    spec = tax.event_specs()["was diagnosed with type 2 diabetes"][1]
    # a sweet item the diagnosis could push down by its facet, but which the event does not name
    other = next(name for (topic, name), f in facets.items()
                 if topic == "foodRecommendation" and "sweet" in f and name not in spec.items)
    seeds = (sample_builtin_seed(i, run_seed=1, taxonomy=tax) for i in range(400))
    seed = next(s for s in seeds if 40 <= s.attributes.age <= 80)
    pid = persona_from_seed(seed, run_seed=1).persona_id
    persona = persona_from_seed(seed, run_seed=1)
    events = [Event(event_id="b", persona_id=pid, time=T0 + timedelta(hours=1), period="WEEK", kind="life_event",
                    summary=spec.summary),
              Event(event_id="u", persona_id=pid, time=T0 + timedelta(hours=2), period="WEEK", kind="preference_update",
                    summary=f"went off {other}", pref_refs=["pref_a@1", "pref_a@2"], cause_event_id="b",
                    facet="sweet", direction="-")]
    edges = [EventEdge(parent_event_id="b", child_event_id="u", relation="causes")]
    prefs = [p.model_copy(update={"persona_id": pid}) for p in good_parts()[2]]
    prefs[0] = prefs[0].model_copy(update={"item": other, "topic": "foodRecommendation", "stance": "like",
                                           "valid_to": T0 + timedelta(hours=3)})
    prefs[1] = prefs[1].model_copy(update={"caused_by_event_id": "u", "item": other, "topic": "foodRecommendation",
                                           "stance": "dislike", "valid_from": T0 + timedelta(hours=3)})
    empty = {name: [] for name in ("sessions", "turns", "queries", "contexts", "placements")}
    report = validate_tables({"personas": [persona], "events": events, "event_edges": edges, "preferences": prefs,
                              **empty}, period_order=["WEEK"])
    assert f"'was diagnosed with type 2 diabetes' does not name {other!r}" in "\n".join(report.errors)
