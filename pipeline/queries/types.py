"""The 7 query types in code: each builder decides the correct option and the distractors from the
persona's facts at ``as_of`` and words them plainly (the model's brief and the code-written fallback).

Every option of one type shares one sentence frame, so no frame tells the right answer apart; the
question (``ask``) never holds the answer, and its words avoid the frames' words.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime

from pydantic import BaseModel

from pipeline.queries.facts import Facts
from schemas.query import OptionRole
from schemas.timeline import PreferenceVersion

PRESENT = {"like": "enjoy", "dislike": "avoid"}
PAST = {"like": "enjoyed", "dislike": "avoided"}
FORGOT = "I do not recall you sharing anything like that so far."


class OptionPlan(BaseModel):
    """One option decided in code: role, grounding ids, and plain wording."""

    role: OptionRole
    grounding: list[str]
    text: str


class Built(BaseModel):
    """A type builder's result before ordering: the correct option first, distractors by priority."""

    ask: str
    ask_plain: str
    answer: str
    options: list[OptionPlan]
    keys: list[str]
    n_pref_updates: int = 0


Builder = Callable[[Facts, str, str, datetime, random.Random], Built | None]


def did(summary: str) -> str:
    """An event summary after "you": ``was told ...`` -> ``were told ...``."""
    return f"were {summary[4:]}" if summary.startswith("was ") else summary


def _opt(role: OptionRole, grounding: list[str], text: str) -> OptionPlan:
    return OptionPlan(role=role, grounding=grounding, text=text)


def _built(facts: Facts, ask: tuple[str, str], answer: str, options: list[OptionPlan], keys: list[str],
           updates: int = 0) -> Built | None:
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
    return Built(ask=ask[0], ask_plain=ask[1], answer=answer, options=kept, keys=[k for k in keys if k in grounded],
                 n_pref_updates=updates)


# -- 1. recall_user_shared_facts ----------------------------------------------------------------------
def recall_user_shared_facts(facts: Facts, topic: str, event_id: str, as_of: datetime, rng) -> Built | None:
    """Correct: an event the user told in this topic; distractors: things never told, and forgetting."""
    event = facts.timeline.event(event_id)
    if event.time >= as_of:
        return None
    frame = "You mentioned that you {}."
    others = facts.pools.unlived_routines(topic, rng, facts.n_options) + facts.pools.unlived_events(rng, facts.n_options)
    rng.shuffle(others)
    options = [_opt("correct", [event_id], frame.format(did(event.summary))), _opt("forgetful", [], FORGOT)]
    options += [_opt("generic", [f"taxonomy:{s}"], frame.format(did(s))) for s in others]
    ask = ("Can you remind me what I have been doing lately around {label}?",
           "Can you remind me what I have been doing lately?")
    return _built(facts, ask, event.summary, options, [event_id])


# -- 2. suggest_new_ideas -------------------------------------------------------------------------------
def suggest_new_ideas(facts: Facts, topic: str, _focal: str, as_of: datetime, rng) -> Built | None:
    """Correct: a catalog item never mentioned; distractors: items already voiced, an outdated like first."""
    fresh = facts.pools.fresh_items(topic, rng, 1)
    if not fresh:
        return None
    frame = "How about trying {}? It would be a fresh pick for you."
    held = facts.held(topic, as_of)
    outdated = [v for v in facts.ended(topic, as_of) if v.stance == "like" and facts.current(v.pref_id, as_of).stance != "like"]
    options = [_opt("correct", [f"catalog:{fresh[0]}"], frame.format(fresh[0]))]
    options += [_opt("outdated_preference", [v.key], frame.format(v.item)) for v in outdated[:1]]
    options += [_opt("already_done", [v.key], frame.format(v.item)) for v in held if v.stance == "like"]
    options += [_opt("violates_preference", [v.key], frame.format(v.item)) for v in held if v.stance == "dislike"]
    ask = ("I want to try something different with {label}. What would you put forward?",
           "I want to try something different. What would you put forward?")
    updates = facts.updates(outdated[0].pref_id, as_of) if outdated else 0
    return _built(facts, ask, fresh[0], options, [v.key for v in held + outdated[:1]], updates)


