"""Seed personas and the persona records the dataset stores."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SeedSource = Literal["builtin", "personahub"]
Verbosity = Literal["terse", "moderate", "verbose"]
Formality = Literal["casual", "neutral", "formal"]
EmojiUse = Literal["never", "sometimes", "often"]
Directness = Literal["explicit", "implicit"]


class SeedAttributes(BaseModel):
    """Structured demographics from the built-in sampler; every field is None for free-text seeds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    age: int | None = None
    age_band: str | None = None
    gender_identity: str | None = None
    location: str | None = None
    occupation: str | None = None
    occupation_group: str | None = None
    life_stage: str | None = None
    household: str | None = None
    values: list[str] = Field(default_factory=list)
    hobbies: list[str] = Field(default_factory=list)

    def stereotype_tags(self) -> set[str]:
        """The catalog tags this persona's demographics match (e.g. ``age_band:25-34``)."""
        tags = set()
        if self.age_band:
            tags.add(f"age_band:{self.age_band}")
        if self.gender_identity:
            tags.add(f"gender:{self.gender_identity}")
        if self.life_stage:
            tags.add(f"life_stage:{self.life_stage}")
        return tags


def stereotype_match(persona_tags: set[str], item_tags: list[str]) -> bool:
    """Whether a catalog item's stereotype fits a persona: it has tags, and for every kind of tag it names (gender,
    age band, life stage) the persona has one of them (man caves: a man of 45-54, not any 45-54-year-old)."""
    kinds: dict[str, set[str]] = {}
    for tag in item_tags:
        kinds.setdefault(tag.split(":", 1)[0], set()).add(tag)
    return bool(kinds) and all(persona_tags & tags for tags in kinds.values())


class PersonaSeed(BaseModel):
    """A sampled seed: a short description plus whatever structure its source provides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0, description="position in the run; persona i is the same for any N")
    source: SeedSource
    text: str = Field(min_length=1)
    attributes: SeedAttributes = Field(default_factory=SeedAttributes)
    origin: str | None = Field(default=None, description="file:line of a loaded seed")


class Style(BaseModel):
    """How a persona writes; sampled in code and passed to every user-turn prompt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    verbosity: Verbosity = "moderate"
    formality: Formality = "neutral"
    typo_rate: float = Field(default=0.0, ge=0.0, le=0.2)
    emoji_use: EmojiUse = "never"
    directness: Directness = "explicit"


class Persona(BaseModel):
    """One synthetic user, as stored in ``personas.parquet``."""

    model_config = ConfigDict(extra="forbid")

    persona_id: str
    seed_source: SeedSource
    seed_text: str
    name: str
    age: int | None = None
    gender_identity: str | None = None
    location: str | None = None
    occupation: str | None = None
    profile: str
    style: Style
    attributes: SeedAttributes
    split: str = "test"
    provenance: dict[str, str] = Field(default_factory=dict)
