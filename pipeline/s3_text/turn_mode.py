"""The small model's writing mode (``text.writing: turn``): every turn is its own short plain call.

A user turn opens with code's words (the beat's fact, or a plain question on the topic for an ordinary
exchange) and the model goes on; the reply is a second call that sees that message alone. Each turn is
checked on its own. A user turn that passes is kept, and from then on only its reply is asked again, with
the next sample, up to ``text.turn_attempts`` samples: so a beat whose replies all fail keeps the model's
user turn beside a code reply (the turn's ``fallback`` flag says which), rather than falling back whole.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from pipeline.checks.quality import ENDINGS, Origin, count
from pipeline.checks.verdicts import heard
from pipeline.llm import LLM
from pipeline.llm.errors import LLMError
from pipeline.s3_text.beats import Beat
from pipeline.specs import TURN_ASSISTANT, TURN_USER
from schemas.config import RunConfig
from schemas.turn_drafts import AssistantTurnContext, UserTurnContext, assistant_turn_draft, user_turn_draft


class Exchange(NamedTuple):
    """A user turn and its reply, each with the sample that wrote it (0: the model's first answer; more:
    asked again; None: written by code)."""

    user: str
    assistant: str
    user_from: int | None
    assistant_from: int | None


def count_origin(origin: dict[str, Origin], exchanges: Sequence[Exchange]) -> None:
    """Add each turn of ``exchanges`` to ``origin``'s user_turn / assistant_turn counts."""
    for field, at in (("user_turn", 2), ("assistant_turn", 3)):
        froms = [ex[at] for ex in exchanges]
        count(origin, field, model=sum(f == 0 for f in froms), reasked=sum(bool(f) for f in froms),
              code=sum(f is None for f in froms))


@dataclass(frozen=True)
class TurnAsk:
    """One exchange to write in the turn mode: what the user turn opens with, and how each turn is checked
    (a check returns the problem, or None)."""

    key: tuple[str, int]
    context: UserTurnContext
    topic: str
    user_problem: Callable[[str], str | None]
    reply_problem: Callable[[str, str], str | None]
    fixed: str | None = None  # a user turn code wrote (an implicit beat's request): only its reply is asked


def reply_words(config: RunConfig) -> tuple[int, int]:
    """The word range a turn-mode reply is accepted in: the profile's, its floor lowered to
    ``text.turn_words_min`` (the prompt still asks for the profile's range)."""
    return min(config.text.assistant_words_min, config.text.turn_words_min), config.text.assistant_words_max


def write_turns(asks: Sequence[TurnAsk], *, llm: LLM, config: RunConfig,
                stats) -> dict[tuple[str, int], tuple[str, int | None, str | None, int | None]]:
    """key -> (user turn, its sample or None for code's, reply or None, its sample or None) for every ask whose
    user turn passed (or was code's, ``fixed``).

    Each exchange goes at its own pace, all of them at once: at sample s, its user turn (while none has
    passed), then its reply; a reply that fails is asked again at s + 1. The calls and their sample indices are
    those of a sample-by-sample batch, but no exchange waits for the slowest of the others, so a batching
    engine decodes a reply beside other exchanges' messages instead of idling at each sample's tail.
    ``stats`` (a ``SessionStats``) counts the problems and the exchanges asked again."""
    problems = stats.problems
    asked = config.text.assistant_words_min, config.text.assistant_words_max
    spec = replace(TURN_ASSISTANT, output=assistant_turn_draft(*asked))
    users: dict[tuple[str, int], tuple[str, int | None]] = {a.key: (a.fixed, None) for a in asks if a.fixed}
    replies: dict[tuple[str, int], tuple[str, int]] = {}

    async def ask(one, context, sample: int):
        try:
            return await llm.agenerate(one, context, sample_index=sample)
        except LLMError:
            return None

    async def exchange(a: TurnAsk) -> None:
        for sample in range(config.text.turn_attempts):
            stats.regenerated += 1 if sample else 0
            if a.key not in users:
                draft = await ask(replace(TURN_USER, output=user_turn_draft(a.context.opening)), a.context, sample)
                text = clean(draft.text, a.context.opening) if draft is not None else ""
                problem = heard(draft, a.user_problem(text)) if draft is not None else "model call failed"
                if _noted(problem, problems) is not None:
                    continue
                users[a.key] = (text, sample)
            message = users[a.key][0]
            draft = await ask(spec, AssistantTurnContext(message=message, topic=a.topic, words_min=asked[0],
                                                         words_max=asked[1]), sample)
            text = clean(draft.text) if draft is not None else ""
            if _noted(heard(draft, a.reply_problem(message, text)) if draft is not None else "model call failed",
                      problems) is None:
                replies[a.key] = (text, sample)
                return

    async def every() -> None:
        await asyncio.gather(*(exchange(a) for a in asks))

    llm.runtime.run(every())
    return {key: (user, s, *replies.get(key, (None, None))) for key, (user, s) in users.items()}


def _noted(problem: str | None, problems: dict[str, int]) -> str | None:
    if problem is not None:
        name = problem.split(" '")[0]
        problems[name] = problems.get(name, 0) + 1
    return problem


def turn_opening(beat: Beat, rng) -> str:
    """Code's first words of a user turn in the turn mode: the beat's fact, plainly (the model goes on)."""
    verb = {"like": ("really enjoy", "have come to enjoy"), "dislike": ("really dislike", "have come to avoid")}
    if beat.kind == "initial_preference" and beat.item:
        return f"{rng.choice(('Honestly, I', 'I have to say I', 'For what it is worth, I'))} {verb[beat.stance or 'like'][0]} {beat.item}"
    if beat.kind == "preference_update" and beat.item:
        return f"Since I {beat.told}, I {verb[beat.stance or 'like'][1]} {beat.item}"
    return f"{rng.choice(('By the way, I', 'Small news: I', 'Just so you know, I'))} {beat.told}"


ORDINARY_OPENINGS = ("Could I get your advice on {}", "I would like some general tips on {}",
                     "I have been reading up on {} lately", "Can you help me think about {}")


def ordinary_openings(label: str, subjects: Sequence[str], n: int, rng) -> list[str]:
    """Code's first words of ``n`` ordinary user turns on one topic: a plain question on one of its
    ``subjects`` (the topic's facet words; else its label), no two alike while the pairs last, so no two
    prompts are the same call."""
    pairs = [template.format(subject) for template in ORDINARY_OPENINGS for subject in (subjects or [label])]
    rng.shuffle(pairs)
    return [pairs[i % len(pairs)] for i in range(n)]


def length_problem(assistant: str, words: tuple[int, int]) -> str | None:
    """Why an assistant turn misses the target length (in words), or None when it fits."""
    n = len(assistant.split())
    if n < words[0]:
        return f"assistant turn shorter than {words[0]} words"
    if n > words[1]:
        return f"assistant turn longer than {words[1]} words"
    return None


def clean(text: str, keep: str = "") -> str:
    """``text`` on one line, cut after its last whole sentence when it stops mid-sentence (a reply that ran
    into its token cap keeps what it finished); ``keep``: code's opening, which the cut never enters."""
    text = " ".join(text.split())
    if text.endswith(ENDINGS):
        return text
    ends = [m.end() for m in _SENTENCE_END.finditer(text) if m.end() > len(keep)]
    return text[:ends[-1]].rstrip() if ends else text


_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
