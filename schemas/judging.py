"""The open-answer judge of `personagen eval --answer open`: what it reads and what it decides."""

from __future__ import annotations

import random
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Verdict = Literal["correct", "outdated", "incorrect"]
_WORDS = re.compile(r"[^\w\s]")


class JudgeAnswerContext(BaseModel):
    """A question, the key's correct reply, its outdated replies, and the answer to grade (no history)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "question": "Could you suggest a film for tonight?",
        "correct": "Since you have come to love slow documentaries, try a nature documentary tonight.",
        "outdated": ["Since you love fast action films, try the new car-chase thriller tonight."],
        "answer": "How about a calm nature documentary? You said you enjoy those now.",
    }]})

    question: str
    correct: str = Field(description="the reply the key marks correct at the moment of the question")
    outdated: list[str] = Field(default_factory=list, description="replies right only under a past preference")
    answer: str = Field(description="the reply to grade")


def _normal(text: str) -> str:
    return " ".join(_WORDS.sub(" ", text.lower()).split())


class AnswerVerdict(BaseModel):
    """The judge's decision on one answer."""

    verdict: Verdict = Field(description="correct: the answer agrees with the correct reply; outdated: it follows "
                                         "a past preference instead; incorrect: anything else")

    @classmethod
    def fake_output(cls, context: JudgeAnswerContext, rng: random.Random) -> AnswerVerdict:
        """Fake-backend hook: a literal judge (the answer contains the correct reply, or an outdated one)."""
        answer = _normal(context.answer)
        if _normal(context.correct) and _normal(context.correct) in answer:
            return cls(verdict="correct")
        if any(_normal(o) and _normal(o) in answer for o in context.outdated):
            return cls(verdict="outdated")
        return cls(verdict="incorrect")
