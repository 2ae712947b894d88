"""Helpers for gateway tests: a fake-backed LLM on a temporary cache, and tiny prompt specs."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from pipeline.llm import LLM
from pipeline.llm.fake import FakeBackend, FaultPlan
from pipeline.prompting import PromptEnv, PromptSpec
from schemas.llm import LLMSettings

TEMPLATE = """{% block system %}
You help {{ name }}.
{% endblock %}
{% block user %}
Tell me about {{ topic }}.
{% endblock %}
"""


class TopicContext(BaseModel):
    """Context of the test template."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"name": "Ada", "topic": "tea"}]})

    name: str
    topic: str


class TopicNote(BaseModel):
    """Output of the test template."""

    title: str
    score: int


def write_prompts(root: Path, template: str = TEMPLATE) -> PromptEnv:
    """A prompts folder holding `test/topic.jinja`."""
    (root / "test").mkdir(parents=True, exist_ok=True)
    (root / "test" / "topic.jinja").write_text(template)
    return PromptEnv(root)


SPEC = PromptSpec(name="test.topic", template="test/topic.jinja", context=TopicContext, output=TopicNote)


def settings(tmp_path: Path, **overrides) -> LLMSettings:
    """Settings with fast retries and a cache under tmp_path."""
    values = {"llm": "fake", "cache_path": tmp_path / "llm.sqlite", "backoff_s": 0.001, "timeout_s": 2.0}
    return LLMSettings(**(values | overrides))


def fake_llm(tmp_path: Path, plan: str = "", **overrides) -> tuple[LLM, FakeBackend]:
    """A gateway over a fresh fake backend (faults from `plan`), templates and cache under tmp_path."""
    backend = FakeBackend(FaultPlan.parse(plan))
    env = write_prompts(tmp_path / "prompts")
    return LLM(settings(tmp_path, **overrides), backend=backend, prompts=env), backend
