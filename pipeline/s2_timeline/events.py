"""The taxonomy's life events indexed for the simulator, built once per taxonomy and run topics: the items each
event names (and by which effect), the topics it reaches, and the events whose preconditions hold in a life state."""

from __future__ import annotations

from collections import Counter

from pipeline.life_state import unmet
from schemas.catalog import Effect, LifeEventSpec, Taxonomy


class EventIndex:
    """The taxonomy's events with the items each turns (and by which effect), and per run topic list their
    reach: built once."""

    def __init__(self, taxonomy: Taxonomy, topics: tuple[str, ...], facets: dict):
        self.events = [(c, spec) for c in sorted(taxonomy.life_event_categories)
                       for spec in taxonomy.life_event_categories[c].events]
        # (summary, topic) -> item -> the effect that turns it: only the items the event names
        self.named: dict[tuple[str, str], dict[str, Effect]] = {}
        self.topics: dict[str, set[str]] = {spec.summary: set() for _, spec in self.events}
        # (topic, item) -> the directions events turn it; its keys are the items some event can turn
        self.ways: dict[tuple[str, str], set[str]] = {}
        # (topic, item) -> how many events name it
        self.turners: Counter[tuple[str, str]] = Counter()
        for _, spec in self.events:
            for (topic, item), effect in spec.item_effects(taxonomy.topic_aliases, facets).items():
                self.named.setdefault((spec.summary, topic), {})[item] = effect
                self.topics[spec.summary].add(topic)
                self.ways.setdefault((topic, item), set()).add(effect.direction)
                self.turners[(topic, item)] += 1
        self.reach = {k: len(v & set(topics)) for k, v in self.topics.items()}
        self._allowed: dict[tuple, list[tuple[str, LifeEventSpec]]] = {}

    def allowed(self, state: dict[str, str], age: int | None) -> list[tuple[str, LifeEventSpec]]:
        """The events whose preconditions hold in ``state`` at ``age`` (memoized: states repeat a lot)."""
        key = (tuple(sorted(state.items())), age)
        if key not in self._allowed:
            self._allowed[key] = [(c, spec) for c, spec in self.events if unmet(spec, state, age) is None]
        return self._allowed[key]


_INDEXES: dict[tuple[int, tuple[str, ...]], EventIndex] = {}


_FACETS: dict[int, dict] = {}


def catalog_facets(catalog) -> dict:
    if id(catalog) not in _FACETS:
        _FACETS[id(catalog)] = catalog.item_facets()
    return _FACETS[id(catalog)]


def forget_indexes() -> None:
    """Drop the built indexes (keyed by the taxonomy's id: after its cache is cleared, an id may come back)."""
    _INDEXES.clear()


def event_index(taxonomy: Taxonomy, topics: list[str], facets: dict) -> EventIndex:
    key = (id(taxonomy), tuple(topics))
    if key not in _INDEXES:
        _INDEXES[key] = EventIndex(taxonomy, tuple(topics), facets)
    return _INDEXES[key]
