"""The 7 query types in code: each builder decides the correct option and the distractors from the
persona's facts at ``as_of`` and words them plainly (the model's brief and the code-written fallback).

Every option of one type shares one sentence frame, so no frame tells the right answer apart; the
question (``ask``) never holds the answer, and its words avoid the frames' words. Every form a
distractor takes is also the correct answer somewhere: "you have not told me" in abstention items
(what is asked about was never voiced), "no change" for a preference that never changed (``variant``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from pipeline.queries.facts import Facts
from pipeline.text.beats import topic_label
from schemas.query import ABSENT, OptionRole
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
    form: Variant = "statement"


Builder = Callable[..., Built | None]
Variant = Literal["statement", "abstention", "no_change"]
VARIANTS: dict[str, tuple[str, ...]] = {  # the variants besides "statement" each type has
    "recall_user_shared_facts": ("abstention",),
    "acknowledge_latest_preferences": ("abstention",),
    "track_full_preference_evolution": ("no_change", "abstention"),
    "revisit_reasons_behind_preference_updates": ("no_change",),
}
FORGETFUL_TYPES = ("recall_user_shared_facts", "acknowledge_latest_preferences", "track_full_preference_evolution")


def did(summary: str) -> str:
    """An event summary after "you": ``was told ...`` -> ``were told ...``."""
    return f"were {summary[4:]}" if summary.startswith("was ") else summary


def _opt(role: OptionRole, grounding: list[str], text: str) -> OptionPlan:
    return OptionPlan(role=role, grounding=grounding, text=text)


def _built(facts: Facts, ask: tuple[str, str], answer: str, options: list[OptionPlan], keys: list[str],
           updates: int = 0, form: Variant = "statement") -> Built | None:
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
                 n_pref_updates=updates, form=form)


# -- 1. recall_user_shared_facts ----------------------------------------------------------------------
def recall_user_shared_facts(facts: Facts, topic: str, focal: str, as_of: datetime, rng, variant: Variant = "statement",
                             forgetful: bool = True) -> Built | None:
    """Correct: an event the user told in this topic, or (abstention: nothing told in it) "you have not
    shared anything"; distractors: things never told, and the forgetful reply when it is wrong."""
    frame = "You mentioned that you {}."
    if variant == "abstention":
        if facts.told_by(topic, as_of):
            return None
        head = [_opt("correct", [f"{ABSENT}topic:{topic}"], FORGOT)]
        answer, keys = FORGOT, []
    else:
        event = facts.timeline.event(focal)
        if event.time >= as_of:
            return None
        head = [_opt("correct", [focal], frame.format(did(event.summary)))]
        head += [_opt("forgetful", [], FORGOT)] if forgetful else []
        answer, keys = event.summary, [focal]
    others = facts.pools.unlived_routines(topic, rng, facts.n_options) + facts.pools.unlived_events(rng, facts.n_options)
    rng.shuffle(others)
    options = head + [_opt("generic", [f"taxonomy:{s}"], frame.format(did(s))) for s in others]
    asked = "Can you remind me what I have been doing lately around {label}?"
    ask = (asked, asked.format(label=topic_label(topic)) if variant == "abstention"
           else "Can you remind me what I have been doing lately?")
    return _built(facts, ask, answer, options, keys, form=variant)


# -- 2. suggest_new_ideas -------------------------------------------------------------------------------
def suggest_new_ideas(facts: Facts, topic: str, _focal: str, as_of: datetime, rng, **_) -> Built | None:
    """Correct: an item of the persona's own pool never mentioned; distractors: items already voiced
    (an outdated like first), drawn from that same pool and worded alike."""
    spare = facts.spare_items(topic, rng, 1)
    fresh = spare or facts.pools.fresh_items(topic, rng, 1)
    if not fresh:
        return None
    frame = "How about trying {}? It would be a fresh pick for you."
    held = facts.held(topic, as_of)
    outdated = [v for v in facts.ended(topic, as_of) if v.stance == "like" and facts.current(v.pref_id, as_of).stance != "like"]
    options = [_opt("correct", [f"{'inventory' if spare else 'catalog'}:{fresh[0]}"], frame.format(fresh[0]))]
    options += [_opt("outdated_preference", [v.key], frame.format(v.item)) for v in outdated[:1]]
    options += [_opt("already_done", [v.key], frame.format(v.item)) for v in held if v.stance == "like"]
    options += [_opt("violates_preference", [v.key], frame.format(v.item)) for v in held if v.stance == "dislike"]
    ask = ("I want to try something different with {label}. What would you put forward?",
           "I want to try something different. What would you put forward?")
    updates = facts.updates(outdated[0].pref_id, as_of) if outdated else 0
    return _built(facts, ask, fresh[0], options, [v.key for v in held + outdated[:1]], updates)


