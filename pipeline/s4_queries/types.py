"""The 7 query types in code: each builder decides the correct option and the distractors from the
persona's facts at ``as_of`` and words them as replies to an in-situ message (the model's brief and the
code-written fallback): every option is what an assistant would say, acting on one belief about the user.

Every option of a query is worded from one reply variant of the situation catalog (``wording.py``), differing
only in its slot values, so no wording tells the right answer apart; the user's message (drawn in ``plan.py``
around a situation of the topic) never holds the answer. Every form a distractor takes is also the correct
answer somewhere: "you have not told me" in abstention items (what is asked about was never voiced), "no
change" for a preference that never changed (``variant``).

Option sets are exchangeable: the answer must not follow from how the options relate to each other
(pairs, prefixes, mirrors, the odd one out). Each builder shows a design in which every option has the
same relations to the others (item x stance, reason x stance, chains closed under mirror and prefix)
and draws the correct option's role in it uniformly, or at the rate the planner asks each form; its
docstring says which relations exist and why none singles out the answer. A wrong reason is a life event
the persona never lived that would have turned the same item the same way (as related to the item as the
true cause); an untold event of a recall question reaches the asked topic as a told one does; no distractor
is true of the history.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from pipeline.s4_queries.chains import chain_set, chain_text, extend, flip
from pipeline.s4_queries.facts import Facts
from pipeline.s4_queries.options import Builder, Built, OptionPlan, Variant, built, option
from pipeline.s4_queries.wording import (
    item_slots,
    load_situations,
    reply_variant,
    second_person,
    stance_verb,
    topic_situations,
)
from schemas.query import ABSENT
from schemas.timeline import PreferenceVersion


# -- 1. recall_user_shared_facts ----------------------------------------------------------------------
def recall_user_shared_facts(facts: Facts, topic: str, focal: str, as_of: datetime, rng, variant: Variant = "statement",
                             forgetful: bool = True) -> Built | None:
    """Correct: an event the user told in this topic, or (abstention: nothing told in it) "you have not
    shared anything"; distractors: things never told, and the forgetful reply when it is wrong.

    Every form asks about the named topic, so the question does not tell a statement from an
    abstention; the forgetful reply is shown (n - 1) times as often as it is right, so it is right at
    the rate of any other option; the other options are events in one frame and of the answer's kind
    (life events or routines; in an abstention a kind drawn at the rate the persona's told events have
    it), so the kind does not tell the answer; untold routines name items of the told routine's source
    (catalog or model); untold life events are events the persona never lived that reach the topic, drawn
    per question and of about the answer's length."""
    wording = reply_variant("recall_user_shared_facts", rng)
    phrase = topic_situations(topic).phrase
    forgot = wording["forgot"].format(phrase=second_person(phrase))  # "my reading" is the user's: "your reading"

    def told(summary: str) -> str:
        return wording["told"].format(reason=second_person(summary))

    if variant == "abstention":
        if facts.told_by(topic, as_of):
            return None
        head = [option("correct", [f"{ABSENT}topic:{topic}"], forgot)]
        answer, keys, near = forgot, [], ""
        told_kinds = [facts.timeline.event(e).kind for t in facts.by_topic for e in facts.told_events(t)]
        share = told_kinds.count("life_event") / len(told_kinds) if told_kinds else 0.5
        kind = "life_event" if rng.random() < share else "routine"
        held = [v.item for v in facts.held(topic, as_of)]
        like = rng.choice(held) if held else None  # routines about items of a held item's source
    else:
        event = facts.timeline.event(focal)
        if event.time >= as_of:
            return None
        head = [option("correct", [focal], told(event.summary))]
        head += [option("forgetful", [], forgot)] if forgetful else []
        answer, keys, kind, near = event.summary, [focal], event.kind, event.summary
        versions = {v.key: v for v in facts.timeline.preferences}
        like = next((versions[k].item for k in event.pref_refs if k in versions), None)
    untold = facts.related_untold(topic, rng, facts.n_options, near)
    # untold routines about the items other questions show as never-voiced decoys first (an item shown only
    # in the answer's questions would stand out against decoys shown once)
    routines = facts.pools.unlived_routines(topic, rng, facts.n_options, like,
                                            [i for i in facts.decoy_items(topic) if facts.unsaid(i)])
    others = (routines + untold) if kind == "routine" else (untold + routines)  # the answer's kind first
    options = head + [option("generic", [f"taxonomy:{s}"], told(s)) for s in others]
    return built(facts, answer, options, keys, form=variant)


