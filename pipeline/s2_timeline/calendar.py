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
AWAY = re.compile(r"\b(trip|holiday|abroad|chalet|cabin|house-sat|skiing|ski trail|backpacking|cruise|peak)\b"
                  r"|\b[A-Z][a-z]+\b(?!-style)")
NORTHERN = re.compile(r"\b(Lapland|Norwegian|Nordic skiing|Canadian|Donegal|Alpine|Alps|Himalayan|Paris|Florence|"
                      r"Tuscan|Spain|Italian|Kyoto|Scottish|Iceland)\b")
DEFAULT_REGION = Region(value="unknown", winter="warm")  # a free-text seed's city: no winter assumed
ELSEWHERE = re.compile(r"\b(moved to|work visa|travel|trip|holiday|abroad|backpacking|flew)\b")
COUNTRY = ((re.compile(r"\bBritish citizen"), "United Kingdom"),)  # a citizenship is taken where one lives


@dataclass(frozen=True)
class When:
    """What a summary says of its date and place."""

    day: tuple[int, int] | None = None  # (month, day) of a named day
    easter: bool = False
    season: str | None = None
    away: bool = False
    north: bool = False  # the season is the northern hemisphere's (a named northern destination)
    winters: frozenset[str] | None = None  # the home city's winter must be one of these (None: any)

    @property
    def fixed(self) -> bool:
        return self.day is not None or self.easter or self.season is not None or self.winters is not None


@cache
def when(summary: str) -> When:
    """The calendar and place constraints of ``summary``."""
    day = next((d for pattern, d in DAYS if pattern.search(summary)), None)
    season = "winter" if WINTER.search(summary) else next((s for s, p in SEASON.items() if p.search(summary)), None)
    away = bool(AWAY.search(summary))
    winters = None
    if season == "winter" and not away:
        winters = frozenset({"cold"}) if COLD.search(summary) else frozenset({"cold", "cool"})
    return When(day=day, easter=bool(EASTER.search(summary)), season=season, away=away,
                north=bool(NORTHERN.search(summary)), winters=winters)


def region_of(location: str | None, taxonomy: Taxonomy) -> Region:
    """The taxonomy's region for a persona's location (a free-text one: no winter, northern hemisphere)."""
    return _regions(taxonomy).get(location or "", DEFAULT_REGION)


@cache
def _region_table(ids: tuple) -> dict:
    return dict(ids)


def _regions(taxonomy: Taxonomy) -> dict[str, Region]:
    return _region_table(tuple((r.value, r) for r in taxonomy.regions))


def season_months(season: str, hemisphere: str) -> tuple[int, ...]:
    months = NORTH[season]
    return months if hemisphere == "N" or season == "festive" else tuple((m + 5) % 12 + 1 for m in months)


def place_problem(summary: str, region: Region) -> str | None:
    """Why ``summary`` cannot happen to someone living in ``region`` at any time, or None: a winter the city lacks,
    the city itself named as somewhere else (a move to it, a trip there), a citizenship of another country."""
    w = when(summary)
    if w.winters is not None and region.winter not in w.winters:
        return f"needs a {' or '.join(sorted(w.winters))} winter at home; {region.value}'s is {region.winter}"
    city, _, country = region.value.partition(", ")
    if region is not DEFAULT_REGION and re.search(rf"\b{re.escape(city)}\b", summary) and ELSEWHERE.search(summary):
        return f"names {city} as somewhere else, but this persona lives there"
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
        if time.month not in season_months(w.season, hemisphere):
            return f"names {w.season} but is dated {time:%Y-%m-%d} ({'northern' if hemisphere == 'N' else 'southern'} hemisphere)"
    return None


def place(summary: str, region: Region, lo: datetime, hi: datetime, default: datetime,
          rng: random.Random) -> datetime | None:
    """A time in (lo, hi) at which ``summary`` fits ``region`` (``default`` when the summary fixes nothing), or
    None when there is none."""
    w = when(summary)
    if place_problem(summary, region) is not None:
        return None
    if not w.fixed:
        return default
    days = []
    day = lo.replace(hour=18, minute=0, second=0, microsecond=0)
    while day < hi:
        if day > lo and fits(summary, day, region) is None:
            days.append(day)
        day += timedelta(days=1)
    return rng.choice(days) if days else None
