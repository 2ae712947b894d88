"""The calendar and the place of a life event, read from its summary: a named day ("lost a parent on Christmas
Eve" happens on 24 December), a season ("spent a winter ...", "slipping on ice": winter), and whether it happens
at home, where the persona's city must have such a winter (taxonomy ``regions``: winter cold / cool / warm,
hemisphere), or away on a trip, named or not (its season is the destination's: a named northern place, else
the home hemisphere's). The simulator places each life event by these rules; the timeline checker tests them."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

from dateutil.easter import easter

from schemas.catalog import Region, Taxonomy

NORTH = {"winter": (12, 1, 2), "summer": (6, 7, 8), "autumn": (9, 10, 11), "festive": (12,)}
DAYS = ((re.compile(r"\bChristmas Eve\b"), (12, 24)), (re.compile(r"\bChristmas Day\b"), (12, 25)),
        (re.compile(r"\bNew Year's Eve\b"), (12, 31)), (re.compile(r"\bValentine's Day\b"), (2, 14)),
        (re.compile(r"\bHalloween\b"), (10, 31)))
EASTER = re.compile(r"\bEaster\b")
WINTER = re.compile(r"\b(winters?|snow|snowed|snowed-in|snowstorm|snowy|icy|ice|aurora|skiing|ski (trail|holiday|trip|week))\b")
COLD = re.compile(r"\b(snow|snowed|snowed-in|snowstorm|snowy|icy|ice|bitter|dark winter|northern winter)\b")
SEASON = {"summer": re.compile(r"\bsummer\b"), "autumn": re.compile(r"\bautumn\b"),
          "festive": re.compile(r"\b(festive|Christmas)\b")}  # December, in either hemisphere
AWAY = re.compile(r"\b(trip|holiday|abroad|chalet|cabin|house-sat|skiing|ski trail|backpacking|cruise|peak|retreat|"
                  r"camper van)\b"
                  r"|\b(?!(Sunday|Saturday|Christmas|Easter|New|Year|Valentine|Halloween|Olympian|British|DBT|CBT|ADHD)\b)"
                  r"[A-Z][a-z]+\b(?!-style)")
NORTHERN = re.compile(r"\b(Lapland|Norwegian|Nordic skiing|Canadian|Donegal|Alpine|Alps|Himalayan|Paris|Florence|"
                      r"Tuscan|Spain|Italian|Kyoto|Scottish|Iceland)\b")
WEEKEND = re.compile(r"\b(weekends?|Saturdays?|Sundays?|sermon)\b")
SUNDAY = re.compile(r"\b(Sundays?|sermon)\b")
EVENING = re.compile(r"\b(evenings?|night|nights|nightly|overnight|dinner|pub|bar|gig|concert|rave|nightclub|"
                     r"after-work)\b")
MORNING = re.compile(r"\b(mornings?|sunrise|breakfast|dawn)\b")
# out of doors in a way winter rules out where winters are cold or cool (at home, or at a named northern place)
OUTDOOR = re.compile(r"\b(lake|lakes|river swim\w*|open-water|open water|wild swim\w*|sea swim\w*|beach|camping|camped|tent|"
                     r"bowling green|hiked|hiking|hike|trek\w*|Camino|pilgrimage|island-hopping|barbecue|picnic|"
                     r"triathlon|allotment|garden party|outdoor festival|festival tent|surfing|sunbath\w*)\b")
DAYTIME, EVENING_HOURS, MORNING_HOURS = (9, 21), (18, 23), (6, 10)  # [from, to) hours of a life event
# a stay that lasts a season (it is dated at the season's end, so the whole season lies before it)
SEASON_LONG = re.compile(r"\b(spent a (winter|summer)|for a summer|all (winter|summer)|one summer|through (a |the )?"
                         r"(long )?(dark )?winter|during a long winter|a (long|dark|bitter) (northern )?winter|"
                         r"snowed-in winter)\b")
STAY_DAYS = ((re.compile(r"\b(spent a year|a year (in|abroad|on|of|travelling))\b"), 365),
             (re.compile(r"\bten weeks\b"), 70), (SEASON_LONG, 60), (re.compile(r"\b(a month|for weeks)\b"), 30),
             (re.compile(r"\b(fortnight|two weeks)\b"), 14),
             (re.compile(r"\b(a week|week-long|weeklong|ten-day|ten days|a semester)\b"), 7),
             (re.compile(r"\b(long weekend|weekend away|city break)\b"), 3))
TRIP_DAYS = 2  # a trip that names no length is away this long before its date
DEFAULT_REGION = Region(value="unknown", winter="warm")  # a free-text seed's city: no winter assumed
ELSEWHERE = re.compile(r"\b(moved to|work visa|travel|trip|holiday|abroad|backpacking|flew)\b")
COUNTRY = ((re.compile(r"\bBritish citizen"), "United Kingdom"),)  # a citizenship is taken where one lives
# a move out of the persona's city: the profile, the sessions and every later event keep the city it names
LEAVES_CITY = re.compile(r"\b(moved to [A-Z]\w+|moved to a new city|moved back to their hometown|moved from a village|"
                         r"moved abroad|moved to a (town|cold northern town|ski town|hot, humid city)|moved across the "
                         r"country|moved into a log cabin|emigrated|relocated to the countryside)\b")


@dataclass(frozen=True)
class When:
    """What a summary says of its date and place."""

    day: tuple[int, int] | None = None  # (month, day) of a named day
    easter: bool = False
    season: str | None = None
    away: bool = False
    north: bool = False  # the season is the northern hemisphere's (a named northern destination)
    winters: frozenset[str] | None = None  # the home city's winter must be one of these (None: any)
    season_end: bool = False  # it lasts the season: dated in the season's last month
    weekdays: frozenset[int] | None = None  # datetime.weekday() values it may fall on (None: any)
    hours: tuple[int, int] = DAYTIME
    stay_days: int = 0  # away for this long before its date: no other life event then
    outdoor: bool = False  # out of doors as winter rules out (where winters are cold or cool)

    @property
    def fixed(self) -> bool:
        """Whether the day matters (a named day, a season, out of doors); a weekday alone is found near the slot."""
        return self.day is not None or self.easter or self.season is not None or self.outdoor


@cache
def when(summary: str) -> When:
    """The calendar and place constraints of ``summary``."""
    day = next((d for pattern, d in DAYS if pattern.search(summary)), None)
    season = "winter" if WINTER.search(summary) else next((s for s, p in SEASON.items() if p.search(summary)), None)
    away = bool(AWAY.search(summary))
    winters = None
    if season == "winter" and not away:
        winters = frozenset({"cold"}) if COLD.search(summary) else frozenset({"cold", "cool"})
    weekdays = frozenset({6}) if SUNDAY.search(summary) else frozenset({5, 6}) if WEEKEND.search(summary) else None
    hours = EVENING_HOURS if EVENING.search(summary) else MORNING_HOURS if MORNING.search(summary) else DAYTIME
    stay = next((d for pattern, d in STAY_DAYS if pattern.search(summary)), TRIP_DAYS) if away else 0
    return When(day=day, easter=bool(EASTER.search(summary)), season=season, away=away,
                north=bool(NORTHERN.search(summary)), winters=winters,
                season_end=season is not None and bool(SEASON_LONG.search(summary)), weekdays=weekdays, hours=hours,
                stay_days=stay, outdoor=season is None and bool(OUTDOOR.search(summary)))


def region_of(location: str | None, taxonomy: Taxonomy) -> Region:
    """The taxonomy's region for a persona's location (a free-text one: no winter, northern hemisphere)."""
    return _regions(taxonomy).get(location or "", DEFAULT_REGION)


_REGIONS: dict[int, dict[str, Region]] = {}  # per loaded taxonomy (load_taxonomy keeps one), its cities by name


def _regions(taxonomy: Taxonomy) -> dict[str, Region]:
    if id(taxonomy) not in _REGIONS:
        _REGIONS[id(taxonomy)] = {r.value: r for r in taxonomy.regions}
    return _REGIONS[id(taxonomy)]


def season_months(season: str, hemisphere: str) -> tuple[int, ...]:
    months = NORTH[season]
    return months if hemisphere == "N" or season == "festive" else tuple((m + 5) % 12 + 1 for m in months)


def place_problem(summary: str, region: Region) -> str | None:
    """Why ``summary`` cannot happen to someone living in ``region`` at any time, or None: a winter the city lacks,
    the city itself named as somewhere else (a move to it, a trip there), a citizenship of another country."""
    key = (summary, region.value, region.winter)
    if key not in _PLACE_PROBLEMS:
        _PLACE_PROBLEMS[key] = _place_problem(summary, region)
    return _PLACE_PROBLEMS[key]


_PLACE_PROBLEMS: dict[tuple[str, str, str], str | None] = {}


def _place_problem(summary: str, region: Region) -> str | None:
    w = when(summary)
    if w.winters is not None and region.winter not in w.winters:
        return f"needs a {' or '.join(sorted(w.winters))} winter at home; {region.value}'s is {region.winter}"
    city, _, country = region.value.partition(", ")
    if region is not DEFAULT_REGION and ELSEWHERE.search(summary):
        for place_name in (city, country):
            if place_name and re.search(rf"\b{re.escape(place_name)}\b", summary):
                return f"names {place_name} as somewhere else, but this persona lives there"
    if region is not DEFAULT_REGION and LEAVES_CITY.search(summary):
        return f"a move out of {city}, which the persona's profile and every later event keep"
    for pattern, where in COUNTRY:
        if pattern.search(summary) and country != where:
            return f"a citizenship of {where} for someone living in {region.value}"
    return None


def fits(summary: str, time: datetime, region: Region) -> str | None:
    """Why ``summary`` cannot happen at ``time`` to someone living in ``region``, or None."""
    w = when(summary)
    if (problem := place_problem(summary, region)) is not None:
        return problem
    if w.day is not None and (time.month, time.day) != w.day:
        return f"names a day ({w.day[1]}/{w.day[0]}) but is dated {time:%Y-%m-%d}"
    if w.easter and abs((time.date() - easter(time.year)).days) > 3:
        return f"names Easter but is dated {time:%Y-%m-%d}"
    if w.season is not None:
        hemisphere = "N" if w.north else region.hemisphere
        months = season_months(w.season, hemisphere)
        if time.month not in months:
            return f"names {w.season} but is dated {time:%Y-%m-%d} ({'northern' if hemisphere == 'N' else 'southern'} hemisphere)"
        if w.season_end and time.month != months[-1]:
            return f"lasts the {w.season} but is dated {time:%Y-%m-%d}, before its last month"
    if w.outdoor and (w.north or (not w.away and region.winter != "warm")):
        hemisphere = "N" if w.north else region.hemisphere
        if time.month in season_months("winter", hemisphere):
            return f"out of doors in winter ({time:%Y-%m-%d}, {'a northern place' if w.north else region.value})"
    if w.weekdays is not None and time.weekday() not in w.weekdays:
        return f"names {'a Sunday' if w.weekdays == {6} else 'a weekend'} but falls on a {time:%A}"
    if not w.hours[0] <= time.hour < w.hours[1]:
        return f"happens at {time:%H:%M}, outside {w.hours[0]:02d}:00-{w.hours[1]:02d}:00"
    return None


def place(summary: str, region: Region, lo: datetime, hi: datetime, default: datetime,
          rng: random.Random) -> datetime | None:
    """A time in (lo, hi) at which ``summary`` fits ``region``, or None when there is none: for a summary that fixes
    no day, on ``default``'s day or the nearest day that fits (its weekday, its hours), else on a day drawn among
    those that fit (its named day, its season, the season's end)."""
    w = when(summary)
    if place_problem(summary, region) is not None:
        return None
    if w.fixed:
        days = [lo.date() + timedelta(days=k) for k in range((hi.date() - lo.date()).days + 1)]
        rng.shuffle(days)
    else:
        days = [default.date() + timedelta(days=k) for k in (0, 1, -1, 2, -2, 3, -3, 4, -4)]
    for day in days:
        if w.weekdays is not None and day.weekday() not in w.weekdays:
            continue
        minute = rng.randrange(w.hours[0] * 60, w.hours[1] * 60)
        at = datetime(day.year, day.month, day.day) + timedelta(minutes=minute)
        if lo < at < hi and fits(summary, at, region) is None:
            return at
    return None
