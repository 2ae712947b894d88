"""The causal timeline simulator: pure code, seeded, no model. Decides every preference fact."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from pipeline.timeline.catalog import load_taxonomy
from pipeline.timeline.periods import PeriodWindow, history_start, period_windows
from schemas.catalog import InventoryItem, Taxonomy
from schemas.config import RunConfig
from schemas.ids import pref_id, stable_id
from schemas.persona import Persona
from schemas.timeline import Event, EventEdge, PreferenceVersion, Timeline


def simulate_timeline(
    persona: Persona, inventory: dict[str, list[InventoryItem]], *, config: RunConfig, rng: random.Random
) -> Timeline:
    """Initial preferences, background life, then per later period life events that change preferences."""
    sim = _Simulation(persona, inventory, config, rng, load_taxonomy())
    windows = period_windows(config)
    sim.initial_preferences(history_start(config))
    sim.background(windows[0])
    for window in windows[1:]:
        sim.period(window)
    return sim.timeline()


def _minutes_into(window: PeriodWindow, lo: float, hi: float, rng: random.Random) -> datetime:
    """A minute-aligned time at a random fraction in [lo, hi) of the window's event span."""
    span = int((window.events_end - window.events_start).total_seconds() // 60)
    return window.events_start + timedelta(minutes=int(span * rng.uniform(lo, hi)))


class _Simulation:
    """Mutable builder state for one persona's timeline; frozen into a validated Timeline at the end."""

    def __init__(self, persona: Persona, inventory, config: RunConfig, rng: random.Random, taxonomy: Taxonomy):
        self.persona, self.inventory, self.config, self.rng, self.tax = persona, inventory, config, rng, taxonomy
        self.s = config.timeline
        self.events: list[Event] = []
        self.edges: list[EventEdge] = []
        self.chains: dict[str, list[PreferenceVersion]] = {}
        self.last_update: dict[str, Event] = {}
        self.used_summaries: set[str] = set()
        self.tags = persona.attributes.stereotype_tags()

    # -- initial state ---------------------------------------------------------------------------
    def initial_preferences(self, start: datetime) -> None:
        for topic in self.config.topics:
            k = self.rng.randint(self.s.initial_prefs_min, self.s.initial_prefs_max)
            for _ in range(min(k, len(self.inventory[topic]))):
                stereo = self.rng.random() < self.s.stereotypical_fraction
                item = self._unused_item(topic, stereotypical=stereo) or self._unused_item(topic)
                if item is None:
                    break
                is_stereo = stereo and bool(self.tags & set(item.tags))
                like = is_stereo or self.rng.random() < self.s.like_probability
                self._add_version(topic, item.name, "like" if like else "dislike", start, None, is_stereo)

    def _unused_item(self, topic: str, stereotypical: bool | None = None) -> InventoryItem | None:
        """A random item not yet held; ``stereotypical`` True/False restricts to items that do/don't
        match the persona's demographic tags."""
        used = {v[0].item for v in self.chains.values() if v[0].topic == topic}
        pool = [i for i in self.inventory[topic] if i.name not in used]
        if stereotypical is not None:
            pool = [i for i in pool if bool(self.tags & set(i.tags)) == stereotypical]
        return self.rng.choice(pool) if pool else None

    def _add_version(self, topic, item, stance, valid_from, cause: Event | None, stereo=False) -> PreferenceVersion:
        pid = pref_id(self.persona.persona_id, topic, item)
        chain = self.chains.setdefault(pid, [])
        if chain:
            chain[-1].valid_to = valid_from
        version = PreferenceVersion(
            pref_id=pid,
            version=len(chain) + 1,
            persona_id=self.persona.persona_id,
            topic=topic,
            item=item,
            stance=stance,
            valid_from=valid_from,
            caused_by_event_id=cause.event_id if cause else None,
            stereotypical=stereo,
        )
        chain.append(version)
        return version

    # -- events ------------------------------------------------------------------------------------
    def _event(self, window: PeriodWindow, time: datetime, kind, summary: str, **fields) -> Event:
        event = Event(
            event_id=stable_id("evt", self.persona.persona_id, kind, time.isoformat(), summary, fields.get("topic")),
            persona_id=self.persona.persona_id,
            time=time,
            period=window.name,
            kind=kind,
            summary=summary,
            **fields,
        )
        self.events.append(event)
        return event

    def _summary(self, category: str) -> str:
        options = self.tax.life_event_categories[category].summaries
        fresh = [s for s in options if s not in self.used_summaries] or options
        choice = self.rng.choice(fresh)
        self.used_summaries.add(choice)
        return choice

    def _life_event(self, window: PeriodWindow, category: str, time: datetime) -> Event:
        event = self._event(window, time, "life_event", self._summary(category), category=category)
        earlier = [
            e
            for e in self.events
            if e.kind == "life_event" and e.time < time and category in self.tax.follow_ups.get(e.category or "", [])
        ]
        if earlier and self.rng.random() < self.s.followup_probability:
            parent = self.rng.choice(earlier)
            self.edges.append(EventEdge(parent_event_id=parent.event_id, child_event_id=event.event_id, relation="causes"))
        return event

    def background(self, window: PeriodWindow) -> None:
        categories = sorted(self.tax.life_event_categories)
        times = sorted(_minutes_into(window, 0.0, 1.0, self.rng) for _ in range(self.s.background_events))
        for time in times:
            self._life_event(window, self.rng.choice(categories), time)

    def period(self, window: PeriodWindow) -> None:
        changed: set[str] = set()
        for category, topics in self._groups():
            life = self._life_event(window, category, _minutes_into(window, 0.0, 0.6, self.rng))
            for topic in topics:
                self._update(window, life, topic, changed)
        self._routines(window)

    def _groups(self) -> list[tuple[str, list[str]]]:
        """Which topics change this period, grouped into life events (some cross-topic)."""
        cats = self.tax.life_event_categories
        remaining = [t for t in self.config.topics if self.rng.random() < self.s.topic_update_probability]
        self.rng.shuffle(remaining)
        groups = []
        while remaining:
            first = remaining.pop(0)
            own = sorted(c for c, cat in cats.items() if first in cat.topics) or sorted(cats)
            cross = [c for c in own if any(t in cats[c].topics for t in remaining)]
            if cross and self.s.max_topics_per_event > 1 and self.rng.random() < self.s.cross_topic_fraction:
                category = self.rng.choice(cross)
                others = [t for t in remaining if t in cats[category].topics]
                extra = self.rng.sample(others, self.rng.randint(1, min(len(others), self.s.max_topics_per_event - 1)))
                remaining = [t for t in remaining if t not in extra]
                groups.append((category, [first, *extra]))
            else:
                groups.append((self.rng.choice(own), [first]))
        return groups

    def _pick_preference(self, topic: str, changed: set[str]) -> tuple[str, str] | None:
        """(item, new stance) for the preference this topic changes, or None when nothing can change."""
        open_chains = [
            c for pid, c in self.chains.items() if c[0].topic == topic and pid not in changed and len(c) < self.s.max_versions
        ]
        long = [c for c in open_chains if len(c) >= 2]
        if long and self.rng.random() < self.s.continue_chain_probability:
            chain = self.rng.choice(long)
        elif self.rng.random() < self.s.new_item_fraction and (item := self._unused_item(topic)):
            return item.name, "like" if self.rng.random() < self.s.like_probability else "dislike"
        elif open_chains:
            chain = self.rng.choice(open_chains)
        else:
            return None
        return chain[-1].item, "dislike" if chain[-1].stance == "like" else "like"

    def _update(self, window: PeriodWindow, life: Event, topic: str, changed: set[str]) -> None:
        picked = self._pick_preference(topic, changed)
        if picked is None:
            return
        item, stance = picked
        pid = pref_id(self.persona.persona_id, topic, item)
        when = life.time + timedelta(minutes=30) + (_minutes_into(window, 0.0, 0.2, self.rng) - window.events_start)
        verb = "started to like" if stance == "like" else "went off"
        update = self._event(window, when, "preference_update", f"{verb} {item}", topic=topic, category=life.category)
        previous = [v.key for v in self.chains.get(pid, [])[-1:]]
        version = self._add_version(topic, item, stance, when + timedelta(minutes=10), update)
        version.reason = f"{self.persona.name} {life.summary}"
        update.pref_refs = [*previous, version.key]
        self.edges.append(EventEdge(parent_event_id=life.event_id, child_event_id=update.event_id, relation="causes"))
        if pid in self.last_update:
            self.edges.append(
                EventEdge(parent_event_id=self.last_update[pid].event_id, child_event_id=update.event_id, relation="supersedes")
            )
        self.last_update[pid] = update
        changed.add(pid)

    def _routines(self, window: PeriodWindow) -> None:
        mean = self.s.routine_per_period
        count = int(mean) + (self.rng.random() < mean - int(mean))
        for _ in range(count):
            time = _minutes_into(window, 0.0, 1.0, self.rng)
            topic = self.rng.choice(self.config.topics)
            # only versions still current at the period's end, so a later session never voices a stale one
            held = [v for c in self.chains.values() for v in c if v.topic == topic and v.valid_at(time) and v.valid_to is None]
            if not held:
                continue
            version = self.rng.choice(held)
            summary = self.rng.choice(self.tax.routine_summaries[version.stance]).replace("{item}", version.item)
            self._event(window, time, "routine", summary, topic=topic, pref_refs=[version.key])

    def timeline(self) -> Timeline:
        prefs = [v for chain in self.chains.values() for v in chain]
        return Timeline(
            persona_id=self.persona.persona_id,
            events=sorted(self.events, key=lambda e: (e.time, e.event_id)),
            edges=self.edges,
            preferences=sorted(prefs, key=lambda p: (p.topic, p.pref_id, p.version)),
        )
