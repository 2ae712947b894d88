"""The fake backend: schema-aware instances, the fake_output hook, fault plans."""

from __future__ import annotations

import datetime as dt
import json
import random
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from pipeline.llm.errors import ConfigError
from pipeline.llm.fake import FaultPlan, SchemaFaker, fake_json
from schemas.llm import PingContext, PingReply


class Option(BaseModel):
    text: str = Field(min_length=5, max_length=40)
    role: Literal["correct", "generic", "outdated_preference"]


class Question(BaseModel):
    question: str = Field(min_length=10, max_length=200)
    options: list[Option] = Field(min_length=4, max_length=4)
    tags: list[str] = Field(default_factory=list, max_length=2)
    unique_words: set[Literal["a", "b", "c", "d"]] = Field(min_length=2)
    difficulty: int = Field(ge=1, le=5)
    weight: float = Field(gt=0, lt=1)
    hint: str | None = None
    when: dt.date
    at: dt.datetime
    extra: dict[str, int] = Field(default_factory=dict)
    pair: tuple[int, str]
    short: str = Field(max_length=3)
    nothing: str = Field(max_length=0)
    flag: bool


@pytest.mark.parametrize("seed", range(25))
def test_generic_builder_makes_valid_instances(seed):
    schema = Question.model_json_schema()
    text = json.dumps(SchemaFaker(schema, random.Random(seed)).build(schema))
    question = Question.model_validate_json(text)
    assert len(question.options) == 4


def test_generic_builder_is_deterministic_per_seed():
    context = PingContext(persona="p", topic="t")
    assert fake_json(Question, context, random.Random(1)) == fake_json(Question, context, random.Random(1))
    assert fake_json(Question, context, random.Random(1)) != fake_json(Question, context, random.Random(2))


def test_strings_are_plausible_words():
    schema = Option.model_json_schema()
    text = Option.model_validate_json(json.dumps(SchemaFaker(schema, random.Random(0)).build(schema))).text
    assert text[0].isupper() and " " in text and text.replace(" ", "").isalpha()


def test_fake_output_hook_replaces_the_generic_builder():
    text = fake_json(PingReply, PingContext(persona="p", topic="jazz"), random.Random(0))
    assert PingReply.model_validate_json(text).item.startswith("a jazz pick")


def test_fake_output_hook_must_return_the_model():
    class Bad(BaseModel):
        x: int

        @classmethod
        def fake_output(cls, context, rng):
            return PingReply(item="no")

    with pytest.raises(TypeError, match="Bad.fake_output"):
        fake_json(Bad, PingContext(persona="p", topic="t"), random.Random(0))


def test_fault_plan_parses_probabilities_and_call_indices():
    plan = FaultPlan.parse("malformed_json=0.25&rate_limit=@0,3&latency_s=0.01")
    assert plan.latency_s == 0.01
    assert [(f.kind, f.probability, f.calls) for f in plan.faults] == [
        ("malformed_json", 0.25, []), ("rate_limit", 0.0, [0, 3])]
    rng = random.Random(0)
    assert plan.pick(3, rng).kind == "rate_limit"


def test_fault_plan_probability_is_roughly_respected():
    plan = FaultPlan.parse("timeout=0.3")
    rng = random.Random(0)
    hits = sum(plan.pick(i, rng) is not None for i in range(1000))
    assert 250 < hits < 350


def test_fault_plan_rejects_unknown_options():
    with pytest.raises(ConfigError, match="unknown fake backend option 'explode'"):
        FaultPlan.parse("explode=1")