# -- 2. suggest_new_ideas -------------------------------------------------------------------------------
def suggest_new_ideas(facts: Facts, topic: str, _focal: str, as_of: datetime, rng, **_) -> Built | None:
    """Correct: an item of the persona's own pool never mentioned; distractors: items already voiced
    (an outdated like first), drawn from that same pool and worded alike. Four different items in one
    frame: no option shares its item, frame words or length class with some options and not others; the
    fresh item comes from the source (catalog or model) of a shown item drawn at random, so an item's
    wording does not tell the never-mentioned one."""
    held = facts.held(topic, as_of)
    outdated = [v for v in facts.ended(topic, as_of) if v.stance == "like" and facts.current(v.pref_id, as_of).stance != "like"]
    order = outdated[:1] + [v for v in held if v.stance == "like"] + [v for v in held if v.stance == "dislike"]
    shown = [v.item for v in order][: facts.n_options - 1]  # the distractors, as ``_built`` keeps them
    # the fresh item: one the persona's other questions show as a never-voiced decoy where one is (an item shown
    # only here would stand out against voiced items that come back across its questions), from the source of
    # a shown item drawn at random
    like = rng.choice(shown) if shown else None
    source = facts.pools.source(topic, like) if like else None
    decoys = [i for i in facts.decoy_items(topic) if i not in shown and facts.unsaid(i)
              and facts.pools.source(topic, i) == source]
    spare = [rng.choice(decoys)] if decoys else facts.spare_items(topic, rng, 8)
    if spare and like:
        spare = facts.pools.like_source(topic, spare, like)
    fresh = spare[:1] or facts.pools.fresh_items(topic, rng, 1)
    if not fresh:
        return None
    frame = reply_variant("suggest_new_ideas", rng)["fresh"]

    def text(item: str) -> str:
        return frame.format(**item_slots(item))

    options = [option("correct", [f"{'inventory' if spare else 'catalog'}:{fresh[0]}"], text(fresh[0]))]
    options += [option("outdated_preference", [v.key], text(v.item)) for v in outdated[:1]]
    options += [option("already_done", [v.key], text(v.item)) for v in held if v.stance == "like"]
    options += [option("violates_preference", [v.key], text(v.item)) for v in held if v.stance == "dislike"]
    updates = facts.updates(outdated[0].pref_id, as_of) if outdated else 0
    return built(facts, fresh[0], options, [v.key for v in held + outdated[:1]], updates)


