"""Models of the built-in data files: the item catalog and the persona / life-event taxonomy."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

TAG_PATTERN = r"^(age_band|gender|life_stage):[A-Za-z0-9_+\-]+$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InventoryItem(Strict):
    """A concrete thing a persona can like or dislike in one topic, with stereotype tags and facets
    (catalog items only: a model-written item has none, so no life event changes it)."""

    name: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    facets: list[str] = Field(default_factory=list)
    origin: Literal["catalog", "model"] = Field(default="catalog", description="hand-written, or proposed by the model")


class CatalogItem(InventoryItem):
    age: tuple[int, int] | None = Field(
        default=None, description="the ages at which holding this item is unremarkable (min, max); none: any adult")

    gender: list[str] | None = Field(
        default=None, description="the gender identities that may hold this item (mammogram reminders); none: any")

    needs: dict[str, list[str]] = Field(
        default_factory=dict, description="a life-state dimension (or `winter`, the home city's) -> the values a "
                                          "person must have to hold this item as a taste (children: [young]); none: any")

    @field_validator("age")
    @classmethod
    def _age_range(cls, age: tuple[int, int] | None) -> tuple[int, int] | None:
        if age is not None and not 0 <= age[0] <= age[1]:
            raise ValueError(f"age {list(age)} is not [min, max] with 0 <= min <= max")
        return age

    @field_validator("tags")
    @classmethod
    def _closed_vocabulary(cls, tags: list[str]) -> list[str]:
        for tag in tags:
            if not re.match(TAG_PATTERN, tag):
                raise ValueError(f"tag {tag!r} is not age_band:*, gender:* or life_stage:*")
        return tags


class TopicCatalog(Strict):
    description: str
    items: list[CatalogItem] = Field(min_length=1)


class Catalog(Strict):
    version: int
    facets: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="topic -> facet -> its plain words (the closed facet vocabulary)")
    topics: dict[str, TopicCatalog]

    @model_validator(mode="after")
    def _unique_items(self) -> Catalog:
        seen: dict[str, str] = {}
        for topic, cat in self.topics.items():
            for item in cat.items:
                key = item.name.casefold()
                if key in seen:
                    raise ValueError(f"catalog item {item.name!r} appears in {seen[key]} and {topic}")
                seen[key] = topic
        return self

    def item_ages(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(topic, item name) -> the ages the item fits, for the items that declare them."""
        return {(t, i.name): i.age for t, cat in self.topics.items() for i in cat.items if i.age is not None}

    def item_genders(self) -> dict[tuple[str, str], set[str]]:
        """(topic, item name) -> the gender identities that may hold it, for the items that name them."""
        return {(t, i.name): set(i.gender) for t, cat in self.topics.items() for i in cat.items if i.gender}

    def item_needs(self) -> dict[tuple[str, str], dict[str, list[str]]]:
        """(topic, item name) -> what a holder's life state (or city's winter) must be, for the items that say."""
        return {(t, i.name): dict(i.needs) for t, cat in self.topics.items() for i in cat.items if i.needs}

    def item_facets(self) -> dict[tuple[str, str], list[str]]:
        """(topic, item name) -> the item's facets."""
        return {(t, i.name): list(i.facets) for t, cat in self.topics.items() for i in cat.items}


class Weighted(Strict):
    value: str
    weight: float = Field(default=1.0, gt=0)


class Region(Weighted):
    """A city the sampler places personas in, with what its seasons are like."""

    winter: Literal["cold", "cool", "warm"] = Field(description="cold: snow and ice ordinary; cool: a chilly, dark "
                                                    "winter with little snow; warm: no winter to speak of")
    hemisphere: Literal["N", "S"] = "N"


class AgeBand(Strict):
    band: str
    min: int = Field(ge=0)
    max: int = Field(ge=0)
    weight: float = Field(gt=0)


class Occupation(Weighted):
    group: str
    min_age: int
    max_age: int


class LifeStage(Weighted):
    min_age: int
    max_age: int
    occupation_groups: list[str] = Field(default_factory=list, description="allowed groups; empty: any")
    excluded_groups: list[str] = Field(default_factory=list)
    households: list[str] = Field(default_factory=list, description="allowed households; empty: any")


class Household(Weighted):
    min_age: int = 18
    max_age: int = 120


class FirstName(Strict):
    value: str
    gender: Literal["woman", "man", "any"]


Direction = Literal["+", "-"]


class Effect(Strict):
    """A life event pushes one facet of one topic toward like (+) or dislike (-)."""

    topic: str
    facet: str
    direction: Direction


