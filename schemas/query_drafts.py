"""Template inputs and raw model outputs of generate_queries: one call words a whole query.

The model sees what the user asks and what each reply must say, in the final option order, but never
which reply is correct: code owns that, so the wording cannot favour the right answer.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, create_model

from schemas.persona import Style


class QueryContext(BaseModel):
    """One query to word: what the user asks (no answer in it) and what each reply must say, in order."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "name": "Amara Okafor", "profile": "Amara is a 34-year-old nurse in Lagos who loves pottery.",
        "style": {"verbosity": "moderate", "formality": "casual", "typo_rate": 0.0, "emoji_use": "never",
                  "directness": "explicit"},
        "topic": "food", "ask": "I am hosting friends for dinner on Saturday. What would you recommend?",
        "replies": ["I would go for slow-cooked ramen again, as you enjoy it, rather than tapas.",
                    "I would go for tapas rather than slow-cooked ramen, as you avoid it.",
                    "I would go for spicy Sichuan hotpot again, as you enjoy it, rather than sushi.",
                    "I would go for sushi rather than spicy Sichuan hotpot, as you avoid it."],
        "words": 18,
    }]})

    name: str
    profile: str
    style: Style
    topic: str
    ask: str
    replies: list[str]
    words: int


def _fake_query(cls, context: QueryContext, rng: random.Random) -> BaseModel:
    """Fake-backend hook: the message and the replies as code wrote them."""
    return cls(question=context.ask, options=list(context.replies))


@cache
def query_draft(n_options: int) -> type[BaseModel]:
    """A question plus exactly ``n_options`` replies (the grammar enforces the count)."""
    model = create_model(
        f"QueryDraft{n_options}",
        question=(str, Field(min_length=10, max_length=400,
                             description="The user's message in first person, in their own style; it names no answer.")),
        options=(list[Annotated[str, Field(min_length=8, max_length=400)]],
                 Field(min_length=n_options, max_length=n_options,
                       description="One assistant reply per requested reply, same order, same facts, similar length.")),
    )
    model.fake_output = classmethod(_fake_query)
    return model


class JudgeContext(BaseModel):
    """A question and its options with no history: what a no-context guesser sees."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "question": "Could you recommend something for my meals this week?",
        "options": ["Try a new ramen place.", "Try a fresh salad bar.", "Try a hotpot night.", "Try a brunch cafe."],
    }]})

    question: str
    options: list[str]


def _fake_judge(cls, context: JudgeContext, rng: random.Random) -> BaseModel:
    return cls(answer=rng.randint(1, len(context.options)))


@cache
def judge_draft(n_options: int) -> type[BaseModel]:
    """The number (1-based) of the option the judge picks."""
    model = create_model(
        f"JudgeDraft{n_options}",
        answer=(int, Field(ge=1, le=n_options, description="Number of the most likely reply.")),
    )
    model.fake_output = classmethod(_fake_judge)
    return model