# -- 3. acknowledge_latest_preferences --------------------------------------------------------------------
def acknowledge_latest_preferences(facts: Facts, topic: str, focal: str, as_of: datetime, rng,
                                   variant: Variant = "statement", forgetful: bool = True) -> Built | None:
    """Two items x two forms, every option true of exactly one reading: each item appears twice and each
    form twice, so every option shares its item with one option and its form with another.

    The forms are two of "you enjoy it", "you avoid it", "you have not said": without the forgetful
    form, {enjoy, avoid} x {focal item, a never-voiced item of the persona's pool}; with it, {the focal's
    stance, not said} x {focal, a held item of the opposite stance} in statements, and in the abstention
    (focal never voiced) {a stance, not said} x {focal, a held item whose stance is the other}. The
    planner shows the forgetful pair as often as the abstention is asked, so in a pair with "not said"
    it is right half the time; the focal's row is never told by the options."""
    wording = reply_variant("acknowledge_latest_preferences", rng)

    def said(item: str, stance: str) -> str:
        return wording[stance].format(**item_slots(item), enjoy=wording["enjoy"], avoid=wording["avoid"])

    def unsure(item: str) -> str:
        return wording["unsaid"].format(**item_slots(item))

    others = _other_persona(facts, topic, rng, lambda v: said(v.item, v.stance))  # beyond 4
    if variant == "abstention":
        if not facts.unsaid(focal):
            return None
        held = [v for v in facts.held(topic, as_of) if facts.refs([v.key], as_of)]
        if not held:
            return None
        # a held item that changed comes back in the persona's track and reason questions: one that never
        # changed first, as the never-voiced focal comes back about as rarely
        other = rng.choice([v for v in held if not facts.updates(v.pref_id, as_of)] or held)
        form = flip(other.stance)
        options = [option("correct", [f"{ABSENT}{focal}"], unsure(focal)),
                   option("generic", [], said(focal, form)),
                   option("violates_preference", [other.key], said(other.item, form)),
                   option("generic", [other.key], unsure(other.item))]
        return built(facts, focal, options + others, [], form=variant)
    current, previous = facts.current_and_previous(focal, as_of)
    if current is None:
        return None
    item = current.item
    flipped = (option("outdated_preference", [previous.key], said(item, previous.stance)) if previous
            else option("violates_preference", [current.key], said(item, flip(current.stance))))
    keys = [current.key] + ([previous.key] if previous else [])
    opposite = [v for v in facts.held(topic, as_of) if v.stance != current.stance and facts.refs([v.key], as_of)]
    if forgetful and opposite:
        # an item that changed if the focal did (and not if not): both rows come back across the questions alike
        changed = bool(facts.updates(current.pref_id, as_of))
        other = rng.choice([v for v in opposite if bool(facts.updates(v.pref_id, as_of)) == changed] or opposite)
        options = [option("correct", [current.key], said(item, current.stance)),
                   option("forgetful", [], unsure(item)),
                   option("violates_preference", [other.key], said(other.item, current.stance)),
                   option("generic", [other.key], unsure(other.item))]
        return built(facts, item, options + others, keys, facts.updates(current.pref_id, as_of))
    decoy = facts.decoy_item(topic, focal, item)
    if decoy is None:
        return None
    options = [option("correct", [current.key], said(item, current.stance)), flipped,
               *[option("generic", [f"inventory:{decoy}"], said(decoy, s)) for s in ("like", "dislike")]]
    return built(facts, item, options + others, keys, facts.updates(current.pref_id, as_of))


def _other_persona(facts: Facts, topic: str, rng, word: Callable[[PreferenceVersion], str]) -> list[OptionPlan]:
    versions = facts.pools.shadow_current(topic)
    rng.shuffle(versions)
    return [option("other_persona", [pid, v.key], word(v)) for pid, v in versions]


# -- 4. track_full_preference_evolution --------------------------------------------------------------------
def track_full_preference_evolution(facts: Facts, topic: str, focal: str, as_of: datetime, rng,
                                    variant: Variant = "statement", forgetful: bool = True) -> Built | None:
    """Correct: the full ordered chain (one stance all along when it never changed), or (abstention: an
    item never voiced) "this is the first I hear of it".

    The chains shown are a set closed under mirror and prefix (``chain_set``): with the forgetful reply,
    three chains {A, mirror of A, prefix of A} and the reply; without it, four chains, two lengths x two
    mirrors. An abstention shows the same three-chain shape around a made-up chain, of the lengths real
    ones have, so the "first I hear" reply is right exactly when the history never named the item."""
    wording = reply_variant("track_full_preference_evolution", rng)

    def chain(item: str, stances: list[str]) -> str:
        return chain_text(item, stances, wording)

    if variant == "abstention":
        if not facts.unsaid(focal):
            return None
        made = [rng.choice(["like", "dislike"])]
        while len(made) < rng.choices([2, 3, 4], weights=[16, 3, 1])[0]:
            made.append(flip(made[-1]))
        options = [option("correct", [f"{ABSENT}{focal}"], wording["forgot"].format(**item_slots(focal)))]
        shown = chain_set(made, 3, rng)
        options += [option("wrong_sequence", [], chain(focal, w)) for w in shown + [extend(extend(w)) for w in shown]]
        return built(facts, focal, options, [], form=variant)
    versions = [v for v in facts.timeline.versions(focal) if v.valid_from <= as_of]
    if not versions or (len(versions) < 2) != (variant == "no_change"):
        return None
    item, stances = versions[-1].item, [v.stance for v in versions]
    keys = [v.key for v in versions]
    shown = chain_set(stances, facts.n_options - 1 if forgetful else facts.n_options, rng)
    options = [option("correct", keys, chain(item, stances))]
    for w in shown[1:]:
        outdated = len(w) < len(stances) and w == stances[: len(w)]
        options.append(option("outdated_preference", keys[: len(w)], chain(item, w)) if outdated
                       else option("wrong_sequence", [], chain(item, w)))
    options += [option("forgetful", [], wording["forgot"].format(**item_slots(item)))] if forgetful else []
    options += [option("wrong_sequence", [], chain(item, extend(extend(w)))) for w in shown]  # beyond 4
    return built(facts, item, options, keys, len(versions) - 1, form=variant)


