"""What every query type builds: an option decided in code (role, grounding, plain wording), a builder's result, the
variants each type has besides a statement, the helpers that keep a set's texts distinct, and the two wording rules
the planner draws against and the gates check (even lengths; no message leaning toward the right reply)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel

from pipeline.s4_queries.facts import Facts
from pipeline.s4_queries.relational import STANCE, polarity
from pipeline.tokens import count_tokens
from pipeline.words import apart, keywords, stems, tokens
from schemas.query import OptionRole


class OptionPlan(BaseModel):
    """One option decided in code: role, grounding ids, and plain wording."""

    role: OptionRole
    grounding: list[str]
    text: str


class Built(BaseModel):
    """A type builder's result before ordering: the correct option first, distractors by priority."""

    answer: str
    options: list[OptionPlan]
    keys: list[str]
    n_pref_updates: int = 0
    form: Variant = "statement"
    ask_slots: dict[str, str] = {}  # what the user's message names besides its situation (revisit: the item)


Builder = Callable[..., Built | None]


Variant = Literal["statement", "abstention", "no_change"]


VARIANTS: dict[str, tuple[str, ...]] = {  # the variants besides "statement" each type has
    "recall_user_shared_facts": ("abstention",),
    "acknowledge_latest_preferences": ("abstention",),
    "track_full_preference_evolution": ("no_change", "abstention"),
    "revisit_reasons_behind_preference_updates": ("no_change",),
}


FORGETFUL_TYPES = ("recall_user_shared_facts", "acknowledge_latest_preferences", "track_full_preference_evolution")


# how many statements show the forgetful reply per abstention: n - 1 where it is one option of n (so it is
# right at the rate of any option); 1 for acknowledge, whose forgetful pair shows "not said" twice; 0 =
# always shown (track: its abstention share is the rate of one option, and a query without the reply
# would be known to be no abstention)
FORGETFUL_WEIGHT = {"acknowledge_latest_preferences": 1, "track_full_preference_evolution": 0}


def length_problem(texts: list[str], tolerance: float) -> str | None:
    """Every option within ``tolerance`` of the median option length in tokens."""
    lengths = [count_tokens(t) for t in texts]
    median = statistics.median(lengths)
    bad = [n for n in lengths if abs(n - median) > tolerance * median]
    return f"option lengths {lengths} stray over {tolerance:.0%} from the median {median}" if bad else None


def leaning(question: str, texts: list[str]) -> int | None:
    """The option that alone shares the most words with the question, if one does."""
    words = keywords(question)
    shared = [len(words & keywords(t)) for t in texts]
    best = max(shared)
    return shared.index(best) if best > 0 and shared.count(best) == 1 else None


def overlap_problem(question: str, texts: list[str], correct: int) -> str | None:
    """The correct option must not be the single one sharing the most content words with the question."""
    if leaning(question, texts) == correct:
        shared = [len(keywords(question) & keywords(t)) for t in texts]
        return f"the correct option alone shares the most words with the question ({shared})"
    return None


def carries_problem(code: list[str], texts: list[str]) -> str | None:
    """Whether reworded replies still carry what code's replies say: each reply names at least half of its own
    words (the ones not every option shares: its item, reason, alternative) and no more of another option's,
    and keeps its stance (a reply whose code wording has stance words of one sign may not carry only the other).
    Code's own wording passes by construction."""
    if texts == code:
        return None
    own = [stems(" ".join(ws)) for ws in apart([{w for w in tokens(t) if len(w) > 3 and w not in STANCE} for t in code])[0]]
    for i, (text, mine) in enumerate(zip(texts, own, strict=True), start=1):
        said = stems(text)
        hits = len(mine & said)
        if mine and hits * 2 < len(mine):
            return f"reply {i} lost what it is about ({', '.join(sorted(mine - said)[:3])})"
        if other := next((j for j, theirs in enumerate(own, start=1) if j != i and len(theirs & said) > hits), None):
            return f"reply {i} speaks of option {other}'s item"
        before, after = set(polarity(tokens(code[i - 1]))), set(polarity(tokens(text)))
        if len(before) == 1 and after and not before & after:
            return f"reply {i} turned its stance around"
    return None


def option(role: OptionRole, grounding: list[str], text: str) -> OptionPlan:
    return OptionPlan(role=role, grounding=grounding, text=text)


def built(facts: Facts, answer: str, options: list[OptionPlan], keys: list[str], updates: int = 0,
          form: Variant = "statement", ask_slots: dict[str, str] | None = None) -> Built | None:
    """A Built with distinct option texts, cut to n_options; None when too few distractors."""
    seen, unique = set(), []
    for o in options:
        if o.text.casefold() not in seen:
            seen.add(o.text.casefold())
            unique.append(o)
    if len(unique) < facts.n_options:
        return None
    kept = unique[: facts.n_options]
    grounded = {g for o in kept for g in o.grounding}
    return Built(answer=answer, options=kept, keys=[k for k in keys if k in grounded], n_pref_updates=updates,
                 form=form, ask_slots=ask_slots or {})