class LifeEventSpec(Strict):
    """One event summary with its preconditions on the life state and its effects on state and items."""

    summary: str = Field(min_length=1)
    gist: str | None = Field(default=None, description="words a reason must name; default: the summary's own")
    age: tuple[int, int] = (18, 90)
    requires: dict[str, list[str]] = Field(default_factory=dict, description="dimension -> any of these values")
    excludes: dict[str, list[str]] = Field(default_factory=dict, description="dimension -> none of these values")
    sets: dict[str, str] = Field(default_factory=dict, description="dimension -> its value after the event")
    effects: list[str] = Field(default_factory=list, description='"<topic alias> <facet> <+|->" each')
    weight: float = Field(default=1.0, gt=0, description="relative chance of being drawn among the eligible")
    after: list[str] = Field(
        default_factory=list, description="summaries of which one must have been lived before (a second opinion on a "
                                          "diagnosis after the diagnosis); none: no earlier event needed")
    scale: Literal["major", "minor"] | None = Field(
        default=None, description="major: a change of life (a move, a birth, a death, a new job, a diagnosis, a break-up); "
                                  "minor: an experience (a meal, a weekend, a class); None: decided from the summary")
    items: list[str] = Field(
        default_factory=list,
        description="the catalog items the event may turn, each carrying a facet its effects push; none: it changes "
                    "no preference (a background event)")

    def parsed_effects(self, aliases: dict[str, str]) -> list[Effect]:
        out = []
        for text in self.effects:
            topic, facet, direction = text.split()
            out.append(Effect(topic=aliases.get(topic, topic), facet=facet, direction=direction))
        return out

    def item_effects(self, aliases: dict[str, str], facets: dict[tuple[str, str], list[str]]) -> dict[tuple[str, str], Effect]:
        """(topic, item) -> the effect that turns each named item: the first of the event's effects on its topic
        whose facet it carries (the loader has checked that there is one, and none pushing the other way)."""
        effects = self.parsed_effects(aliases)
        out: dict[tuple[str, str], Effect] = {}
        for name in self.items:
            for (topic, item), carried in facets.items():
                if item == name:
                    hit = next((e for e in effects if e.topic == topic and e.facet in carried), None)
                    if hit is not None:
                        out[(topic, item)] = hit
        return out


class EventCategory(Strict):
    events: list[LifeEventSpec] = Field(min_length=1)

    @property
    def summaries(self) -> list[str]:
        return [e.summary for e in self.events]


class Taxonomy(Strict):
    """Attribute distributions of the built-in seed sampler, and the life-event categories."""

    version: int
    age_bands: list[AgeBand] = Field(min_length=1)
    gender_identities: list[Weighted] = Field(min_length=1)
    regions: list[Region] = Field(min_length=1)
    occupations: list[Occupation] = Field(min_length=1)
    life_stages: list[LifeStage] = Field(min_length=1)
    households: list[Household] = Field(min_length=1)
    values: list[Weighted] = Field(min_length=1)
    hobbies: list[Weighted] = Field(min_length=1)
    first_names: list[FirstName] = Field(min_length=1)
    last_names: list[str] = Field(min_length=1)
    life_state: dict[str, list[str]] = Field(
        default_factory=dict, description="life-state dimension -> its closed set of values")
    topic_aliases: dict[str, str] = Field(default_factory=dict, description="short name -> catalog topic")
    life_event_categories: dict[str, EventCategory] = Field(min_length=1)
    follow_ups: dict[str, list[str]] = Field(default_factory=dict, description="parent category -> child categories")
    routine_summaries: dict[Literal["like", "dislike"], list[str]] = Field(
        description="stance -> routine summaries with an {item} placeholder: what one does with a liked thing, "
                    "what one does about a disliked one")

    @model_validator(mode="after")
    def _known_follow_ups(self) -> Taxonomy:
        for parent, children in self.follow_ups.items():
            for name in [parent, *children]:
                if name not in self.life_event_categories:
                    raise ValueError(f"follow_ups.{parent}: unknown life-event category {name!r}")
        return self

    def event_specs(self) -> dict[str, tuple[str, LifeEventSpec]]:
        """summary -> (category, spec) over every category."""
        return {e.summary: (name, e) for name, cat in self.life_event_categories.items() for e in cat.events}


class ItemCues(Strict):
    """Hand-written cue situations of one item: what someone who likes it, or avoids it, would ask for in their
    own words (a noun phrase that completes "Can you help me find ..."), never its name nor a stance word."""

    like: list[str] = Field(min_length=1)
    dislike: list[str] = Field(min_length=1)
