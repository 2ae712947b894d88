"""Whole lives: the scale of life events and the time between major ones, the calendar and the place, the
profile's state before the first conversation, routines that fit work, tastes that do not turn back within days.
The checker finds each planted violation; `personagen plan --n 180` (seeds 7 and 11) has none, and no month of a
long period holds more than twice its share of the period's major events."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from pipeline.catalog import load_taxonomy
from pipeline.config import load_config
from pipeline.life_state import initial_state, replay
from pipeline.run.plan import build_plan, plan_stats
from pipeline.s1_personas.sample_personas import sample_builtin_seed
from pipeline.s2_timeline.calendar import TRIP_DAYS, fits, region_of, when
from pipeline.s2_timeline.coherence import (
    MAJOR_GAP_DAYS,
    busiest_span,
    check_timeline,
    majors_within,
    scale_of,
    short_periods,
)
from schemas.catalog import LifeEventSpec, Region
from schemas.persona import stereotype_match
from schemas.timeline import EventEdge

TAXONOMY = load_taxonomy()


def spec(summary: str, **fields) -> LifeEventSpec:
    return LifeEventSpec(summary=summary, **fields)


def test_scale_follows_the_change_of_life_not_its_words():
    assert scale_of(spec("got married", sets={"partner": "married"})) == "major"
    assert scale_of(spec("lost a parent on Christmas Eve")) == "major"
    assert scale_of(spec("tore a knee ligament playing football")) == "major"
    assert scale_of(spec("gave a speech at a friend's wedding")) == "minor"
    assert scale_of(spec("celebrated a twenty-fifth wedding anniversary")) == "minor"
    assert scale_of(spec("burned their mouth and stomach at a numbing-pepper hotpot dinner")) == "minor"
    assert scale_of(spec("moved to a flat by the sea", scale="minor")) == "minor"  # the taxonomy's word wins


def test_a_stereotype_fits_every_kind_of_tag_it_names():
    man_cave = ["gender:man", "age_band:45-54"]
    assert stereotype_match({"gender:man", "age_band:45-54", "life_stage:established"}, man_cave)
    assert not stereotype_match({"gender:woman", "age_band:45-54"}, man_cave)  # the age band alone is not enough
    assert not stereotype_match({"gender:man"}, [])


def test_an_event_that_presupposes_another_comes_after_it():
    second = "learned from a specialist's second opinion that their coeliac diagnosis was wrong"
    seed = sample_builtin_seed(3, run_seed=7, taxonomy=TAXONOMY).attributes
    assert any("lived before it" in why for why in replay(seed, [second], TAXONOMY))
    assert not any("lived before it" in why for why in replay(seed, ["was diagnosed with coeliac disease", second], TAXONOMY))


def test_the_calendar_and_the_city_place_an_event():
    lagos, stockholm = region_of("Lagos, Nigeria", TAXONOMY), region_of("Stockholm, Sweden", TAXONOMY)
    sydney = region_of("Sydney, Australia", TAXONOMY)
    assert (lagos.winter, stockholm.winter, sydney.hemisphere) == ("warm", "cold", "S")
    eve = "lost a parent on Christmas Eve"
    assert when(eve).day == (12, 24) and fits(eve, datetime(2024, 12, 24, 18), lagos) is None
    assert "names a day" in fits(eve, datetime(2025, 1, 27, 18), lagos)
    ice = "broke a wrist slipping on ice"
    assert "needs a cold winter at home" in fits(ice, datetime(2025, 1, 20, 12), lagos)
    assert fits(ice, datetime(2025, 1, 20, 12), stockholm) is None and "names winter" in fits(ice, datetime(2025, 7, 1, 12), stockholm)
    dark = "found their bare white home cold and sterile through a long dark winter"
    assert fits(dark, datetime(2025, 1, 20, 12), region_of("Dubai, United Arab Emirates", TAXONOMY)) is not None
    summer = "had a neighbour blast reggaeton from a balcony every night one summer"  # dated as the summer ends
    assert fits(summer, datetime(2025, 2, 15, 19), sydney) is None and fits(summer, datetime(2025, 8, 15, 19), sydney) is not None
    trip = "spent a dark Norwegian winter skiing everywhere and watching local crime dramas"
    assert when(trip).away and when(trip).north  # away: any city; a northern winter, wherever home is
    assert fits(trip, datetime(2025, 1, 10, 12), sydney) is None and fits(trip, datetime(2025, 7, 10, 12), sydney) is not None
    assert fits("broke a wrist hanging festive lights", datetime(2025, 6, 11, 12), stockholm) is not None
    sunday = "heard a pastor rail against streaming services in a Sunday sermon"
    assert "falls on a Wednesday" in fits(sunday, datetime(2025, 1, 8, 11), lagos)
    assert fits(sunday, datetime(2025, 1, 12, 11), lagos) is None
    evening = "enrolled in an evening language course"
    assert "outside 18:00-23:00" in fits(evening, datetime(2025, 3, 3, 5, 8), lagos)
    assert "outside 09:00-21:00" in fits("adopted two rescue dogs", datetime(2025, 3, 3, 3, 0), lagos)
    season = "spent a bitter northern winter thawing out in a heated yoga studio each evening"
    assert "before its last month" in fits(season, datetime(2025, 1, 20, 19), stockholm)
    assert fits(season, datetime(2025, 2, 20, 19), stockholm) is None
    assert when("spent a year in rural Senegal").stay_days == 365
    assert when("spent a snowed-in winter in a Canadian log cabin, skiing cross-country through forests").stay_days == 60
    assert "names Seoul as somewhere else" in fits("moved to Seoul for work, ate kimchi daily and joined pop idol fan clubs",
                                                   datetime(2025, 3, 3, 12), region_of("Seoul, South Korea", TAXONOMY))
    assert "names Japan as somewhere else" in fits("flew business class to Japan paid for entirely with credit card points",
                                                   datetime(2025, 3, 3, 12), region_of("Osaka, Japan", TAXONOMY))
    assert "a move out of Stockholm" in fits("moved to a ski town in the mountains", datetime(2025, 3, 3, 12), stockholm)
    assert fits("moved to a neighbourhood with a big park", datetime(2025, 3, 3, 12), stockholm) is None
    assert "citizenship of United Kingdom" in fits("became a British citizen after a long wait",
                                                    datetime(2025, 3, 3, 12), lagos)
    unknown = region_of("a village somewhere", TAXONOMY)
    assert unknown == Region(value="unknown", winter="warm") and fits(ice, datetime(2025, 1, 20, 12), unknown) is not None


@pytest.fixture(scope="module", params=[7, 11])
def planned(request):
    config = load_config("default", n_personas=180, seed=request.param)
    return config, build_plan(config)


def test_a_run_of_180_lives_holds_together(planned):
    config, plan = planned
    short = short_periods(config)
    assert short == {config.periods[1].name, config.periods[2].name}  # the week and the month
    found = [(p.persona_id, rule, msg) for p, t in zip(plan.personas, plan.timelines, strict=True)
             for rule, msg in check_timeline(p, t, TAXONOMY, config.periods[0].name, short)]
    assert found == []
    lives = [e for t in plan.timelines for e in t.events if e.kind == "life_event"]
    assert all(e.scale in ("major", "minor") for e in lives)
    assert all(e.scale is None for t in plan.timelines for e in t.events if e.kind != "life_event")
    for t in plan.timelines:  # no persona lives two major events within 30 days
        assert majors_within([e.time for e in t.events if e.scale == "major"], MAJOR_GAP_DAYS) <= 1
    for period in (config.periods[0].name, config.periods[-1].name):  # the year before, the last year
        times = [e.time for e in lives if e.scale == "major" and e.period == period]
        busiest, _ = busiest_span(times, 30)
        assert len(times) >= len(plan.personas) * 0.6  # about one a year each, not a handful for the run
        assert busiest <= 2 * len(times) * 30 / 365, (period, busiest, len(times))
    brief = [e for e in lives if e.period in short]
    assert brief and all(e.scale == "minor" for e in brief)  # the week and the month: minor experiences


def test_no_event_and_change_is_shared_by_a_large_part_of_the_run(planned):
    """Variety: the most frequent (life event -> change) pair reaches at most 7% of the personas (it was 14.4% at
    seed 7 before the taxonomy's events per item were more than doubled and their weights calibrated; 5-6% now).
    The issue's bar is 3%: with ~2,100 changes over ~900 pairs a run draws independently per persona, a few pairs
    reach 6-10 personas by chance alone."""
    config, plan = planned
    stats = plan_stats(plan.timelines, config.topics)
    assert stats["top_pair_share"] <= 0.07, stats["top_pair"]
    assert stats["cross_topic_fraction"] >= 0.10  # two-topic events are drawn, not pulled to the front


def _life(plan, config, pick):
    """A persona's (persona, timeline) for which ``pick(timeline)`` returns something to break."""
    for p, t in zip(plan.personas, plan.timelines, strict=True):
        if (found := pick(t)) is not None:
            return p, t, found
    raise AssertionError("no persona to plant the violation in")


def test_the_checker_finds_each_planted_violation(planned):
    config, plan = planned
    first, short = config.periods[0].name, short_periods(config)

    def rules(p, t):
        return {rule for rule, _ in check_timeline(p, t, TAXONOMY, first, short)}

    def in_week(t):
        return next((e for e in t.events if e.kind == "life_event" and e.period == config.periods[1].name), None)

    p, t, event = _life(plan, config, in_week)
    for summary in ("recovered from a long bout of pneumonia", "lost a sibling in a car accident"):  # months; major
        lasting = event.model_copy(update={"summary": summary, "scale": None})
        assert "short" in rules(p, t.model_copy(update={"events": [lasting if e is event else e for e in t.events]}))

    def minor_then_life(t):
        minors = [e for e in t.events if e.kind == "life_event" and e.scale == "minor"]
        later = [e for e in t.events if e.kind == "life_event" and minors and e.time > minors[0].time]
        return (minors[0], later[0]) if later else None

    p, t, (parent, child) = _life(plan, config, minor_then_life)
    edge = EventEdge(parent_event_id=parent.event_id, child_event_id=child.event_id, relation="causes")
    assert "follow_up" in rules(p, t.model_copy(update={"edges": [*t.edges, edge]}))

    def two_majors(t):
        majors = [e for e in t.events if e.scale == "major"]
        return majors if len(majors) >= 2 else None

    p, t, majors = _life(plan, config, two_majors)
    later = majors[1].model_copy(update={"time": majors[0].time + timedelta(days=9)})
    moved = t.model_copy(update={"events": [later if e is majors[1] else e for e in t.events]})
    assert "crowded" in rules(p, moved)

    p, t, event = _life(plan, config, lambda t: next((e for e in t.events if e.kind == "life_event"), None))
    eve = event.model_copy(update={"summary": "lost a parent on Christmas Eve", "time": datetime(2025, 1, 27, 18)})
    assert "calendar" in rules(p, t.model_copy(update={"events": [eve if e is event else e for e in t.events]}))

    def background(t):  # a life event before the first conversation of someone living with a partner
        person = next(x for x in plan.personas if x.persona_id == t.persona_id)
        if initial_state(person.attributes)["partner"] != "partnered":
            return None
        return next((e for e in t.events if e.kind == "life_event" and e.period == first), None)

    p, t, event = _life(plan, config, background)
    married = event.model_copy(update={"summary": "got married in a small ceremony"})
    found = rules(p, t.model_copy(update={"events": [married if e is event else e for e in t.events]}))
    assert "profile" in found  # it could happen, but not before the profile the first conversation shows

    def idle(t):
        person = next(x for x in plan.personas if x.persona_id == t.persona_id)
        routine = next((e for e in t.events if e.kind == "routine"), None)
        return routine if person.attributes.occupation_group == "retired" else None

    p, t, routine = _life(plan, config, lambda t: next((e for e in t.events if e.kind == "routine"), None))
    wednesday = routine.time.replace(hour=12) + timedelta(days=(2 - routine.time.weekday()) % 7)
    weekend = routine.model_copy(update={"summary": "enjoyed chess clubs over the weekend, as I love them",
                                         "time": wednesday})
    assert "calendar" in rules(p, t.model_copy(update={"events": [weekend if e is routine else e for e in t.events]}))

    p, t, routine = _life(plan, config, idle)
    coworker = routine.model_copy(update={"summary": "chatted with a coworker about chess clubs, which I really enjoy"})
    assert "work" in rules(p, t.model_copy(update={"events": [coworker if e is routine else e for e in t.events]}))

    def two_lives(t):
        lives = [e for e in t.events if e.kind == "life_event"]
        return (lives[-2], lives[-1]) if len(lives) >= 2 else None

    p, t, (a, b) = _life(plan, config, two_lives)
    away = [s for s in TAXONOMY.event_specs() if when(s).stay_days == TRIP_DAYS][:2]
    trips = {a.event_id: a.model_copy(update={"summary": away[0]}),
             b.event_id: b.model_copy(update={"summary": away[1], "time": a.time + timedelta(days=5)})}
    assert "trips" in rules(p, t.model_copy(update={"events": [trips.get(e.event_id, e) for e in t.events]}))

    p, t, version = _life(plan, config, lambda t: next((v for v in t.preferences if v.version > 1), None))
    update = next(e for e in t.events if e.event_id == version.caused_by_event_id)
    cause = next(e for e in t.events if e.event_id == update.cause_event_id)
    first = cause.model_copy(update={"summary": f"tried {version.item} for the first time and was hooked"})
    assert "first" in rules(p, t.model_copy(update={"events": [first if e is cause else e for e in t.events]}))

    def childless(t):
        person = next(x for x in plan.personas if x.persona_id == t.persona_id)
        if initial_state(person.attributes)["children"] != "none":
            return None
        return next((v for v in t.preferences if v.version == 1 and v.caused_by_event_id is None), None)

    p, t, held = _life(plan, config, childless)
    rooms = held.model_copy(update={"topic": "homeDecoration", "item": "childproofed living rooms"})
    assert "holds" in rules(p, t.model_copy(update={"preferences": [rooms if v is held else v for v in t.preferences]}))

    def two_lives(t):
        lives = [e for e in t.events if e.kind == "life_event" and e.period == config.periods[-1].name]
        return lives[:2] if len(lives) >= 2 and (lives[1].time - lives[0].time).days < 300 else None

    p, t, (before, after) = _life(plan, config, two_lives)
    trip = "travelled ten weeks round the world with one cabin bag and an e-ink reader"  # away 70 days before
    away = after.model_copy(update={"summary": trip, "scale": None,
                                    "time": before.time.replace(hour=12) + timedelta(days=20)})
    assert "away" in rules(p, t.model_copy(update={"events": [away if e is after else e for e in t.events]}))

    def fresh_dislike(t):
        by_id = {e.event_id: e for e in t.events}
        for v in t.preferences:
            if v.version == 1 and v.stance == "dislike" and v.caused_by_event_id:
                return by_id[by_id[v.caused_by_event_id].cause_event_id]
        return None

    p, t, cause = _life(plan, config, fresh_dislike)
    habit = cause.model_copy(update={"summary": "had tennis elbow flare again a week after a cortisone jab and quit doubles"})
    assert "fresh" in rules(p, t.model_copy(update={"events": [habit if e is cause else e for e in t.events]}))

    def changed(t):
        return next((c for c in t.chains().values() if len(c) == 2), None)

    p, t, chain = _life(plan, config, changed)
    a, b = chain
    back = b.model_copy(update={"valid_to": b.valid_from + timedelta(days=20)})
    again = a.model_copy(update={"version": 3, "valid_from": back.valid_to, "valid_to": None,
                                 "caused_by_event_id": b.caused_by_event_id})
    prefs = [back if v is b else v for v in t.preferences] + [again]
    assert "turn_back" in rules(p, t.model_copy(update={"preferences": prefs}))
