"""Material for distractors that does not come from the persona's own history.

Other-persona options come from code-only *shadow personas*: built-in seeds at indices derived by
hashing (run seed, persona id), simulated over the catalog with no model. So persona i's queries
never depend on which other personas are in the run (identical for N=5 or N=500), and the shadow
items are real preferences of a plausible someone else rather than random catalog picks.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from functools import cache

from pipeline.catalog import catalog_inventory, load_catalog, load_taxonomy
from pipeline.rng import derive_rng, derive_seed
from pipeline.s1_personas.sample_personas import persona_from_seed, sample_builtin_seed
from pipeline.s2_timeline.coherence import LASTING, scale_of
from pipeline.s2_timeline.events import catalog_facets
from pipeline.s2_timeline.simulate_timeline import simulate_timeline
from pipeline.words import mentions, stems, with_item
from schemas.catalog import InventoryItem
from schemas.config import RunConfig
from schemas.persona import Persona, stereotype_match
from schemas.timeline import PreferenceVersion, Timeline

SHADOW_INDEX_BASE = 1_000_000  # above any run's persona indices (n_personas <= 100_000)
SHADOWS = 2


def shadow_timelines(config: RunConfig, persona_id: str, count: int = SHADOWS,
                     inventory: dict[str, list[InventoryItem]] | None = None) -> list[Timeline]:
    """``count`` code-only personas for ``persona_id``, simulated over the persona's own inventory when
    given (so another persona's items come from the same pool, worded alike), else over the catalog."""
    pool = {t: items for t, items in (inventory or {}).items() if t in config.topics and items}
    known = list(pool) or [t for t in config.topics if t in load_catalog().topics]
    if not known:
        return []
    sim_config = config.model_copy(update={"topics": known})
    inventory = pool or catalog_inventory(known)
    taxonomy = load_taxonomy()
    out = []
    for k in range(count):
        index = SHADOW_INDEX_BASE + derive_seed(config.seed, persona_id, "shadow", k) % 10**9
        shadow = persona_from_seed(sample_builtin_seed(index, run_seed=config.seed, taxonomy=taxonomy),
                                   run_seed=config.seed)
        rng = derive_rng(config.seed, shadow.persona_id, "simulate_timeline")
        out.append(simulate_timeline(shadow, inventory, config=sim_config, rng=rng))
    return out


REFERENCE_PERSONAS = 40
_REFERENCE: dict[tuple[str, ...], tuple[frozenset[str], dict[str, int]]] = {}


def reference_causes(config: RunConfig) -> frozenset[str]:
    """The life events the simulator makes the cause of some change, over ``REFERENCE_PERSONAS`` code-only
    personas on the catalog (the run's topics, a fixed seed; computed once per process and topics): wrong reasons
    drawn from these first are events of the kind a persona lives, so an event's kind does not tell a lived
    cause from a made-up one."""
    return _reference(config)[0]


def reference_holds(config: RunConfig) -> dict[str, int]:
    """How many of the ``REFERENCE_PERSONAS`` hold each catalog item at some time: never-held items are drawn at
    these rates (``Pools.fresh_items``), so an item's own prior (one many personas hold, one few do) does not tell
    a held item from a never-held one across the dataset."""
    return _reference(config)[1]


def _reference(config: RunConfig) -> tuple[frozenset[str], dict[str, int]]:
    """(``reference_causes``, ``reference_holds``) from one simulation of the reference personas."""
    key = tuple(sorted(config.topics))
    if key not in _REFERENCE:
        timelines = shadow_timelines(config.model_copy(update={"seed": 0}), "reference", count=REFERENCE_PERSONAS)
        found: set[str] = set()
        holds: Counter[str] = Counter()
        for timeline in timelines:
            kinds = {e.event_id: e for e in timeline.events}
            found |= {kinds[e.parent_event_id].summary for e in timeline.edges
                      if e.relation == "causes" and kinds[e.parent_event_id].kind == "life_event"}
            holds.update({p.item for p in timeline.preferences})
        _REFERENCE[key] = (frozenset(found), dict(holds))
    return _REFERENCE[key]


@dataclass
class Pools:
    """Catalog items, shadow preferences and taxonomy summaries, minus anything the persona holds."""

    persona: Persona
    timeline: Timeline
    shadows: list[Timeline]
    topics: list[str]
    inventory: dict[str, list[InventoryItem]] = field(default_factory=dict)
    causes: frozenset[str] = frozenset()  # events the simulator makes causes (``reference_causes``)
    holds: dict[str, int] = field(default_factory=dict)  # how many reference personas hold an item (``reference_holds``)
    held: set[str] = field(default_factory=set)
    _unheld: dict[str, bool] = field(default_factory=dict)
    _related: dict[tuple, list[list[str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.held = {p.item for p in self.timeline.preferences}

    def unheld(self, name: str) -> bool:
        """True when ``name`` is not (and does not mention) any item the persona holds."""
        if name not in self._unheld:
            self._unheld[name] = not any(mentions(name, item) or mentions(item, name) for item in self.held)
        return self._unheld[name]

    def fresh_items(self, topic: str, rng: random.Random, k: int) -> list[str]:
        """Up to ``k`` items of ``topic`` the persona never held: from its own inventory (the pool its
        held items come from) when it has any, else from the catalog; drawn without replacement at the rate
        personas hold them (``holds``, plus one half), so a never-held item shown is as common an item as a held one."""
        items = [i.name for i in self._items(topic) if self.unheld(i.name)]
        keys = {name: rng.random() ** (1.0 / (self.holds.get(name, 0) + 0.5)) for name in items}
        return sorted(items, key=lambda name: -keys[name])[:k]

    def source(self, topic: str, name: str) -> str:
        """Where an item of the pool comes from: "catalog" (hand-written, with facets) or "model"."""
        return "catalog" if name in _catalog_names(topic) else "model"

    def like_source(self, topic: str, items: list[str], of: str) -> list[str]:
        """``items`` from the same source as ``of`` first (a catalog name and a model-written one read
        differently, so a second item of another source would tell the rows apart), then the others."""
        want = self.source(topic, of)
        return sorted(items, key=lambda i: self.source(topic, i) != want)

    def stereotyped_items(self, topic: str) -> set[str]:
        """Items of the persona's pool whose tags match the persona's demographics."""
        tags = self.persona.attributes.stereotype_tags()
        return {i.name for i in self._items(topic) if stereotype_match(tags, i.tags)}

    def shadow_current(self, topic: str) -> list[tuple[str, PreferenceVersion]]:
        """(shadow persona id, version) for the shadows' current versions in ``topic`` (either stance)
        of items the persona never held."""
        out = []
        for shadow in self.shadows:
            for chain in shadow.chains().values():
                last = chain[-1]
                if last.topic == topic and self.unheld(last.item):
                    out.append((shadow.persona_id, last))
        return out

    def unlived_routines(self, topic: str, rng: random.Random, k: int, like: str | None = None,
                         first: list[str] | None = None) -> list[str]:
        """Up to ``k`` routine summaries about items of ``topic`` the persona never held (``first`` before
        others), of the source of ``like`` (the told routine's item) first, so an item's wording does not tell
        the told one."""
        templates = [t for bank in load_taxonomy().routine_summaries.values() for t in bank]
        rng.shuffle(templates)
        shown = [i for i in first or [] if self.unheld(i)]
        rng.shuffle(shown)
        items = list(dict.fromkeys(shown + self.fresh_items(topic, rng, k + 4)))
        items = self.like_source(topic, items, like) if like else items
        told = [e.summary for e in self.timeline.events if e.kind == "life_event"]
        out = []  # none that retells a life event the persona lived (about the same item): it would be true
        for template, item in zip(templates, items, strict=False):
            summary = with_item(template, item)
            if not any(retells(summary, lived) for lived in told):
                out.append(summary)
        return out[:k]

    def related_events(self, topic: str, item: str | None = None, direction: str | None = None) -> list[list[str]]:
        """Life-event summaries the persona never lived and could have (age, gender), in three tiers of
        relatedness: those that name ``item`` and would turn it toward ``direction``, those pushing one of its
        facets that way, those reaching ``topic`` at all. A wrong reason from the first tier is as related to
        the item as the true one, so relatedness does not tell them apart. An event retelling one the persona
        lived is left out (it would be true)."""
        key = (topic, item, direction)
        if key not in self._related:
            self._related[key] = self._related_events(topic, item, direction)
        return self._related[key]

    def _related_events(self, topic: str, item: str | None, direction: str | None) -> list[list[str]]:
        attrs = self.persona.attributes
        lived = {e.summary for e in self.timeline.events}
        told = [e.summary for e in self.timeline.events if e.kind == "life_event"]
        facets = set(catalog_facets(load_catalog()).get((topic, item), ())) if item else set()
        tiers: list[list[str]] = [[], [], []]
        for summary, effects, items, ages, genders in _event_effects():
            on_topic = [e for e in effects if e.topic == topic]
            if summary in lived or not on_topic or any(retells(summary, t) for t in told) or (attrs.age is not None and not ages[0] <= attrs.age <= ages[1]) \
                    or (genders and attrs.gender_identity not in genders):
                continue
            pushes = any(e.facet in facets and direction in (None, e.direction) for e in on_topic)
            tiers[0 if pushes and item in items else 1 if pushes else 2].append(summary)
        return tiers

    def _items(self, topic: str) -> list[InventoryItem]:
        return self.inventory.get(topic) or self._catalog(topic)

    def _catalog(self, topic: str) -> list[InventoryItem]:
        topics = load_catalog().topics
        return [InventoryItem(name=i.name, tags=list(i.tags)) for i in topics[topic].items] if topic in topics else []


def retells(summary: str, lived: str) -> bool:
    """Whether an event tells the same story as one the persona lived (half the words of the shorter alike:
    "learned from a dentist that daily blended fruit bowls were eroding their enamel"): as a wrong reason or an
    untold event it would be true."""
    a, b = stems(summary), stems(lived)
    return bool(a and b) and len(a & b) * 2 >= min(len(a), len(b))


@cache
def _event_effects() -> list[tuple[str, tuple, frozenset[str], tuple[int, int], tuple[str, ...]]]:
    """(summary, effects, named items, age span, genders it requires) of every taxonomy life event."""
    taxonomy = load_taxonomy()
    return [(spec.summary, tuple(spec.parsed_effects(taxonomy.topic_aliases)), frozenset(spec.items), spec.age,
             tuple(spec.requires.get("gender", ())))
            for name in sorted(taxonomy.life_event_categories) for spec in taxonomy.life_event_categories[name].events]


@cache
def _catalog_names(topic: str) -> frozenset[str]:
    catalog = load_catalog()
    return frozenset(i.name for i in catalog.topics[topic].items) if topic in catalog.topics else frozenset()


@cache
def _event_kinds() -> dict[str, tuple[str, bool]]:
    specs = load_taxonomy().event_specs()
    return {summary: (scale_of(spec), bool(LASTING.search(summary))) for summary, (_, spec) in specs.items()}


def event_kind(summary: str) -> tuple[str, bool] | None:
    """A taxonomy life event's scale (major / minor) and whether it takes months: a wrong reason of another kind than
    the true cause (a long stay beside a week's experience) would tell them apart."""
    return _event_kinds().get(summary)