# -- 3. acknowledge_latest_preferences --------------------------------------------------------------------
def acknowledge_latest_preferences(facts: Facts, topic: str, focal: str, as_of: datetime, rng,
                                   variant: Variant = "statement", forgetful: bool = True) -> Built | None:
    """Correct: the version valid at as_of, or (abstention: an item never voiced) "you have not said";
    distractors: the superseded or flipped stance, another persona's preference, forgetting."""
    frame = "You have said that you {} {} at this point."
    unsure = "You have not yet said how you feel about {}."
    others = _other_persona(facts, topic, rng, lambda v: frame.format(PRESENT[v.stance], v.item))
    if variant == "abstention":
        if not facts.unsaid(focal):
            return None
        options = [_opt("correct", [f"{ABSENT}{focal}"], unsure.format(focal))]
        options += [_opt("generic", [], frame.format(PRESENT[s], focal)) for s in ("like", "dislike")]
        return _built(facts, ASK_STANCE, focal, options + others, [], form=variant)
    current, previous = facts.current_and_previous(focal, as_of)
    if current is None:
        return None
    options = [_opt("correct", [current.key], frame.format(PRESENT[current.stance], current.item))]
    if previous is not None:
        options.append(_opt("outdated_preference", [previous.key], frame.format(PRESENT[previous.stance], current.item)))
    else:
        options.append(_opt("violates_preference", [current.key], frame.format(PRESENT[_flip(current.stance)], current.item)))
    options += others[:1] + ([_opt("forgetful", [], unsure.format(current.item))] if forgetful else []) + others[1:]
    keys = [current.key] + ([previous.key] if previous else [])
    return _built(facts, ASK_STANCE, current.item, options, keys, facts.updates(current.pref_id, as_of))


ASK_STANCE = ("Where do I stand these days on {label}, as far as you know?",
              "Where do I stand these days, as far as you know?")


def _other_persona(facts: Facts, topic: str, rng, word: Callable[[PreferenceVersion], str]) -> list[OptionPlan]:
    versions = facts.pools.shadow_current(topic)
    rng.shuffle(versions)
    return [_opt("other_persona", [pid, v.key], word(v)) for pid, v in versions]


def _flip(stance: str) -> str:
    return "dislike" if stance == "like" else "like"


# -- 4. track_full_preference_evolution --------------------------------------------------------------------
def chain_text(item: str, stances: list[str]) -> str:
    """``At first you enjoyed X, then you avoided it, and at present you enjoy it.``"""
    if len(stances) == 1:
        return f"All along you have {PAST[stances[0]]} {item}, with no shift at all."
    middle = "".join(f", then you {PAST[s]} it" for s in stances[1:-1])
    return f"At first you {PAST[stances[0]]} {item}{middle}, and at present you {PRESENT[stances[-1]]} it."


def track_full_preference_evolution(facts: Facts, topic: str, focal: str, as_of: datetime, rng,
                                    variant: Variant = "statement", forgetful: bool = True) -> Built | None:
    """Correct: the full ordered chain (one stance all along when it never changed), or (abstention: an
    item never voiced) "this is the first I hear of it"; distractors: the chain before the last change,
    wrong sequences, forgetting."""
    ask = ("How have my feelings about {label} developed over time, from what I have shared?",
           "How have my feelings developed over time, from what I have shared?")
    first = "This is the first I am hearing of {} from you."  # no word of the question ("about")
    if variant == "abstention":
        if not facts.unsaid(focal):
            return None
        # the same shapes a real history's options take: a chain, its prefix, its mirror
        made = [rng.choice(["like", "dislike"])]
        while len(made) < rng.choice([2, 2, 3]):
            made.append(_flip(made[-1]))
        wrong = [made, made[:-1], [_flip(s) for s in made]]
        rng.shuffle(wrong)
        options = [_opt("correct", [f"{ABSENT}{focal}"], first.format(focal))]
        options += [_opt("wrong_sequence", [], chain_text(focal, w)) for w in wrong]
        return _built(facts, ask, focal, options, [], form=variant)
    chain = [v for v in facts.timeline.versions(focal) if v.valid_from <= as_of]
    if not chain or (len(chain) < 2) != (variant == "no_change"):
        return None
    item, stances = chain[-1].item, [v.stance for v in chain]
    keys = [v.key for v in chain]
    flipped = [_flip(s) for s in stances]
    options = [_opt("correct", keys, chain_text(item, stances))]
    if len(chain) > 1:
        options.append(_opt("outdated_preference", keys[:-1], chain_text(item, stances[:-1])))
    wrong = [flipped, [*stances, _flip(stances[-1])], [*flipped, stances[-1]]]
    options.append(_opt("wrong_sequence", [], chain_text(item, wrong[0])))
    options += [_opt("forgetful", [], first.format(item))] if forgetful else []
    options += [_opt("wrong_sequence", [], chain_text(item, w)) for w in wrong[1:]]
    return _built(facts, ask, item, options, keys, len(chain) - 1, form=variant)


