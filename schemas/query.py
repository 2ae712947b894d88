"""In-situ user queries with grounded multiple-choice options."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

QueryType = Literal[
    "recall_user_shared_facts",
    "suggest_new_ideas",
    "acknowledge_latest_preferences",
    "track_full_preference_evolution",
    "revisit_reasons_behind_preference_updates",
    "provide_preference_aligned_recommendations",
    "generalize_to_new_scenarios",
]
QUERY_TYPES: tuple[str, ...] = QueryType.__args__  # type: ignore[attr-defined]

OptionRole = Literal[
    "correct",
    "outdated_preference",
    "other_persona",
    "violates_preference",
    "stereotypical",
    "generic",
    "forgetful",
    "wrong_reason",
    "wrong_sequence",
    "already_done",
]
ABSENT = "absent:"  # grounding prefix of an abstention's correct option: what was never voiced


class Option(BaseModel):
    """One answer option; ``grounding`` names what it is built from (pref version, event or persona id)."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1)
    role: OptionRole
    grounding: list[str] = Field(default_factory=list)


class Evidence(BaseModel):
    """A turn whose annotations hold the query's grounding."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: str
    turn_index: int = Field(ge=0)


class Query(BaseModel):
    """A question asked at ``as_of``; the correct option is decided in code."""

    model_config = ConfigDict(extra="forbid")

    query_id: str
    persona_id: str
    type: QueryType
    topic: str
    as_of: datetime
    anchor_session_id: str | None = Field(default=None, description="None = end of history")
    anchor_turn_index: int | None = None
    question: str = Field(min_length=1)
    options: list[Option]
    correct_index: int = Field(ge=0)
    evidence: list[Evidence] = Field(default_factory=list)
    n_pref_updates: int = Field(default=0, ge=0)
    provenance: dict[str, str] = Field(default_factory=dict)
    voicing: Literal["explicit", "implicit"] | None = Field(
        default=None, description="how its evidence voiced the preference it rests on: implicit when any evidence "
                                  "turn shows it without naming it; None when no evidence turn voices a preference")

    def abstains(self) -> bool:
        """True when the correct reply is "you have not told me" (grounded in an absence, ``absent:...``)."""
        return any(g.startswith(ABSENT) for g in self.options[self.correct_index].grounding)

    @model_validator(mode="after")
    def _one_correct(self) -> Query:
        roles = [o.role for o in self.options]
        if roles.count("correct") != 1 or not 0 <= self.correct_index < len(self.options):
            raise ValueError(f"query {self.query_id}: needs exactly one correct option at correct_index")
        if self.options[self.correct_index].role != "correct":
            raise ValueError(f"query {self.query_id}: correct_index does not point at the correct option")
        if (self.anchor_session_id is None) != (self.anchor_turn_index is None):
            raise ValueError(f"query {self.query_id}: anchor needs both session and turn, or neither")
        return self
