"""Sessions and turns: the chat history a persona has with an assistant."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Role = Literal["user", "assistant"]
SessionKind = Literal["topic", "filler"]
Voicing = Literal["explicit", "implicit"]


class Turn(BaseModel):
    """One message; ``event_ids``/``pref_versions`` say exactly which facts it voices."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    turn_index: int = Field(ge=0)
    role: Role
    content: str = Field(min_length=1)
    event_ids: list[str] = Field(default_factory=list)
    pref_versions: list[str] = Field(default_factory=list, description="keys like pref_x@2")
    n_tokens: int = Field(default=0, ge=0)
    fallback: bool = Field(default=False, description="code-written turn after the model failed")
    voicing: Voicing | None = Field(
        default=None, description="a user turn that voices a preference: said outright (explicit), or shown through "
                                  "what the user asks for, without the item's name or a stance word (implicit)")


class Session(BaseModel):
    """One conversation on one topic in one period (or a persona-neutral filler session)."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    persona_id: str | None
    topic: str
    period: str | None
    time: datetime | None = Field(description="when it happened; None for filler, which takes the date of its slot")
    kind: SessionKind
    n_turns: int = Field(ge=0)
    n_tokens: int = Field(ge=0)
    provenance: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _dated(self) -> Session:
        if self.kind == "topic" and self.time is None:
            raise ValueError(f"session {self.session_id}: a topic session needs a time")
        return self


class SessionWithTurns(BaseModel):
    """A session together with its turns; roles strictly alternate, starting with the user."""

    model_config = ConfigDict(extra="forbid")

    session: Session
    turns: list[Turn]

    @model_validator(mode="after")
    def _alternate(self) -> SessionWithTurns:
        for i, turn in enumerate(self.turns):
            expected = "user" if i % 2 == 0 else "assistant"
            if turn.turn_index != i or turn.role != expected or turn.session_id != self.session.session_id:
                raise ValueError(
                    f"session {self.session.session_id} turn {i}: expected {expected} turn index {i}, "
                    f"got {turn.role} index {turn.turn_index}"
                )
        return self
