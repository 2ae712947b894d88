"""Long histories (as ordered session references) and where each query is asked in them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Ordering = Literal["focal_gap", "end_gap"]


class Context(BaseModel):
    """A persona's history at one token budget; stores session ids, never copies of text."""

    model_config = ConfigDict(extra="forbid")

    context_id: str
    persona_id: str
    budget_tokens: int = Field(gt=0)
    ordering: Ordering
    session_ids: list[str]
    n_tokens: int = Field(ge=0)
    filler_tokens: int = Field(ge=0)


class Placement(BaseModel):
    """Where one query is asked inside one context, and how far its evidence lies."""

    model_config = ConfigDict(extra="forbid")

    context_id: str
    query_id: str
    end_index: int = Field(ge=0, description="message index at which the query is asked")
    context_tokens: int = Field(ge=0)
    distance_tokens: int = Field(ge=0)
    distance_sessions: int = Field(ge=0)
    evidence_position: float = Field(ge=0.0, le=1.0)
