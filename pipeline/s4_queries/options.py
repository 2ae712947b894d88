"""What every query type builds: an option decided in code (role, grounding, plain wording), a builder's result, the
variants each type has besides a statement, the helpers that keep a set's texts distinct, and the two wording rules
the planner draws against and the gates check (even lengths; no message leaning toward the right reply)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel

from pipeline.s4_queries.facts import Facts
from pipeline.tokens import count_tokens
from pipeline.words import keywords
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


def overlap_problem(question: str, texts: list[str], correct: int) -> str | None:
    """The correct option must not be the single one sharing the most content words with the question."""
    words = keywords(question)
    shared = [len(words & keywords(t)) for t in texts]
    best = max(shared)
    if shared[correct] == best and shared.count(best) == 1 and best > 0:
        return f"the correct option alone shares the most words with the question ({shared})"
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
