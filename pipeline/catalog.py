"""Loads the built-in item catalog and taxonomy shipped in ``pipeline/data/``."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from itertools import product
from pathlib import Path

from pipeline.config import DataFileError, load_yaml_model
from pipeline.life_state import UNKNOWN_AGE_SPAN, initial_state
from schemas.catalog import Catalog, InventoryItem, Taxonomy
from schemas.persona import SeedAttributes
from schemas.situations import SituationCatalog

DATA_DIR = Path(__file__).parent / "data"
SITUATIONS_FILE = DATA_DIR / "situations.yaml"


@cache
def load_catalog(path: Path = DATA_DIR / "catalog.yaml") -> Catalog:
    catalog = load_yaml_model(path, Catalog)
    check_facets(catalog, path)
    return catalog


@cache
def load_taxonomy(path: Path = DATA_DIR / "taxonomy.yaml") -> Taxonomy:
    taxonomy = load_yaml_model(path, Taxonomy)
    if taxonomy.life_state:
        check_life_events(taxonomy, path, load_catalog())
        check_item_genders(taxonomy, load_catalog(), DATA_DIR / "catalog.yaml")
        check_item_needs(taxonomy, load_catalog(), DATA_DIR / "catalog.yaml")
    return taxonomy


WINTERS = ("cold", "cool", "warm")


def check_item_needs(taxonomy: Taxonomy, catalog: Catalog, path: Path) -> None:
    """An item's ``needs`` name life-state dimensions (or ``winter``) and values the taxonomy knows."""
    known = {**taxonomy.life_state, "winter": list(WINTERS)}
    for (topic, name), needs in catalog.item_needs().items():
        for dim, values in needs.items():
            if dim not in known:
                raise DataFileError(f"{_line(path, f'name: {name}')}: item {name!r} of {topic}: needs an unknown "
                                    f"life-state dimension {dim!r} (known: {', '.join(known)})")
            for value in values:
                if value not in known[dim]:
                    raise DataFileError(f"{_line(path, f'name: {name}')}: item {name!r} of {topic}: {dim} has no "
                                        f"value {value!r} (known: {', '.join(known[dim])})")


def check_item_genders(taxonomy: Taxonomy, catalog: Catalog, path: Path) -> None:
    """An item's ``gender`` names only gender identities the taxonomy samples."""
    known = {g.value for g in taxonomy.gender_identities}
    for (topic, name), genders in catalog.item_genders().items():
        unknown = sorted(genders - known)
        if unknown:
            raise DataFileError(f"{_line(path, f'name: {name}')}: item {name!r} of {topic}: unknown gender "
                                f"{unknown[0]!r} (known: {', '.join(sorted(known))})")


def _line(path: Path, needle: str) -> str:
    """``path:line`` of the first line holding ``needle`` (just ``path`` when none does)."""
    try:
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if needle in text:
                return f"{path}:{number}"
    except OSError:
        pass
    return str(path)


class _LineOf:
    """``path:line`` of the first line holding ``needle``, looked up only when a message is formatted with it (a
    taxonomy of 1,800 events read its file once per event at every load)."""

    def __init__(self, path: Path, needle: str):
        self.path, self.needle = path, needle

    def __format__(self, spec: str) -> str:
        return format(_line(self.path, self.needle), spec)

    def __str__(self) -> str:
        return format(self)


def check_facets(catalog: Catalog, path: Path) -> None:
    """Every item's facets come from its topic's closed vocabulary (when the catalog declares one)."""
    if not catalog.facets:
        return
    for topic, cat in catalog.topics.items():
        vocabulary = catalog.facets.get(topic)
        if vocabulary is None:
            raise DataFileError(f"{_line(path, f'  {topic}:')}: topic {topic} has no facet vocabulary")
        for item in cat.items:
            for facet in item.facets:
                if facet not in vocabulary:
                    raise DataFileError(f"{_line(path, f'name: {item.name}')}: item {item.name!r} of {topic}: "
                                        f"unknown facet {facet!r} (known: {', '.join(vocabulary)})")


