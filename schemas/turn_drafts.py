"""Template inputs and raw outputs of the small model's writing mode (``text.writing: turn``): one short
call per turn, a user message that opens with code's words for its fact, then the reply to it alone."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, create_model

from schemas.drafts import _assistant_field, _examples
from schemas.fake_text import gist_words, helpful_reply


class UserTurnContext(BaseModel):
    """Who speaks and the opening code wrote for the one fact to voice: a prompt a 135M model can follow."""

    model_config = _examples({"name": "Amara Okafor", "age": 34, "occupation": "nurse",
                              "opening": "Since I was diagnosed with high blood pressure, I have come to avoid "
                                         "spicy Sichuan hotpot"})

    name: str
    age: int | None
    occupation: str | None
    opening: str


class UserTurnDraft(BaseModel):
    """One user message in plain words."""

    text: str = Field(min_length=10, max_length=300, description="The message, one or two sentences.")


GO_ON = (". It has been on my mind lately.", ", and I wanted you to know.", ". Just so you have it in mind.",
         ", which surprised me a little.")


def _regex_literal(text: str) -> str:
    """``text`` as a regular expression that matches it literally (spaces left alone: a grammar reads them)."""
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", text)


def user_turn_draft(opening: str) -> type[UserTurnDraft]:
    """A user message that starts with ``opening`` (code's words, so the fact is voiced as planned) and goes
    on in the model's own words; the embedded model's grammar holds it to that start."""
    pattern = "^" + _regex_literal(opening) + '[^"\\\\{}<>|\\[\\]]{8,240}$'  # no quote, backslash or markup
    model = create_model("UserTurnDraft", __base__=UserTurnDraft, text=(str, Field(
        min_length=len(opening) + 8, max_length=len(opening) + 240, pattern=pattern,
        description="The message: the opening, then a sentence or two of your own.")))
    model.fake_output = classmethod(lambda cls, context, rng: cls(text=opening + rng.choice(GO_ON)))
    return model


class AssistantTurnContext(BaseModel):
    """The user's message the assistant answers, and how long the answer is."""

    model_config = _examples({"message": "These days I avoid spicy Sichuan hotpot.", "topic": "food",
                              "words_min": 20, "words_max": 80})

    message: str
    topic: str
    words_min: int
    words_max: int


def assistant_turn_draft(words_min: int, words_max: int) -> type[BaseModel]:
    """The assistant's reply of ``words_min``-``words_max`` words."""
    model = create_model(f"AssistantTurnDraft{words_min}to{words_max}", text=_assistant_field(words_min, words_max))
    def fake_output(cls, context, rng):
        noted = _noted(context.message)  # never cut short of the words that pick up the message
        return cls(text=helpful_reply(noted, (max(words_min, min(len(noted.split()), words_max)), words_max), rng))

    model.fake_output = classmethod(fake_output)
    return model


def _noted(message: str) -> str:
    """Fake text: a reply's opening that picks up the message (a request: its three longest words)."""
    if message.rstrip().endswith("?"):
        return f"Glad to help; start from the {' and the '.join(gist_words(message, 3)).lower()}."
    return f"Thanks for telling me, I have noted the {' and the '.join(gist_words(message, 2)).lower()}."
