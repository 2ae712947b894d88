"""When a persona's life events happen: a clock for a life (pipeline/s2_timeline/coherence.py says why). Each
period's events take slots in time order; a major event takes one slot of a long period, at this persona's phase
of it (a golden-ratio sequence over the run's personas), reserved for a topic a major event can change; a short
period holds minor events only; an event that names a day or a season takes it (calendar.py); no two major
events come within MAJOR_GAP_DAYS; before the first conversation none changes the life state the profile shows.
The mixin of ``_Simulation`` (simulate_timeline.py), whose state it reads and extends."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from pipeline.life_state import apply
from pipeline.s2_timeline.calendar import place, when
from pipeline.s2_timeline.coherence import (
    FOLLOW_UP_DAYS,
    MAJOR_GAP_DAYS,
    SAME_DAY_HOURS,
    SHORT_PERIOD_DAYS,
    TRIP_GAP_DAYS,
    TURN_BACK_DAYS,
    changes_state,
    fits_short_period,
    related,
    scale_of,
)
from pipeline.s2_timeline.periods import PeriodWindow
from schemas.catalog import LifeEventSpec
from schemas.timeline import Event, EventEdge, PreferenceVersion

GOLDEN = 0.6180339887498949  # the golden ratio's fraction: i * GOLDEN mod 1 spreads any number of phases evenly
LIFE_SPAN = 0.85  # a later period's life events fall in the first this share of its span (their updates follow)
UPDATE_LAG = 0.12  # ... and an update follows its event within this share of the span


def _at_fraction(window: PeriodWindow, fraction: float) -> datetime:
    """The minute-aligned time at ``fraction`` of the window's event span."""
    span = int((window.events_end - window.events_start).total_seconds() // 60)
    return window.events_start + timedelta(minutes=int(span * fraction))


def _minutes_into(window: PeriodWindow, lo: float, hi: float, rng: random.Random) -> datetime:
    """A minute-aligned time at a random fraction in [lo, hi) of the window's event span."""
    span = int((window.events_end - window.events_start).total_seconds() // 60)
    return window.events_start + timedelta(minutes=int(span * rng.uniform(lo, hi)))


class LifeClock:
    """Scheduling of life events; ``_Simulation`` provides the state (rng, events, chains, index, ...)."""

    def _life_event(self, window: PeriodWindow, category: str, spec: LifeEventSpec, time: datetime) -> Event:
        self.used_summaries.add(spec.summary)
        apply(spec, self.state)
        scale = scale_of(spec)
        self.last_life = time
        if when(spec.summary).stay_days:
            self.last_trip = time
        if scale == "major":
            self.last_major = time
        event = self._event(window, time, "life_event", spec.summary, category=category, scale=scale)
        # only a change of life has consequences that follow it (a move, a diagnosis, a new job), within a year, and
        # only where the two share what links them (a word): a film watched or a meal eaten causes no later life event
        earlier = [
            e
            for e in self.events
            if e.kind == "life_event" and e.scale == "major" and time - timedelta(days=FOLLOW_UP_DAYS) < e.time < time
            and category in self.tax.follow_ups.get(e.category or "", []) and related(e.summary, spec.summary)
        ]
        if earlier and self.rng.random() < self.s.followup_probability:
            parent = self.rng.choice(earlier)
            self.edges.append(EventEdge(parent_event_id=parent.event_id, child_event_id=event.event_id, relation="causes"))
        return event

    def _timed(self, spec: LifeEventSpec, slot: datetime, lo: datetime, hi: datetime, minor_only: bool,
               short: bool = False) -> datetime | None:
        """When ``spec`` would happen if drawn for ``slot`` (between the last life event ``lo`` and the next slot
        ``hi``): its named day or season in this persona's city, else the slot itself; None when it cannot (a
        major event in a short period or within MAJOR_GAP_DAYS of the last major one, a season or day the span
        lacks, a winter the city does not have)."""
        major = scale_of(spec) == "major"
        if minor_only and (major or (short and not fits_short_period(spec))):
            return None
        at = place(spec.summary, self.region, lo, hi, slot, self.rng)
        if at is None or (major and self.last_major is not None and at - self.last_major < timedelta(days=MAJOR_GAP_DAYS)):
            return None
        stay = when(spec.summary).stay_days  # away that long before its date: nothing else happens meanwhile
        if self.last_life is not None and at - self.last_life < max(timedelta(days=stay), timedelta(hours=SAME_DAY_HOURS)):
            return None
        if stay and self.last_trip is not None and abs(at - self.last_trip) < timedelta(days=TRIP_GAP_DAYS):
            return None  # no trip away within three weeks of the last one (three trips in nine days read as fiction)
        self.placed[spec.summary] = at
        return at

    def background(self, window: PeriodWindow) -> None:
        """Life before the first conversations: events that change no preference, those that touch few of
        the run's topics first (the others are drawn later, as causes of changes)."""
        times = sorted(_minutes_into(window, 0.0, 1.0, self.rng) for _ in range(self.s.background_events))
        short = window.events_end - window.events_start < timedelta(days=SHORT_PERIOD_DAYS)
        major_slot = None
        if times:  # the major event's slot: this persona's phase of the year, in place of one of the slots
            major_slot = _at_fraction(window, self.phase)
            times.pop(self.rng.randrange(len(times)))
            times = sorted([*times, major_slot])
        for i, time in enumerate(times):
            lo = self.last_life or window.events_start
            hi = times[i + 1] if i + 1 < len(times) else window.events_end
            # before the first conversation the life state stays the one the profile shows
            eligible = [(c, spec) for c, spec in self._eligible() if not changes_state(spec, self.state)]
            ordered = self._weighted_order(eligible, lambda spec: spec.weight / (1 + self._reach(spec)))
            if time == major_slot and not short:  # one slot of the year before holds a major event
                ordered.sort(key=lambda c: scale_of(c[1]) != "major")
            for category, spec in ordered:
                at = self._timed(spec, max(time, lo), lo, hi, short or time != major_slot, short)
                if at is not None:
                    self._life_event(window, category, spec, at)
                    break

    def period(self, window: PeriodWindow) -> None:
        """Topics picked to change; each gets a life event whose effects name it and find an item.

        Events are drawn in time order, so each one's preconditions hold on the state its predecessors left."""
        changed: set[str] = set()
        targets = [t for t in self.config.topics if self.rng.random() < self.s.topic_update_probability]
        self.rng.shuffle(targets)
        times = sorted(_minutes_into(window, 0.0, LIFE_SPAN, self.rng) for _ in targets)
        short = window.events_end - window.events_start < timedelta(days=SHORT_PERIOD_DAYS)
        end = window.events_start + (window.events_end - window.events_start) * LIFE_SPAN
        # one slot of a long period, drawn at random, holds a major event, reserved for a topic one can change: were
        # majors free to take any slot they would take the first (events that change several topics are drawn
        # first, and many are major); were the slot's topic not reserved, a late slot would often find no topic left
        major_slot, major_topic = None, None
        if times and not short:
            # this persona's phase of the period (shifted per period), in place of one of the slots
            major_slot = _at_fraction(window, LIFE_SPAN * ((self.phase + GOLDEN * window.index) % 1.0))
            times.pop(self.rng.randrange(len(times)))
            times = sorted([*times, major_slot])
            for topic in self.rng.sample(targets, len(targets)):  # one a major event can change, tried now
                found = self._cause_for(topic, set(), (major_slot, window.events_start, end, False, short))
                if found is not None and scale_of(found[1]) == "major":
                    major_topic = topic
                    break
        done: set[str] = set()
        pending = [t for t in targets if t != major_topic]
        for at in list(times):
            lo = max(self.last_life or window.events_start, window.events_start)
            hi = next((t for t in times if t > at), end)
            is_major = at == major_slot and major_topic not in done
            slot = (max(at, lo), lo, hi, short or not is_major, short)
            found, first = None, None
            if is_major:  # the reserved topic, else the first other one a major event can change; then it is free
                for topic in [major_topic] + [t for t in pending if t not in done]:
                    result = self._cause_for(topic, changed, slot)
                    if result is not None and scale_of(result[1]) == "major":
                        found, first = result, topic
                        break
                if first in pending:
                    pending.remove(first)
                if first != major_topic:
                    pending.insert(0, major_topic)
                if found is None and self._life_only_major(window, slot):  # no change fits: a life event alone
                    lo = self.last_life
                    slot = (max(at, lo), lo, hi, True, short)
                major_topic, slot = None, (*slot[:3], True, short)
            for topic in [] if found is not None else [t for t in pending if t not in done]:
                found, first = self._cause_for(topic, changed, slot), topic
                if found is not None:  # a topic no event can change at this slot is tried again at the next
                    pending.remove(topic)
                    break
            if found is None:
                continue
            category, spec, plan = found
            changes = [plan]
            if self.s.max_topics_per_event > 1 and self.rng.random() < self.s.cross_topic_fraction:
                reserved = major_topic is not None and major_topic not in done and first != major_topic
                done.update({major_topic} if reserved else set())
                self._other_topics(first, spec, changes, changed, targets, done)
                done.difference_update({major_topic} if reserved else set())
            times.remove(at)
            life = self._life_event(window, category, spec, self.placed[spec.summary])
            for change in changes:
                done.add(change[0].topic)
                self._update(window, life, spec, change, changed)
        self._routines(window)

    def _life_only_major(self, window: PeriodWindow, slot: tuple) -> bool:
        """A major life event that changes no preference at the period's major slot (as the year before has), when
        none that changes one fits there; whether one did."""
        eligible = [(c, spec) for c, spec in self._eligible() if scale_of(spec) == "major" and self._open(spec)]
        for category, spec in self._weighted_order(eligible, lambda spec: spec.weight / (1 + self._reach(spec))):
            at = self._timed(spec, *slot)
            if at is not None and at < slot[2]:
                self._life_event(window, category, spec, at)
                return True
        return False

    def _too_soon(self, chain: list[PreferenceVersion], spec: LifeEventSpec) -> bool:
        """Whether turning ``chain`` back now would undo its last change within TURN_BACK_DAYS (allowed only to a
        major event undoing a minor one's change)."""
        if len(chain) < 2 or spec.summary not in self.placed:
            return False
        if self.placed[spec.summary] - chain[-1].valid_from >= timedelta(days=TURN_BACK_DAYS):
            return False
        cause = next((e for e in self.events if e.event_id == chain[-1].caused_by_event_id), None)
        life = next((e for e in self.events if cause is not None and e.event_id == cause.cause_event_id), None)
        return not (scale_of(spec) == "major" and life is not None and life.scale == "minor")
