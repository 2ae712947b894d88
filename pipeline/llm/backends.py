"""The backend seam of the gateway: request/reply types, the backend protocol, and the selector."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel

from pipeline.llm.errors import ConfigError
from schemas.llm import LLMSettings

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"


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


def resolve_backend_string(settings: LLMSettings) -> str:
    """settings.llm, else the LLM environment variable, else openai with a key, else local."""
    if settings.llm:
        return settings.llm
    if os.environ.get("LLM"):
        return os.environ["LLM"]
    if os.environ.get("OPENAI_API_KEY"):
        return f"openai:{DEFAULT_OPENAI_MODEL}"
    return "local"


def make_backend(spec: str, settings: LLMSettings) -> Backend:
    """Build the backend a backend string names; unknown strings raise ConfigError."""
    kind, _, rest = spec.partition(":")
    if spec == "fake" or spec.startswith("fake?"):
        from pipeline.llm.fake import FakeBackend, FaultPlan

        return FakeBackend(FaultPlan.parse(spec.partition("?")[2]))
    if kind == "openai" and rest:
        from pipeline.llm.openai import OpenAIBackend

        return OpenAIBackend(rest, settings)
    if kind == "local":
        from pipeline.llm.local import LocalBackend

        return LocalBackend(rest or None, settings)
    raise ConfigError(f"unknown LLM backend {spec!r}; use 'openai:<model>', 'local', 'local:<path.gguf>' or 'fake'")
