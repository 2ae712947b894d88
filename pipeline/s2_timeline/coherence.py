"""Whether a whole life holds together: the scale of each life event, the time between major ones, the
calendar and the place (calendar.py), a life state the profile shows unchanged until the first conversation,
work and household in the routines, and tastes that do not turn back within days.

The rate of major events. Holmes and Rahe's Social Readjustment Rating Scale (J. Psychosom. Res. 11, 1967)
ranks 43 life events by the readjustment they demand; the ones this taxonomy calls *major* are those of its upper
half (death of a family member, divorce or separation, personal injury or illness, marriage, dismissal,
retirement, pregnancy, a new family member, a change of line of work, a move), which population surveys find
most adults live a few of in a year, not several in a month (Goldberg and Comstock, "Epidemiology of life events:
frequency in general populations", Am. J. Epidemiol. 111, 1980: 2,780 adults, one year of events). We chose: at
most one major event in any 30 days (``MAJOR_GAP_DAYS``), none in a period shorter than ``SHORT_PERIOD_DAYS``
(PersonaMem's week and month are carried by minor experiences), so a persona lives at most about one a month and
in practice one to three a year. Minor events (a meal, a weekend, a class, a show) come as often as the periods ask.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from functools import cache

from pipeline.catalog import holds_fit, load_catalog
from pipeline.life_state import _stem, initial_state, keywords, unmet
from pipeline.s2_timeline.calendar import fits, region_of, when
from pipeline.s2_timeline.periods import period_windows
from pipeline.words import stems
from schemas.catalog import LifeEventSpec, Taxonomy
from schemas.persona import Persona, stereotype_match
from schemas.timeline import Event, Timeline

MAJOR_GAP_DAYS = 30  # no two major life events of one persona closer than this
SHORT_PERIOD_DAYS = 60  # a period whose events span less than this holds minor events only
FOLLOW_UP_DAYS = 365  # a life event follows from a major one at most this long before it
SAME_DAY_HOURS = 12  # two life events of one persona are at least this far apart (a morning and an evening)
TRIP_GAP_DAYS = 21  # two trips away of one persona are at least this far apart (a week or a month holds one or two)
TURN_BACK_DAYS = 90  # a changed preference does not turn back sooner, unless a major event turns a minor one's change
MAJOR = re.compile(
    r"\b(diagnos\w*|surgery|heart attack|stroke|cancer|funeral|widowed|death of|lost a (parent|father|mother|"
    r"partner|spouse|husband|wife|child|baby|sibling|brother|sister|best friend|job|first grandchild)|"
    r"(father|mother|parent|partner|spouse|husband|wife|sibling|brother|sister|grandmother|grandfather) died|"
    r"divorc\w*|separated|married|wedding|engaged|engagement|broke up|break-up|split up|moved|emigrated|relocated|"
    r"pregnan\w*|newborn|had a baby|became a (parent|grandparent|foster carer|personal trainer|volunteer driver)|"
    r"adopted a child|gave birth|new job|first job|first full-time job|promoted|laid off|made redundant|fired|"
    r"retired (after|early|at)|early retirement|graduated|bought (a|their first) (house|home|flat)|evicted|"
    r"bankrupt\w*|in hospital|airlifted|attacked|burgled|robbed|arrested|injur\w*|tore|broke a|broke their|"
    r"switched careers|quit a stable job|spent a year|citizen|lost (their|a) (home|house|savings))\b", re.IGNORECASE)
# what MAJOR's words name without being a change of one's own life: another's wedding, an anniversary, a scare
NOT_MAJOR = re.compile(r"\b(friend's (\w+ )*wedding|anniversary|wedding vows|moved friendship|met a couple|streak|before a "
                       r"stressful surgery|payout|cancer scare|cancer-gene|pregnancy scare|avoided major surgery)\b")
# an experience that takes months (or a season, a year, a recovery) is not lived inside a week or a month
LASTING = re.compile(r"\b(months|a year|years of|recovered|spent a (summer|winter|year|semester)|all (winter|summer|year)|"
                     r"a semester|a long (spell|bout|recovery)|weeks of)\b")
# an event that tells of a habit it ends: the person held the item before
HABIT = re.compile(r"\b(quit|quitting|gave up|stopped|cancelled|after (years|decades|months) of|decades of|years of|"
                   r"again|my usual|their usual|no longer)\b")
# an event that tells of a first try: the person did not hold a view of what it names before
FIRST_ZIPF = 5.0  # the words an event and an item share to be about one thing: "breathing", not "life" or "with"
FIRST = re.compile(r"\b(for the first time|first[- ]ever|(a|an|the|their|my)( [\w'-]+){0,2} first)\b")
WORK_ROUTINE = re.compile(r"\b(coworker|colleague|at work)\b")


def scale_of(spec: LifeEventSpec) -> str:
    """The taxonomy's scale of an event, else "major" when it changes the life state or its summary names a
    change of life (MAJOR), else "minor"."""
    if spec.scale is not None:
        return spec.scale
    return "major" if spec.sets or _names_major(spec.summary) else "minor"


@cache
def _names_major(summary: str) -> bool:
    return bool(MAJOR.search(summary)) and not NOT_MAJOR.search(summary)


@cache
def _lasting(summary: str) -> bool:
    return bool(LASTING.search(summary))


@cache
def tells_of_a_habit(summary: str) -> bool:
    """Whether an event's summary tells of a habit it ends or repeats (so its change turns a view held before)."""
    return bool(HABIT.search(summary))