def _initial_values(taxonomy: Taxonomy) -> dict[str, set[str]]:
    """Every value each life-state dimension can start with, over the sampler's attribute combinations."""

    out: dict[str, set[str]] = {dim: set() for dim in taxonomy.life_state}
    ages = sorted({a for band in taxonomy.age_bands for a in (band.min, band.max)})
    for stage, household, job, age in product(taxonomy.life_stages, taxonomy.households, taxonomy.occupations, ages):
        attrs = SeedAttributes(age=age, life_stage=stage.value, household=household.value, occupation=job.value,
                               occupation_group=job.group)
        for dim, value in initial_state(attrs).items():
            out.setdefault(dim, set()).add(value)
    if "gender" in out:  # set from the sampled gender identity alone, whatever the other attributes
        out["gender"] |= {g.value for g in taxonomy.gender_identities}
    return out


def check_life_events(taxonomy: Taxonomy, path: Path, catalog: Catalog) -> None:
    """Preconditions and effects use known names, and every event is one some persona could live."""
    dims = taxonomy.life_state
    reachable = _initial_values(taxonomy)
    for spec in (s for _, s in taxonomy.event_specs().values()):
        for dim, value in spec.sets.items():
            reachable.setdefault(dim, set()).add(value)
    lo_age = min(b.min for b in taxonomy.age_bands)
    hi_age = max(b.max for b in taxonomy.age_bands)
    facets = catalog.item_facets()
    carriers = {name: (topic, set(carried)) for (topic, name), carried in facets.items()}
    ages, genders = catalog.item_ages(), catalog.item_genders()
    for summary, (_, spec) in taxonomy.event_specs().items():
        where = _LineOf(path, f'"{summary}"')
        named = [(dim, v) for part in (spec.requires, spec.excludes) for dim, vs in part.items() for v in vs]
        named += list(spec.sets.items())
        for dim, value in named:
            if dim not in dims:
                raise DataFileError(f"{where}: event {summary!r}: unknown life-state dimension {dim!r}")
            if value not in dims[dim]:
                raise DataFileError(f"{where}: event {summary!r}: {dim} has no value {value!r} "
                                    f"(known: {', '.join(dims[dim])})")
        for text in spec.effects:
            parts = text.split()
            if len(parts) != 3 or parts[2] not in ("+", "-"):
                raise DataFileError(f"{where}: event {summary!r}: effect {text!r} is not '<topic> <facet> <+|->'")
            topic = taxonomy.topic_aliases.get(parts[0], parts[0])
            if topic not in catalog.topics:
                raise DataFileError(f"{where}: event {summary!r}: effect {text!r} names an unknown topic")
            if parts[1] not in catalog.facets.get(topic, {}):
                raise DataFileError(f"{where}: event {summary!r}: effect {text!r}: {topic} has no facet {parts[1]!r}")
        _check_items(spec, where, taxonomy, carriers)
        unknown = [name for name in spec.after if name not in taxonomy.event_specs()]
        if unknown:
            raise DataFileError(f"{where}: event {summary!r}: after names {unknown[0]!r}, which is no event's summary")
        lo, hi = spec.age
        why = None
        if lo > hi or hi < lo_age or lo > hi_age:
            why = f"ages {lo}-{hi} fit no sampled persona ({lo_age}-{hi_age})"
        for dim, values in spec.requires.items():
            possible = set(values) & reachable.get(dim, set()) - set(spec.excludes.get(dim, []))
            if not possible:
                why = f"no persona ever has {dim} {' or '.join(values)}"
        if why:
            raise DataFileError(f"{where}: event {summary!r} can never happen: {why}")
        for name in spec.items:
            span = ages.get((carriers[name][0], name))
            if span is not None and (span[1] < spec.age[0] or spec.age[1] < span[0]):
                raise DataFileError(f"{where}: event {summary!r} (ages {spec.age[0]}-{spec.age[1]}) names item "
                                    f"{name!r}, which fits ages {span[0]}-{span[1]} only: no one could live the change")
            held_by = genders.get((carriers[name][0], name))
            if held_by is not None and "gender" in spec.requires and not held_by & set(spec.requires["gender"]):
                raise DataFileError(f"{where}: event {summary!r} (gender {'/'.join(spec.requires['gender'])}) names "
                                    f"item {name!r}, held only by {'/'.join(sorted(held_by))}: no one could live the "
                                    "change")