# -- 3. acknowledge_latest_preferences --------------------------------------------------------------------
def acknowledge_latest_preferences(facts: Facts, topic: str, pref: str, as_of: datetime, rng) -> Built | None:
    """Correct: the version valid at as_of; distractors: the superseded version, a wrong item, forgetting."""
    current, previous = facts.current_and_previous(pref, as_of)
    if current is None:
        return None
    frame = "You have said that you {} {} at this point."
    options = [_opt("correct", [current.key], frame.format(PRESENT[current.stance], current.item))]
    if previous is not None:
        options.append(_opt("outdated_preference", [previous.key], frame.format(PRESENT[previous.stance], current.item)))
    else:
        options.append(_opt("violates_preference", [current.key], frame.format(PRESENT[_flip(current.stance)], current.item)))
    options += _other_persona(facts, topic, rng, lambda v: frame.format(PRESENT["like"], v.item))[:1]
    options.append(_opt("forgetful", [], f"You have not yet said how you feel about {current.item}."))
    options += _other_persona(facts, topic, rng, lambda v: frame.format(PRESENT["like"], v.item))[1:]
    ask = ("Where do I stand these days on {label}, as far as you know?",
           "Where do I stand these days, as far as you know?")
    keys = [current.key] + ([previous.key] if previous else [])
    return _built(facts, ask, current.item, options, keys, facts.updates(current.pref_id, as_of))


def _other_persona(facts: Facts, topic: str, rng, word: Callable[[PreferenceVersion], str]) -> list[OptionPlan]:
    likes = facts.pools.shadow_likes(topic)
    rng.shuffle(likes)
    return [_opt("other_persona", [pid, v.key], word(v)) for pid, v in likes]


def _flip(stance: str) -> str:
    return "dislike" if stance == "like" else "like"


# -- 4. track_full_preference_evolution --------------------------------------------------------------------
def chain_text(item: str, stances: list[str]) -> str:
    """``At first you enjoyed X, then you avoided it, and at present you enjoy it.``"""
    if len(stances) == 1:
        return f"All along you have {PAST[stances[0]]} {item}, with no shift at all."
    middle = "".join(f", then you {PAST[s]} it" for s in stances[1:-1])
    return f"At first you {PAST[stances[0]]} {item}{middle}, and at present you {PRESENT[stances[-1]]} it."


def track_full_preference_evolution(facts: Facts, topic: str, pref: str, as_of: datetime, rng) -> Built | None:
    """Correct: the full ordered chain; distractors: the chain before the last change, wrong sequences."""
    chain = [v for v in facts.timeline.versions(pref) if v.valid_from <= as_of]
    if len(chain) < 2:
        return None
    item, stances = chain[-1].item, [v.stance for v in chain]
    keys = [v.key for v in chain]
    options = [
        _opt("correct", keys, chain_text(item, stances)),
        _opt("outdated_preference", keys[:-1], chain_text(item, stances[:-1])),
        _opt("wrong_sequence", [], chain_text(item, [_flip(s) for s in stances])),
        _opt("forgetful", [], f"This is the first I am hearing about {item} from you."),
        _opt("wrong_sequence", [], chain_text(item, [*stances, _flip(stances[-1])])),
        _opt("wrong_sequence", [], chain_text(item, [_flip(s) for s in [*stances, _flip(stances[-1])]])),
    ]
    ask = ("How have my feelings about {label} shifted over time, from what I have shared?",
           "How have my feelings shifted over time, from what I have shared?")
    return _built(facts, ask, item, options, keys, len(chain) - 1)


# -- 5. revisit_reasons_behind_preference_updates -------------------------------------------------------------
def revisit_reasons_behind_preference_updates(facts: Facts, topic: str, pref: str, as_of: datetime, rng) -> Built | None:
    """Correct: the life event behind the last change; distractors: the old stance, other reasons, none."""
    current, previous = facts.current_and_previous(pref, as_of)
    cause = facts.life_cause(current) if current and previous else None
    if cause is None:
        return None
    frame = "Your view of {} changed after you {}."
    item = current.item
    options = [
        _opt("correct", [current.key, cause.event_id], frame.format(item, did(cause.summary))),
        _opt("outdated_preference", [previous.key], f"Your view of {item} has not changed; you still {PRESENT[previous.stance]} it."),
    ]
    options += [_opt("wrong_reason", [e.event_id], frame.format(item, did(e.summary))) for e in facts.other_life_events(cause, as_of, rng)[:1]]
    options.append(_opt("forgetful", [], f"Your view of {item} changed, though you never gave a cause."))
    options += [_opt("wrong_reason", [f"taxonomy:{s}"], frame.format(item, did(s))) for s in facts.pools.unlived_events(rng, facts.n_options)]
    ask = ("Why did I change my mind about something in {label}, do you recall?",
           "Why did I change my mind about something, do you recall?")
    return _built(facts, ask, cause.summary, options, [current.key], facts.updates(current.pref_id, as_of))