def tells_of_a_first(summary: str, item: str) -> bool:
    """Whether an event tells of a first try of ``item`` ("tried a ski chalet holiday for the first time", "a first
    BJJ class"): it can start a view of the item, never turn one held before."""
    return bool(FIRST.search(summary)) and bool(stems(summary, rarer_than=FIRST_ZIPF) & stems(item, rarer_than=FIRST_ZIPF))


def fits_short_period(spec: LifeEventSpec) -> bool:
    """Whether an event may happen in a short period: a minor one that does not take months."""
    return scale_of(spec) == "minor" and not _lasting(spec.summary)


# words two unrelated events share all the time: what happened (lost, learned), not what it happened to
COMMON = frozenset(_stem(w) for w in (
    "lost learned spent started began found moved joined became took went bought sold tried turned fell watched read "
    "heard felt left quit switched swapped signed told asked paid failed gave kept used tested finished "
    "friend friends family home house life time work weeks months years local class course after every each city "
    "new".split()))


def related(cause: str, effect: str) -> bool:
    """Whether two life events share what links them, a content word beyond what happened (by its first
    letters): "moved to a flat by the sea" -> "joined a sea-swimming club", so a reader sees why one followed."""
    words = ({_stem(w) for w in keywords(cause)} & {_stem(w) for w in keywords(effect)}) - COMMON
    return bool(words)


def changes_state(spec: LifeEventSpec, state: dict[str, str]) -> bool:
    """Whether the event would change a dimension of ``state`` (and so the profile written before it)."""
    return any(state.get(dim) != value for dim, value in spec.sets.items())


def routine_fits(template: str, state: dict[str, str]) -> bool:
    """A routine naming a coworker happens only to someone at work."""
    return not WORK_ROUTINE.search(template) or state.get("work") == "working"