# -- 5. revisit_reasons_behind_preference_updates -------------------------------------------------------------
REVISIT_STILL = 2  # the "has not changed" options of a reasons question: one per stance


def revisit_reasons_behind_preference_updates(facts: Facts, topic: str, focal: str, as_of: datetime, rng,
                                              variant: Variant = "statement", **_) -> Built | None:
    """Two reasons x two "has not changed" stances, about the one item the question names (so no other change
    of the topic can make "has not changed" false): "changed after R" for two reasons and "has not changed; you
    still S it" for both stances.

    Statement: the cause of the last change and a reason that caused no version of the item (a life event the
    persona never lived that would have turned it, fixed per preference, which its generalize question shows
    beside the cause, so both reasons come back across the persona's questions alike), and both stances as if
    unchanged (the old one outdated, the current one wrong in saying it never changed). No change: the current
    stance as unchanged, the other stance, and two such reasons. Every option shares its form with one other
    option; the planner asks the no-change form at the rate the design shows it (``REVISIT_STILL`` of the
    options), so each option is right at the rate of any other; the correct stance is balanced by the planner."""
    current, previous = facts.current_and_previous(focal, as_of)
    if current is None or (previous is None) != (variant == "no_change"):
        return None
    cause = facts.life_cause(current) if previous else None
    if previous is not None and cause is None:
        return None
    wording = reply_variant("revisit_reasons_behind_preference_updates", rng)
    item = current.item

    def changed(summary: str) -> str:
        return wording["changed"].format(**item_slots(item), reason=second_person(summary))

    def still(stance: str) -> str:
        return wording["still"].format(**item_slots(item), stance=stance_verb(wording, stance))

    need = facts.n_options - REVISIT_STILL - (cause is not None)  # wrong reasons beside the cause, if any
    wrong = facts.decoy_reasons(focal, need)
    if len(wrong) < need:
        return None
    if cause is None:
        options = [option("correct", [current.key], still(current.stance)),
                   option("violates_preference", [current.key], still(flip(current.stance)))]
    else:
        options = [option("correct", [current.key, cause.event_id], changed(cause.summary)),
                   option("outdated_preference", [previous.key], still(previous.stance)),
                   option("generic", [], still(current.stance))]
    options += [option("wrong_reason", [g], changed(s)) for g, s in wrong]
    answer = cause.summary if cause else options[0].text
    return built(facts, answer, options, [current.key], facts.updates(current.pref_id, as_of), form=variant,
                 ask_slots=item_slots(item))


# -- 6. provide_preference_aligned_recommendations ----------------------------------------------------------
def recommend_text(item: str, stance: str, instead: str = "", wording: dict[str, str] | None = None) -> str:
    """``I would go for X again; it is one you enjoy.`` / ``I would go for Y over X, which you avoid.``"""
    wording = wording or load_situations().replies["provide_preference_aligned_recommendations"][0]
    return wording[stance].format(**item_slots(item), alt=instead, enjoy=wording["enjoy"], avoid=wording["avoid"])


