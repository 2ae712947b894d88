"""What every query type builds: an option decided in code (role, grounding, plain wording), a builder's result, the
variants each type has besides a statement, and the helpers that keep a set's texts distinct."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel

from pipeline.s4_queries.facts import Facts
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