def check_timeline(persona: Persona, timeline: Timeline, taxonomy: Taxonomy, first_period: str,
                   short_periods: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """(rule, message) for every way ``timeline`` fails to hold together as one life (``short_periods``: the
    periods whose events span under SHORT_PERIOD_DAYS, where only minor events that take no months happen)."""
    specs = taxonomy.event_specs()
    region = region_of(persona.location, taxonomy)
    state = initial_state(persona.attributes)
    found: list[tuple[str, str]] = []
    majors: list[Event] = []
    lives: list[Event] = []
    trips: list[Event] = []
    by_id = {e.event_id: e for e in timeline.events}
    for e in sorted(timeline.events, key=lambda e: (e.time, e.event_id)):
        if e.kind == "routine":
            if (why := fits(e.summary, e.time, region)) is not None:
                found.append(("calendar", f"{e.time:%Y-%m-%d %H:%M} routine {e.summary!r}: {why}"))
            template = _routine_template(e.summary, taxonomy)
            if template is not None and not routine_fits(template, state):
                found.append(("work", f"{e.time:%Y-%m-%d} {e.summary!r}: a coworker while work is {state.get('work')}"))
            continue
        if e.kind != "life_event" or e.summary not in specs:
            continue
        spec = specs[e.summary][1]
        scale = scale_of(spec)
        if e.scale is not None and e.scale != scale:
            found.append(("scale", f"{e.summary!r}: scale {e.scale}, the taxonomy's is {scale}"))
        if (why := fits(e.summary, e.time, region)) is not None:
            found.append(("calendar", f"{e.time:%Y-%m-%d} {e.summary!r}: {why}"))
        if e.period in short_periods and not fits_short_period(spec):
            found.append(("short", f"{e.time:%Y-%m-%d} {e.summary!r}: a {scale} event, or one that takes months, in "
                                   f"the short period {e.period}"))
        if e.period == first_period and changes_state(spec, state):
            found.append(("profile", f"{e.time:%Y-%m-%d} {e.summary!r}: changes the life state "
                                     f"({', '.join(f'{k} {state.get(k)} -> {v}' for k, v in spec.sets.items())}) "
                                     "before the profile the first conversation shows"))
        if (why := unmet(spec, state, persona.attributes.age)) is not None:
            found.append(("state", f"{e.time:%Y-%m-%d} {e.summary!r}: {why}"))
        if lives and e.time - lives[-1].time < timedelta(hours=SAME_DAY_HOURS):
            found.append(("crowded", f"{e.time:%Y-%m-%d %H:%M} {e.summary!r}: within {SAME_DAY_HOURS} hours of "
                                     f"{lives[-1].summary!r}"))
        stay = when(e.summary).stay_days
        if stay and lives and e.time - lives[-1].time < timedelta(days=stay):
            found.append(("away", f"{e.time:%Y-%m-%d} {e.summary!r}: away {stay} days before it, yet "
                                  f"{lives[-1].summary!r} happened {(e.time - lives[-1].time).days} days before"))
        if stay and trips and e.time - trips[-1].time < timedelta(days=TRIP_GAP_DAYS):
            found.append(("trips", f"{e.time:%Y-%m-%d} {e.summary!r}: a trip {(e.time - trips[-1].time).days} days "
                                   f"after the trip {trips[-1].summary!r}"))
        if stay:
            trips.append(e)
        lives.append(e)
        if scale == "major":
            if majors and e.time - majors[-1].time < timedelta(days=MAJOR_GAP_DAYS):
                found.append(("crowded", f"{e.time:%Y-%m-%d} {e.summary!r}: {(e.time - majors[-1].time).days} days "
                                         f"after {majors[-1].summary!r}, both major"))
            majors.append(e)
        state.update(spec.sets)
    catalog = load_catalog()
    holds = holds_fit(catalog, initial_state(persona.attributes), region.winter)
    tags = {(t, i.name): i.tags for t, cat in catalog.topics.items() for i in cat.items}
    own = persona.attributes.stereotype_tags()
    for v in timeline.preferences:
        if v.version == 1 and v.caused_by_event_id is None and not holds(v.topic, v.item):
            found.append(("holds", f"{v.item}: held from the start, but its holder's life or city does not fit it"))
        if v.stereotypical and not stereotype_match(own, tags.get((v.topic, v.item), [])):
            found.append(("holds", f"{v.item}: marked stereotypical, but its stereotype is not this persona's"))
    for v in timeline.preferences:
        update = by_id.get(v.caused_by_event_id or "")
        cause = by_id.get(update.cause_event_id or "") if update else None
        if v.version == 1 and cause is not None and v.stance == "dislike" and tells_of_a_habit(cause.summary):
            found.append(("fresh", f"{v.item}: a new dislike after {cause.summary!r}, which tells of a habit"))
        if v.version > 1 and cause is not None and tells_of_a_first(cause.summary, v.item):
            found.append(("first", f"{v.item}: held before, then turned by {cause.summary!r}, which tells of a first try"))
    for edge in timeline.edges:
        parent, child = by_id.get(edge.parent_event_id), by_id.get(edge.child_event_id)
        if edge.relation == "causes" and parent and child and parent.kind == child.kind == "life_event" \
                and (parent.scale == "minor" or child.time - parent.time > timedelta(days=FOLLOW_UP_DAYS)
                     or not related(parent.summary, child.summary)):
            found.append(("follow_up", f"{parent.summary!r} -> {child.summary!r}: a minor event, one over a year "
                                       "before, or one it shares nothing with causes a later life event"))
    for chain in timeline.chains().values():
        for a, b, c in zip(chain, chain[1:], chain[2:], strict=False):
            if c.stance == a.stance and c.valid_from - b.valid_from < timedelta(days=TURN_BACK_DAYS) \
                    and not _stronger(by_id, c.caused_by_event_id, b.caused_by_event_id):
                found.append(("turn_back", f"{c.item}: {a.stance} -> {b.stance} on {b.valid_from:%Y-%m-%d} -> "
                                           f"{c.stance} again on {c.valid_from:%Y-%m-%d}"))
    return found


def _stronger(by_id: dict[str, Event], new: str | None, old: str | None) -> bool:
    """Whether the life event behind update ``new`` is major and the one behind update ``old`` is not."""
    def scale(update_id: str | None) -> str | None:
        update = by_id.get(update_id or "")
        cause = by_id.get(update.cause_event_id or "") if update else None
        return cause.scale if cause else None

    return scale(new) == "major" and scale(old) == "minor"


def _routine_template(summary: str, taxonomy: Taxonomy) -> str | None:
    for templates in taxonomy.routine_summaries.values():
        for template in templates:
            head = template.split("{item}")[0]
            if head and summary.startswith(head):
                return template
    return None


def majors_within(times: list[datetime], days: int = MAJOR_GAP_DAYS) -> int:
    """The most of ``times`` inside any ``days``-long span."""
    times = sorted(times)
    return max((sum(1 for b in times[i:] if b - a < timedelta(days=days)) for i, a in enumerate(times)), default=0)


def busiest_span(times: list[datetime], days: int = 30) -> tuple[int, float]:
    """(the most of ``times`` in any ``days``-long span, the mean per ``days`` over their whole range)."""
    if not times:
        return 0, 0.0
    span = max((max(times) - min(times)).days, days)
    return majors_within(times, days), len(times) * days / span


def short_periods(config) -> frozenset[str]:
    """The periods of ``config`` whose life events span under SHORT_PERIOD_DAYS."""
    return frozenset(w.name for w in period_windows(config)
                     if w.events_end - w.events_start < timedelta(days=SHORT_PERIOD_DAYS))
