"""The reveal check of an implicit turn: which of four preference statements does a message show? The model
reads the message alone; code knows the answer (the beat's statement) and keeps the turn only when it comes back."""

from __future__ import annotations

import random
import re

from pydantic import BaseModel, ConfigDict, Field

from schemas.drafts import _examples


class RevealContext(BaseModel):
    """A user's message and four numbered statements about the user, one of which the message was written to show."""

    model_config = _examples({
        "message": "Can you help me find a spot that does a proper numbing-hot broth this weekend?",
        "statements": ["I enjoy spicy Sichuan hotpot.", "I avoid spicy Sichuan hotpot.", "I enjoy sushi omakase.",
                       "I enjoy slow-cooked ramen."],
    })

    message: str
    statements: list[str] = Field(min_length=2, max_length=6)
    cues: list[list[str]] = Field(
        default_factory=list, description="per statement, the catalog's cue situations of it: what the fake backend, "
                                          "standing in for a model that knows what a request implies, reads; the "
                                          "template never shows them", json_schema_extra={"unrendered": True})


class RevealVerdict(BaseModel):
    """The number of the statement the message shows best."""

    model_config = ConfigDict(extra="forbid")

    answer: int = Field(ge=1, le=6, description="1-based number of the statement the message reveals")

    @classmethod
    def fake_output(cls, context: RevealContext, rng: random.Random) -> RevealVerdict:
        """Fake text: the statement one of whose cues shares the most words of 4+ letters with the message (its
        own words when it has no cues; a tie drawn)."""
        said = _stems(context.message)
        cues = context.cues or [[] for _ in context.statements]
        overlap = [max([len(said & _stems(c)) for c in own] or [len(said & _stems(s))])
                   for s, own in zip(context.statements, cues, strict=True)]
        best = [i for i, n in enumerate(overlap) if n == max(overlap)]
        return cls(answer=rng.choice(best) + 1)


def _stems(text: str) -> set[str]:
    return {w[:5] for w in re.findall(r"[a-z]{4,}", text.lower())}
