"""The backend selector: which backend a backend string names, built or only named.

Implementations (fake, local, openai) import the types in backends.py and never this module, so the
selector imports them without a cycle.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.llm.backends import Backend
from pipeline.llm.errors import ConfigError
from schemas.llm import LLMSettings

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"


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


def backend_name(spec: str, settings: LLMSettings) -> str:
    """``provider:model`` of the backend a string names, without building it (no client, no model load)."""
    kind, _, rest = spec.partition(":")
    if spec == "fake" or spec.startswith("fake?"):
        from pipeline.llm.fake import FaultPlan, fake_model_name

        return f"fake:{fake_model_name(FaultPlan.parse(spec.partition('?')[2]))}"
    if kind == "openai" and rest:
        return f"openai:{rest}"
    if kind == "local":
        from pipeline.llm.local import default_model_path

        return f"local:{(Path(rest).expanduser() if rest else default_model_path()).name}"
    return f"{make_backend(spec, settings).provider}:{spec}"  # raises the unknown-backend ConfigError