def _check_items(spec, where: _LineOf, taxonomy: Taxonomy, carriers: dict[str, tuple[str, set[str]]]) -> None:
    """Each item an event names is a catalog item (``carriers``: name -> its topic and facets) of a topic its
    effects name, carries a facet they push there, and none they push the other way (so the direction of its
    change is never in doubt)."""
    effects = spec.parsed_effects(taxonomy.topic_aliases)
    seen: set[str] = set()
    for name in spec.items:
        if name in seen:
            raise DataFileError(f"{where}: event {spec.summary!r}: item {name!r} is named twice")
        seen.add(name)
        if name not in carriers:
            raise DataFileError(f"{where}: event {spec.summary!r}: item {name!r} is not in the catalog")
        topic, carried = carriers[name]
        ways = {e.direction for e in effects if e.topic == topic and e.facet in carried}
        if not ways:
            raise DataFileError(f"{where}: event {spec.summary!r}: item {name!r} ({topic}) carries no facet its "
                                f"effects push (it has: {', '.join(sorted(carried)) or 'none'})")
        if len(ways) > 1:
            raise DataFileError(f"{where}: event {spec.summary!r}: item {name!r} ({topic}) carries facets its "
                                "effects push both ways")


def turnable_items(taxonomy: Taxonomy | None = None, catalog: Catalog | None = None) -> set[tuple[str, str]]:
    """(topic, name) of every catalog item some life event names: the items a change can turn."""
    taxonomy, catalog = taxonomy or load_taxonomy(), catalog or load_catalog()
    topics = {i.name: t for t, cat in catalog.topics.items() for i in cat.items}
    return {(topics[name], name) for _, spec in taxonomy.event_specs().values() for name in spec.items}


def fits_age(span: tuple[int, int] | None, age: int | None) -> bool:
    """True when a person of ``age`` may hold an item declared for ``span``; a seed with no age must fit
    every age of ``UNKNOWN_AGE_SPAN``."""
    if span is None:
        return True
    lo, hi = (age, age) if age is not None else UNKNOWN_AGE_SPAN
    return span[0] <= lo and hi <= span[1]


def item_fit(catalog: Catalog, attributes: SeedAttributes) -> Callable[[str, str], bool]:
    """``(topic, name) -> bool``: whether a person with these seed attributes may hold the item: its age range
    (``fits_age``) and, where the catalog names genders (mammogram reminders), one of them."""
    ages, genders = catalog.item_ages(), catalog.item_genders()
    age, gender = attributes.age, attributes.gender_identity

    def fits(topic: str, name: str) -> bool:
        allowed = genders.get((topic, name))
        return fits_age(ages.get((topic, name)), age) and (allowed is None or gender in allowed)

    return fits


def holds_fit(catalog: Catalog, state: dict[str, str], winter: str) -> Callable[[str, str], bool]:
    """``(topic, name) -> bool``: whether a person in this life state, in a city with this winter, may hold the
    item as a taste from the start (its ``needs``: childproofed living rooms only with young children)."""
    needs = catalog.item_needs()

    def fits(topic: str, name: str) -> bool:
        return all((winter if dim == "winter" else state.get(dim)) in values
                   for dim, values in needs.get((topic, name), {}).items())

    return fits


def catalog_inventory(topics: list[str], catalog: Catalog | None = None) -> dict[str, list[InventoryItem]]:
    """The per-topic candidate items from the catalog; an unknown topic is an error naming it."""
    catalog = catalog or load_catalog()
    unknown = [t for t in topics if t not in catalog.topics]
    if unknown:
        known = ", ".join(sorted(catalog.topics))
        raise DataFileError(f"unknown topic(s) {', '.join(unknown)}; the catalog knows: {known}")
    return {t: [InventoryItem(name=i.name, tags=list(i.tags)) for i in catalog.topics[t].items] for t in topics}


@cache
def load_situations(path: Path = SITUATIONS_FILE) -> SituationCatalog:
    """The situation catalog: what a user's in-situ message comes from, per topic (``situations.yaml``)."""
    return load_yaml_model(path, SituationCatalog)
