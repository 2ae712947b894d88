"""The backend seam of the gateway: request/reply types and the backend protocol (the selector is factory.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel


@dataclass(frozen=True)
class BackendRequest:
    """One attempt sent to a backend. `key` is the cache key (seeds the fake backend)."""

    messages: list[dict[str, str]]
    output: type[BaseModel]
    schema: dict
    context: BaseModel
    temperature: float
    top_p: float
    max_tokens: int
    seed: int
    timeout_s: float
    key: str
    attempt: int = 0
    free_text: bool = False  # LLM.chat: no output schema or grammar; `output`/`schema` are unused


class BackendReply(BaseModel):
    """The raw text a backend returned, why it stopped, and its token usage."""

    text: str
    finish_reason: str = "stop"
    input_tokens: int = 0
    output_tokens: int = 0


class Backend(Protocol):
    """What the gateway needs from a model backend.

    Optional attribute `reask_with_reply` (default True): False makes a re-ask resend the original
    request with the reason and a new seed, instead of showing the model its rejected reply.
    """

    provider: str
    model: str

    def preflight(self) -> None:
        """Raise ConfigError (one line) when the backend cannot work; no model call."""

    async def complete(self, request: BackendRequest) -> BackendReply:
        """Send one attempt; raise TransientError/RateLimited on transport failures."""