# -- 6. provide_preference_aligned_recommendations ----------------------------------------------------------
def recommend_text(item: str, stance: str) -> str:
    """``Since you enjoy X, I would point you toward more of it.``"""
    where = "toward more of it" if stance == "like" else "away from it"
    return f"Since you {PRESENT[stance]} {item}, I would point you {where}."


def provide_preference_aligned_recommendations(facts: Facts, topic: str, pref: str, as_of: datetime, rng) -> Built | None:
    """Correct: aligned with the current version; distractors: the outdated version, a violated
    preference, a demographic stereotype, another persona's preference."""
    current, previous = facts.current_and_previous(pref, as_of)
    if current is None:
        return None
    options = [_opt("correct", [current.key], recommend_text(current.item, current.stance))]
    if previous is not None:
        options.append(_opt("outdated_preference", [previous.key], recommend_text(current.item, previous.stance)))
    extra = [_opt("violates_preference", [v.key], recommend_text(v.item, _flip(v.stance)))
             for v in facts.held(topic, as_of) if v.pref_id != pref][:1]
    stereo = facts.pools.stereotyped(topic, rng)
    extra += [_opt("stereotypical", [f"catalog:{stereo}"], recommend_text(stereo, "like"))] if stereo else []
    extra += _other_persona(facts, topic, rng, lambda v: recommend_text(v.item, "like"))[:1]
    rng.shuffle(extra)
    options += extra + _other_persona(facts, topic, rng, lambda v: recommend_text(v.item, "like"))
    ask = ("Could you recommend something for me in {label}?", "Could you recommend something for me?")
    keys = [current.key] + ([previous.key] if previous else []) + [v.key for v in facts.held(topic, as_of)]
    return _built(facts, ask, current.item, options, keys, facts.updates(current.pref_id, as_of))


# -- 7. generalize_to_new_scenarios -------------------------------------------------------------------------
def generalize_to_new_scenarios(facts: Facts, topic: str, pref: str, as_of: datetime, rng) -> Built | None:
    """Correct: a plan for a new situation that follows from the reason of the last change; distractors:
    the same reason with the old stance, a wrong reason, advice that ignores the reason."""
    current, previous = facts.current_and_previous(pref, as_of)
    cause = facts.life_cause(current) if current and previous else None
    if cause is None:
        return None
    frame = "Because you {}, I would plan around the fact that you {} {}."
    item = current.item
    options = [
        _opt("correct", [current.key, cause.event_id], frame.format(did(cause.summary), PRESENT[current.stance], item)),
        _opt("outdated_preference", [previous.key, cause.event_id], frame.format(did(cause.summary), PRESENT[previous.stance], item)),
    ]
    options += [_opt("wrong_reason", [e.event_id], frame.format(did(e.summary), PRESENT[current.stance], item))
                for e in facts.other_life_events(cause, as_of, rng)[:1]]
    options.append(_opt("generic", [], "I would plan around whatever most people usually enjoy, like anyone else."))
    options += [_opt("wrong_reason", [f"taxonomy:{s}"], frame.format(did(s), PRESENT[current.stance], item))
                for s in facts.pools.unlived_events(rng, facts.n_options)]
    ask = ("I am facing a fresh situation in {label}. What would you keep in mind for me?",
           "I am facing a fresh situation. What would you keep in mind for me?")
    return _built(facts, ask, cause.summary, options, [current.key], facts.updates(current.pref_id, as_of))


BUILDERS: dict[str, Builder] = {
    "recall_user_shared_facts": recall_user_shared_facts,
    "suggest_new_ideas": suggest_new_ideas,
    "acknowledge_latest_preferences": acknowledge_latest_preferences,
    "track_full_preference_evolution": track_full_preference_evolution,
    "revisit_reasons_behind_preference_updates": revisit_reasons_behind_preference_updates,
    "provide_preference_aligned_recommendations": provide_preference_aligned_recommendations,
    "generalize_to_new_scenarios": generalize_to_new_scenarios,
}
