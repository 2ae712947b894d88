"""Long histories (as ordered session references) and where each query is asked in them."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Ordering = Literal["focal_gap", "end_gap"]
ProfileMode = Literal["once", "per_session"]
ChatRole = Literal["system", "user", "assistant"]


MAX_BUDGET = 10_000_000
# The fewest tokens a context may end below its budget (budget x tolerance): fewer, and no choice of whole
# filler sessions lands in the window (1,000 tokens at 0.02 failed after every call; at 0.03 it assembles).
MIN_END_WINDOW = 30


class AssemblySettings(BaseModel):
    """How contexts are built: token budgets, ordering modes, filler placement, profile messages."""

    model_config = ConfigDict(extra="forbid")

    budgets: list[int] = Field(
        default_factory=lambda: [32_000, 128_000], min_length=1, description="token budgets; 1_000_000 is available"
    )
    orderings: list[Ordering] = Field(
        default_factory=lambda: ["focal_gap", "end_gap"], min_length=1, description="modes the seed chooses among"
    )
    profile: ProfileMode = Field(default="once", description="profile system message once, or before each persona session")
    session_dates: bool = Field(default=True, description="each session opens with a system message carrying its date")
    tolerance: float = Field(default=0.02, gt=0, lt=0.5, description="a context ends within this fraction below its budget")
    gap_fraction: float = Field(default=0.5, ge=0, le=1, description="share of the filler that forms the long gap")
    max_persona_fraction: float = Field(
        default=1.0, gt=0, le=1, description="most of a budget the persona's own sessions may take; filler fills the rest"
    )

    @model_validator(mode="after")
    def _budgets(self) -> AssemblySettings:
        if any(b < 1000 for b in self.budgets) or len(set(self.budgets)) != len(self.budgets):
            raise ValueError("assembly.budgets: each budget must be distinct and at least 1000 tokens")
        if max(self.budgets) > MAX_BUDGET:  # filler is generated until the largest budget is full
            raise ValueError(f"assembly.budgets: {max(self.budgets):,} tokens is more than {MAX_BUDGET:,}")
        narrow = min(self.budgets)
        if narrow * self.tolerance < MIN_END_WINDOW:  # filler comes in whole sessions of ~100 tokens
            raise ValueError(
                f"assembly.budgets: a {narrow:,}-token context must end within {narrow * self.tolerance:.0f} tokens "
                f"below its budget (tolerance {self.tolerance}), too narrow for whole filler sessions; use budgets of "
                f"at least {math.ceil(MIN_END_WINDOW / self.tolerance):,} tokens or a tolerance of at least "
                f"{MIN_END_WINDOW / narrow:.3g}")
        return self


class ChatMessage(BaseModel):
    """One message as a model receives it (OpenAI chat format)."""

    model_config = ConfigDict(extra="forbid")

    role: ChatRole
    content: str


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
    profile_mode: ProfileMode = Field(default="once", description="where the profile system message appears")
    focal_topic: str | None = Field(default=None, description="the topic whose gap the ordering mode places")
    session_dates: bool = Field(default=False, description="each session opens with a system message of its date")


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
    voicing: Literal["explicit", "implicit"] | None = Field(default=None, description="the query's voicing")