def provide_preference_aligned_recommendations(facts: Facts, topic: str, pref: str, as_of: datetime, rng,
                                               **_) -> Built | None:
    """Two items x two stances, each option recommending something (more of a liked item, a fresh
    item of the persona's pool in place of an avoided one).

    Rows: the focal item (its current stance correct, the other its outdated or violated stance) and
    an item the persona never held nor named, from the persona's own pool (the pool the focal comes
    from), of about the focal's length and fixed per preference, both stances of it false. Each item
    appears twice and each stance twice; the correct stance is balanced by the planner."""
    current, previous = facts.current_and_previous(pref, as_of)
    if current is None:
        return None
    item = current.item
    decoy = facts.decoy_item(topic, pref, item)
    if decoy is None:
        return None
    spare = [i for i in facts.spare_items(topic, rng, 6) if i not in (item, decoy)]
    if len(spare) < 2:
        return None
    alt = dict(zip((item, decoy), spare, strict=False))
    stereo = decoy in facts.pools.stereotyped_items(topic)
    role = "stereotypical" if stereo else "other_persona"

    wording = reply_variant("provide_preference_aligned_recommendations", rng)

    def text(thing: str, stance: str) -> str:
        return recommend_text(thing, stance, alt[thing], wording)

    grounded = [f"inventory:{decoy}"]
    options = [option("correct", [current.key, f"inventory:{alt[item]}"], text(item, current.stance)),
               option("outdated_preference", [previous.key], text(item, previous.stance)) if previous
               else option("violates_preference", [current.key], text(item, flip(current.stance))),
               *[option(role if s == "like" else "generic", grounded, text(decoy, s)) for s in ("like", "dislike")]]
    options += [option("other_persona", [pid, v.key], recommend_text(v.item, v.stance, spare[-1], wording))  # beyond 4
                for pid, v in facts.pools.shadow_current(topic) if v.item not in (item, decoy)]
    keys = [current.key] + ([previous.key] if previous else [])
    return built(facts, item, options, keys, facts.updates(current.pref_id, as_of))


# -- 7. generalize_to_new_scenarios -------------------------------------------------------------------------
def generalize_to_new_scenarios(facts: Facts, topic: str, pref: str, as_of: datetime, rng, **_) -> Built | None:
    """A plan for a concrete new situation of the topic (the user's message), from the reason of the last
    change: two reasons x two stances, "After you R, I would plan around the fact that you S X".

    The reasons are the cause and a decoy that caused no version of the item (a life event the persona
    never lived that would have turned it the same way, fixed per preference and shared with the revisit
    question); the stances are
    the current and the previous one. Each reason appears twice and each stance twice, so every option
    shares its reason with one option and its stance with another; the correct stance is balanced by
    the planner."""
    current, previous = facts.current_and_previous(pref, as_of)
    cause = facts.life_cause(current) if current and previous else None
    if cause is None:
        return None
    # the first wrong reason would have turned the item toward the stance it left: each reason then fits one
    # stance, so which reason goes with which stance does not single out the answer
    decoy = facts.decoy_reasons(pref, facts.n_options)
    if not decoy:
        return None
    wording = reply_variant("generalize_to_new_scenarios", rng)
    item = current.item

    def plan(summary: str, stance: str) -> str:
        return wording["plan"].format(reason=second_person(summary), stance=stance_verb(wording, stance), **item_slots(item))

    (g, s), now, then = decoy[0], current.stance, previous.stance
    options = [
        option("correct", [current.key, cause.event_id], plan(cause.summary, now)),
        option("outdated_preference", [previous.key, cause.event_id], plan(cause.summary, then)),
        option("wrong_reason", [g], plan(s, now)),
        option("wrong_reason", [g], plan(s, then)),
    ]
    options += [option("wrong_reason", [g2], plan(s2, stance))  # beyond 4
                for (g2, s2), stance in zip(decoy[1:], [now, then] * facts.n_options, strict=False)]
    return built(facts, cause.summary, options, [current.key], facts.updates(current.pref_id, as_of))


BUILDERS: dict[str, Builder] = {
    "recall_user_shared_facts": recall_user_shared_facts,
    "suggest_new_ideas": suggest_new_ideas,
    "acknowledge_latest_preferences": acknowledge_latest_preferences,
    "track_full_preference_evolution": track_full_preference_evolution,
    "revisit_reasons_behind_preference_updates": revisit_reasons_behind_preference_updates,
    "provide_preference_aligned_recommendations": provide_preference_aligned_recommendations,
    "generalize_to_new_scenarios": generalize_to_new_scenarios,
}