# -- 5. revisit_reasons_behind_preference_updates -------------------------------------------------------------
def revisit_reasons_behind_preference_updates(facts: Facts, topic: str, focal: str, as_of: datetime, rng,
                                              variant: Variant = "statement", **_) -> Built | None:
    """Correct: the life event behind the last change, or (no_change) that the view never changed;
    distractors: the old stance as if unchanged, other reasons."""
    current, previous = facts.current_and_previous(focal, as_of)
    if current is None or (previous is None) != (variant == "no_change"):
        return None
    cause = facts.life_cause(current) if previous else None
    if previous is not None and cause is None:
        return None
    frame = "Your view of {} changed after you {}."
    still = "Your view of {} has not changed; you still {} it."
    item = current.item
    if cause is None:
        options = [_opt("correct", [current.key], still.format(item, PRESENT[current.stance]))]
        others = [e for e in facts.timeline.events if e.kind == "life_event" and e.time < as_of]
        rng.shuffle(others)
    else:
        options = [_opt("correct", [current.key, cause.event_id], frame.format(item, did(cause.summary))),
                   _opt("outdated_preference", [previous.key], still.format(item, PRESENT[previous.stance]))]
        others = facts.other_life_events(cause, as_of, rng)
    options += [_opt("wrong_reason", [e.event_id], frame.format(item, did(e.summary))) for e in others[:1]]
    options += [_opt("wrong_reason", [f"taxonomy:{s}"], frame.format(item, did(s))) for s in facts.pools.unlived_events(rng, facts.n_options)]
    ask = ("Has my view of anything in {label} changed, and if so, what was behind it?",
           "Has my view of anything changed, and if so, what was behind it?")
    answer = cause.summary if cause else item
    return _built(facts, ask, answer, options, [current.key], facts.updates(current.pref_id, as_of), form=variant)


# -- 6. provide_preference_aligned_recommendations ----------------------------------------------------------
def recommend_text(item: str, stance: str) -> str:
    """``Since you enjoy X, I would point you toward more of it.``"""
    where = "toward more of it" if stance == "like" else "away from it"
    return f"Since you {PRESENT[stance]} {item}, I would point you {where}."


def provide_preference_aligned_recommendations(facts: Facts, topic: str, pref: str, as_of: datetime, rng,
                                               **_) -> Built | None:
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
    others = _other_persona(facts, topic, rng, lambda v: recommend_text(v.item, v.stance))
    extra += others[:1]
    rng.shuffle(extra)
    options += extra + others[1:]
    ask = ("Could you recommend something for me in {label}?", "Could you recommend something for me?")
    keys = [current.key] + ([previous.key] if previous else []) + [v.key for v in facts.held(topic, as_of)]
    return _built(facts, ask, current.item, options, keys, facts.updates(current.pref_id, as_of))


# -- 7. generalize_to_new_scenarios -------------------------------------------------------------------------
def generalize_to_new_scenarios(facts: Facts, topic: str, pref: str, as_of: datetime, rng, **_) -> Built | None:
    """Correct: a plan for a new situation that follows from the reason of the last change; distractors:
    the same reason with the old stance, wrong reasons with either stance (one frame for every option)."""
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
    reasons = [(e.event_id, e.summary) for e in facts.other_life_events(cause, as_of, rng)[:1]]
    reasons += [(f"taxonomy:{s}", s) for s in facts.pools.unlived_events(rng, facts.n_options)]
    stances = [current.stance, previous.stance] * len(reasons)
    options += [_opt("wrong_reason", [g], frame.format(did(s), PRESENT[stance], item))
                for (g, s), stance in zip(reasons, stances, strict=False)]
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
