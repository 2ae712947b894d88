"""The causal timeline simulator: pure code, seeded, no model. Decides every preference fact."""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta

from pipeline.catalog import holds_fit, item_fit, load_catalog, load_taxonomy
from pipeline.life_state import code_reason, initial_state
from pipeline.s2_timeline.calendar import place, region_of
from pipeline.s2_timeline.coherence import (
    routine_fits,
    scale_of,
    tells_of_a_first,
    tells_of_a_habit,
)
from pipeline.s2_timeline.events import catalog_facets, event_index
from pipeline.s2_timeline.life_clock import GOLDEN, UPDATE_LAG, LifeClock, _minutes_into
from pipeline.s2_timeline.periods import PeriodWindow, history_start, period_windows
from pipeline.words import with_item
from schemas.catalog import Effect, InventoryItem, LifeEventSpec, Taxonomy
from schemas.config import RunConfig
from schemas.ids import pref_id, stable_id
from schemas.persona import Persona, stereotype_match
from schemas.timeline import Event, EventEdge, PreferenceVersion, Timeline

CANDIDATE_WINDOW = 4  # events weighed against each other for a held preference they can turn around
LIKE_SHARE_GAP = 0.1  # how far the turnable items' share of likes may drift from all held items' before it leans
HELD_WINDOWS = 8  # ... and how many windows ahead an event may come from to turn a held preference
CROSS_TOPIC_PULL = 2.0  # an event turning items of k of the run's topics is weighed by k ** this
TURN_LEAD = 1  # how many more views a persona may turn from one stance than from the other
HELD_CHOICES = 3  # events that can turn a held view compared, the one turning more of the run's topics kept
TURNABLE_WEIGHT = 4.0  # a held item some event names is this many times likelier to be drawn than one none names
TURNERS_FULL = 3  # ... when at least this many events name it; fewer, proportionally less (one: no more likely)


def simulate_timeline(
    persona: Persona, inventory: dict[str, list[InventoryItem]], *, config: RunConfig, rng: random.Random,
    index: int | None = None,
) -> Timeline:
    """Initial preferences, background life, then per later period life events that change preferences.

    ``index`` (the persona's position in the run) spreads the personas' major events evenly over each long period
    (a golden-ratio sequence of phases), so no month of a run holds many more of them than its share; without it
    each persona's phase is random."""
    sim = _Simulation(persona, inventory, config, rng, load_taxonomy())
    sim.phase = (index * GOLDEN) % 1.0 if index is not None else rng.random()
    windows = period_windows(config)
    sim.initial_preferences(history_start(config))
    sim.background(windows[0])
    for window in windows[1:]:
        sim.period(window)
    return sim.timeline()


def _other(stance: str) -> str:
    return "dislike" if stance == "like" else "like"


def _stance(effect: Effect) -> str:
    return "like" if effect.direction == "+" else "dislike"


class _Simulation(LifeClock):
    """Mutable builder state for one persona's timeline; frozen into a validated Timeline at the end."""

    def __init__(self, persona: Persona, inventory, config: RunConfig, rng: random.Random, taxonomy: Taxonomy):
        self.persona, self.inventory, self.config, self.rng, self.tax = persona, inventory, config, rng, taxonomy
        self.s = config.timeline
        self.events: list[Event] = []
        self.edges: list[EventEdge] = []
        self.chains: dict[str, list[PreferenceVersion]] = {}
        self.last_update: dict[str, Event] = {}
        self.used_summaries: set[str] = set()
        self.opened: dict[str, bool] = {}  # event summary -> open to this persona (``_open``)
        self.turned: Counter[str] = Counter()  # stance -> how many held views this persona turned away from it
        self.tags = persona.attributes.stereotype_tags()
        self.state = initial_state(persona.attributes)
        catalog = load_catalog()
        # only items this person would plausibly hold (the catalog's age ranges and genders), so no 85-year-old
        # starts out liking indoor climbing and no 19-year-old takes to estate planning
        self.fits = item_fit(catalog, persona.attributes)
        # the tastes held from the start also fit the life (no childproofed rooms without young children, no
        # cross-country skiing in Singapore); an event may still turn a view of such an item (a first pregnancy)
        self.region = region_of(persona.location, taxonomy)
        holds = holds_fit(catalog, self.state, self.region.winter)
        self.inventory = {t: [i for i in items if self.fits(t, i.name) and holds(t, i.name)]
                          for t, items in inventory.items()}
        self.index = event_index(taxonomy, config.topics, catalog_facets(catalog))
        self.last_life: datetime | None = None  # the latest life event's time: the next one comes after it
        self.last_major: datetime | None = None
        self.last_trip: datetime | None = None  # the latest life event away from home (calendar.when's stay)
        self.placed: dict[str, datetime] = {}  # event summary -> the time it would take in the slot being filled

    # -- initial state ---------------------------------------------------------------------------
    def initial_preferences(self, start: datetime) -> None:
        """3-5 held items per topic, items some life event names (ones it can turn) drawn more often: a
        stereotyped item is liked, another liked at ``like_probability``, or, where events turn it one way
        only, held the other way so that it can turn. A turnable item then leans toward the stance its share
        of likes lacks, so the items that can change are liked about as often as all held items, and a change
        from dislike to like is about as common as one from like to dislike (else the first stance of a
        changed chain would tell which of two mirrored chains is the answer)."""
        likes: Counter[bool] = Counter()  # liked held items, by whether events can turn them
        held: Counter[bool] = Counter()
        for topic in self.config.topics:
            k = self.rng.randint(self.s.initial_prefs_min, self.s.initial_prefs_max)
            for _ in range(min(k, len(self.inventory[topic]))):
                stereo = self.rng.random() < self.s.stereotypical_fraction
                item = self._unused_item(topic, stereotypical=stereo) or self._unused_item(topic)
                if item is None:
                    break
                is_stereo = stereo and stereotype_match(self.tags, item.tags)
                turnable = (topic, item.name) in self.index.ways
                like = is_stereo or self.rng.random() < self.s.like_probability
                ways = self.index.ways.get((topic, item.name), set())
                if not is_stereo and len(ways) == 1:
                    like = ways == {"-"}
                if turnable and not is_stereo and held[True]:
                    gap = likes[True] / held[True] - sum(likes.values()) / sum(held.values())
                    like = False if gap > LIKE_SHARE_GAP else True if gap < -LIKE_SHARE_GAP else like
                likes[turnable] += like
                held[turnable] += 1
                self._add_version(topic, item.name, "like" if like else "dislike", start, None, is_stereo)

    def _unused_item(self, topic: str, stereotypical: bool | None = None) -> InventoryItem | None:
        """A random item not yet held, one that ``TURNERS_FULL`` or more events name ``TURNABLE_WEIGHT`` times likelier
        (fewer proportionally less, one no likelier than an item none names); ``stereotypical``
        True/False restricts to items that do/don't match the persona's demographic tags."""
        used = {v[0].item for v in self.chains.values() if v[0].topic == topic}
        pool = [i for i in self.inventory[topic] if i.name not in used]
        if stereotypical is not None:
            pool = [i for i in pool if stereotype_match(self.tags, i.tags) == stereotypical]
        if not pool:
            return None
        # an item only one or two events can turn weighs less, so that no single event becomes the cause that
        # every holder of a popular item must draw
        weights = [1.0 + (TURNABLE_WEIGHT - 1.0) * max(0, min(self.index.turners[(topic, i.name)], TURNERS_FULL) - 1)
                   / (TURNERS_FULL - 1) for i in pool]
        return self.rng.choices(pool, weights=weights)[0]

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

    # -- life state and event choice ---------------------------------------------------------------
    def _eligible(self) -> list[tuple[str, LifeEventSpec]]:
        """Events whose preconditions hold now and that this persona has not lived yet, in a stable order."""
        return [(c, spec) for c, spec in self.index.allowed(self.state, self.persona.attributes.age)
                if spec.summary not in self.used_summaries
                and (not spec.after or not self.used_summaries.isdisjoint(spec.after))]

    def _reach(self, spec: LifeEventSpec) -> int:
        """How many of the run's topics the event turns items of."""
        return self.index.reach[spec.summary]

    def _weighted_order(self, candidates: list[tuple[str, LifeEventSpec]], weight) -> list[tuple[str, LifeEventSpec]]:
        """A seeded random order in which heavier candidates tend to come first (Efraimidis-Spirakis keys)."""
        keyed = [(self.rng.random() ** (1.0 / weight(spec)), i) for i, (_, spec) in enumerate(candidates)]
        return [candidates[i] for _, i in sorted(keyed, reverse=True)]

    def _other_topics(self, first: str, spec: LifeEventSpec, changes: list, changed: set[str], targets: list[str],
                      done: set[str]) -> None:
        """Add to ``changes`` the event's changes of its other topics, the period's own targets first; a change
        outside them takes the place of a target not reached yet, so a period changes as many topics as before."""
        named = self.index.topics[spec.summary] & set(self.config.topics)
        others = sorted(named - done - {first})
        self.rng.shuffle(others)
        others.sort(key=lambda t: t not in targets)
        for topic in others:
            if len(changes) >= self.s.max_topics_per_event:
                break
            taken = changed | {c[1] for c in changes}
            extra = self._pick_change(topic, spec, taken) or self._pick_change(topic, spec, taken, "fresh")
            if extra is None:
                continue
            changes.append(extra)
            if topic not in targets:
                pending = [t for t in targets if t not in done and t != first and t not in {c[0].topic for c in changes}]
                if pending:
                    done.add(pending[-1])

    def _cause_for(self, topic: str, changed: set[str], slot: tuple):
        """(category, event, change) for a life event that can change ``topic`` now, or None.

        Events are tried in a weighted random order, a few at a time: among those few, a change that turns
        a held preference around comes first (a longer chain first, when any event turns one back), else one
        that starts a view on a new item. Small windows keep every event's share even; the modes keep chains
        long."""
        # an event of weight w < 1 is open to this persona with chance w, decided once: one that alone can turn
        # a popular item would otherwise be drawn whenever that item is held, whatever its weight
        candidates = [(c, spec) for c, spec in self._eligible() if topic in self.index.topics[spec.summary]
                      and self._open(spec) and self._timed(spec, *slot) is not None]
        # an event naming several items of this topic finds a held one more often: weigh it down a little; one
        # that turns items of k of the run's topics weighs k ** CROSS_TOPIC_PULL times, so that about one changing
        # life event in eight changes 2+ topics (a pull of 10 made a few two-topic events the cause of a tenth of
        # the run once the taxonomy had many of them)
        candidates = self._weighted_order(candidates, lambda spec: spec.weight * self._reach(spec) ** CROSS_TOPIC_PULL
                                          / len(self.index.named[(spec.summary, topic)]) ** 0.5)
        if not slot[3]:  # the period's major slot: a major event first, where one can change the topic
            candidates.sort(key=lambda c: scale_of(c[1]) != "major")
        modes = ["fresh", "held"]
        if self.rng.random() >= self.s.new_item_fraction:
            modes = ["long", "held", "fresh"] if self.rng.random() < self.s.continue_chain_probability else ["held", "fresh"]
        for start in range(0, len(candidates), CANDIDATE_WINDOW):
            for mode in modes:
                # a held preference may be turned by any of the next few windows' events; a new view only
                # by this window's, so one with rare effects is not drawn for every persona
                span = len(candidates) if mode == "long" else CANDIDATE_WINDOW * (HELD_WINDOWS if mode != "fresh" else 1)
                fits = self._fits(topic, candidates[start:start + span], changed, mode)
                if fits:
                    # of the first few events that can turn a held view, one turning the stance this persona has
                    # turned less often (so a changed chain's first stance does not tell its direction), then one
                    # that changes more topics
                    return max(fits, key=lambda fit: (self._rarer_turn(fit[2]), self._reach(fit[1])))
        return None

    def _fits(self, topic: str, candidates: list[tuple[str, LifeEventSpec]], changed: set[str], mode: str) -> list:
        """(category, event, change) of the first ``candidates`` that find a change of ``mode``: the first one for a
        new view, up to ``HELD_CHOICES`` for a held one."""
        fits = []
        for category, spec in candidates:
            plan = self._pick_change(topic, spec, changed, mode)
            if plan is not None:
                fits.append((category, spec, plan))
                if mode == "fresh" or len(fits) == HELD_CHOICES:
                    break
        return fits

    def _lead(self, stance: str) -> int:
        """How many more held views this persona has turned away from ``stance`` than from the other stance."""
        return self.turned[stance] - self.turned[_other(stance)]

    def _rarer_turn(self, change) -> bool:
        """Whether ``change`` turns a held view from the stance this persona has so far turned from less often."""
        pid = change[1]
        return pid in self.chains and self._lead(self.chains[pid][-1].stance) < 0

    def _open(self, spec: LifeEventSpec) -> bool:
        """Whether an event may cause changes for this persona: always at weight >= 1, else with chance ``weight``,
        drawn the first time it is asked and kept."""
        if spec.weight >= 1:
            return True
        if spec.summary not in self.opened:
            self.opened[spec.summary] = self.rng.random() < spec.weight
        return self.opened[spec.summary]

    def _pick_change(self, topic: str, spec: LifeEventSpec, changed: set[str], mode: str = "held"):
        """(effect, pref_id, item, new stance) for one of the items the event names in ``topic``, or None.

        The item's effect says the way: pushed up, a held dislike becomes a like (mode held, or long: a chain
        of 2+ versions), or a new item becomes a like (mode fresh); pushed down, the same toward dislike."""
        named = self.index.named.get((spec.summary, topic), {})
        if not named:
            return None
        if mode == "fresh":
            used = {c[0].item for c in self.chains.values() if c[0].topic == topic}
            own = [i.name for i in self.inventory[topic] if i.name in named and i.name not in used]
            pool = own or [name for name in named if name not in used and self.fits(topic, name)]
            # an event that tells of a habit ("quit doubles", "after decades of golf") turns a view held before,
            # never a new one: its new dislike needs the liking to have been there
            pool = [name for name in pool if not (named[name].direction == "-" and tells_of_a_habit(spec.summary))]
            if not pool:
                return None
            item = self.rng.choice(pool)
            return named[item], pref_id(self.persona.persona_id, topic, item), item, _stance(named[item])
        held = [c for pid, c in self.chains.items() if c[0].topic == topic and pid not in changed
                and c[0].item in named and c[-1].stance != _stance(named[c[0].item]) and c[-1].valid_to is None
                and len(c) < self.s.max_versions and (mode != "long" or len(c) >= 2)]
        # a persona turns views from like and from dislike about equally often (else a changed chain's first
        # stance would tell its direction): a stance already turned from TURN_LEAD more times than the other waits
        # an event that tells of a first try of the item ("a first BJJ class") never turns a view held before
        held = [c for c in held if self._lead(c[-1].stance) < TURN_LEAD and not self._too_soon(c, spec)
                and not tells_of_a_first(spec.summary, c[0].item)]
        if not held:
            return None
        chain = self.rng.choice(held)
        effect = named[chain[0].item]
        return effect, chain[0].pref_id, chain[0].item, _stance(effect)

    def _update(self, window: PeriodWindow, life: Event, spec: LifeEventSpec, change, changed: set[str]) -> None:
        effect, pid, item, stance = change
        topic = effect.topic
        when = life.time + timedelta(minutes=30) + (_minutes_into(window, 0.0, UPDATE_LAG, self.rng) - window.events_start)
        verb = "started to like" if stance == "like" else "went off"
        update = self._event(window, when, "preference_update", f"{verb} {item}", topic=topic, category=life.category,
                             cause_event_id=life.event_id, facet=effect.facet, direction=effect.direction)
        previous = [v.key for v in self.chains.get(pid, [])[-1:]]
        if pid in self.chains:
            self.turned[self.chains[pid][-1].stance] += 1
        version = self._add_version(topic, item, stance, when + timedelta(minutes=10), update)
        version.reason = code_reason(spec.summary, item, stance)
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
            state = self._state_at(time)
            templates = [t for t in self.tax.routine_summaries[version.stance] if routine_fits(t, state)]
            summary = with_item(self.rng.choice(templates), version.item)
            # at an hour and on a day people do such things ("over the weekend": a Saturday or Sunday), near its slot
            lo = max(window.events_start, version.valid_from)
            time = place(summary, self.region, lo, window.events_end, time, self.rng)
            if time is None:
                continue
            self._event(window, time, "routine", summary, topic=topic, pref_refs=[version.key])

    def _state_at(self, time: datetime) -> dict[str, str]:
        """The life state at ``time``: the attributes' state with the life events before it applied."""
        state = initial_state(self.persona.attributes)
        specs = self.tax.event_specs()
        for e in sorted((e for e in self.events if e.kind == "life_event" and e.time <= time), key=lambda e: e.time):
            state.update(specs[e.summary][1].sets)
        return state

    def timeline(self) -> Timeline:
        prefs = [v for chain in self.chains.values() for v in chain]
        return Timeline(
            persona_id=self.persona.persona_id,
            events=sorted(self.events, key=lambda e: (e.time, e.event_id)),
            edges=self.edges,
            preferences=sorted(prefs, key=lambda p: (p.topic, p.pref_id, p.version)),
        )
