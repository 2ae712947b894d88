"""Pure query planning: which queries a persona gets (types and topics balanced), where each is asked
(end of history, or inside the topic's final session just before a user turn), its truth at that
time, its evidence turns, and its option order. No model; the same persona always gets the same plan."""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime

from pydantic import BaseModel

from pipeline.s4_queries.facts import Facts, TurnRef
from pipeline.s4_queries.options import (
    FORGETFUL_TYPES,
    FORGETFUL_WEIGHT,
    VARIANTS,
    Built,
    OptionPlan,
    leaning,
    length_problem,
    overlap_problem,
)
from pipeline.s4_queries.sources import Pools, reference_causes, reference_holds, shadow_timelines
from pipeline.s4_queries.types import BUILDERS, REVISIT_STILL
from pipeline.s4_queries.wording import draw_message
from schemas.catalog import InventoryItem
from schemas.config import QuerySettings, RunConfig
from schemas.conversation import SessionWithTurns
from schemas.ids import stable_id
from schemas.persona import Persona
from schemas.query import QUERY_TYPES, Evidence, Option, Query, QueryType
from schemas.timeline import Timeline

PREF_TYPES = ("acknowledge_latest_preferences", "provide_preference_aligned_recommendations")
REASON_TYPES = ("revisit_reasons_behind_preference_updates", "generalize_to_new_scenarios")
CHANGE_TYPES = ("track_full_preference_evolution", "revisit_reasons_behind_preference_updates",
                "generalize_to_new_scenarios")


class QueryPlan(BaseModel):
    """Everything about a query except the model's wording; ``options`` are in their final order."""

    query_id: str
    persona_id: str
    type: QueryType
    topic: str
    as_of: datetime
    anchor_session_id: str | None
    anchor_turn_index: int | None
    ask: str
    answer: str
    options: list[OptionPlan]
    correct_index: int
    evidence: list[Evidence]
    n_pref_updates: int
    focal: str = ""
    form: str = "statement"
    situation: str = ""  # the catalog situation the user's message comes from (``recall``: the user's past)

    def to_query(self, question: str, texts: list[str], provenance: dict[str, str]) -> Query:
        """The stored query with this wording; roles, groundings and order come from the plan."""
        options = [Option(text=t, role=o.role, grounding=o.grounding) for t, o in zip(texts, self.options, strict=True)]
        return Query(query_id=self.query_id, persona_id=self.persona_id, type=self.type, topic=self.topic,
                     as_of=self.as_of, anchor_session_id=self.anchor_session_id,
                     anchor_turn_index=self.anchor_turn_index, question=question, options=options,
                     correct_index=self.correct_index, evidence=self.evidence, n_pref_updates=self.n_pref_updates,
                     provenance={**provenance, "form": self.form, "focal": self.focal, "situation": self.situation})


def persona_facts(persona: Persona, timeline: Timeline, sessions: list[SessionWithTurns], *, config: RunConfig,
                  inventory: dict[str, list[InventoryItem]] | None = None) -> Facts:
    """The persona's own sessions indexed, with distractor pools (inventory, shadow personas, taxonomy)."""
    own = [s for s in sessions if s.session.persona_id == persona.persona_id]
    shadows = shadow_timelines(config, persona.persona_id, inventory=inventory)
    pools = Pools(persona=persona, timeline=timeline, shadows=shadows, topics=list(config.topics),
                  inventory=dict(inventory or {}), causes=reference_causes(config),
                  holds=reference_holds(config))
    return Facts(persona=persona, timeline=timeline, sessions=own, pools=pools, n_options=config.queries.n_options)


def plan_queries(facts: Facts, *, settings: QuerySettings, rng: random.Random) -> list[QueryPlan]:
    """Up to the quota of every type, spreading topics evenly; the abstention and no-change variants
    take their configured shares; correct positions cycle through a seeded permutation so they are
    uniform across the dataset."""
    usage: Counter[str] = Counter()
    plans: list[QueryPlan] = []
    shown: set[str] = set()  # the events the reason questions planned so far show
    given: dict[str, Counter[str]] = {}  # per type, the correct stances planned so far
    for qtype in QUERY_TYPES:
        quota = settings.quota(qtype)
        special: list[QueryPlan] = []
        for variant in VARIANTS.get(qtype, ()):
            share = settings.abstain_share if variant == "abstention" else settings.no_change_share
            if (qtype, variant) == ("revisit_reasons_behind_preference_updates", "no_change"):
                share = REVISIT_STILL / facts.n_options  # as often as its design shows "has not changed"
            special += _take(facts, qtype, variant, _share_count(quota, share, rng), usage, rng, settings,
                             shown=shown, given=given)
        # the forgetful reply is shown FORGETFUL_WEIGHT times as often as it is right (see types.py)
        abstained = sum(p.form == "abstention" for p in special)
        normal = max(1, quota - len(special))
        weight = FORGETFUL_WEIGHT.get(qtype, facts.n_options - 1)
        rate = min(1.0, weight * abstained / normal) if qtype in FORGETFUL_TYPES and weight else 1.0
        plans += special + _take(facts, qtype, "statement", quota - len(special), usage, rng, settings, rate, shown,
                                 given)
    return [_ordered(p, pos, rng) for p, pos in zip(plans, balanced_positions(len(plans), facts.n_options, rng), strict=True)]


def _stance(facts: Facts, focal: str) -> str | None:
    """The current stance of a preference focal at the end of history (None for other focals)."""
    version = facts.current(focal, facts.end) if focal.startswith("pref_") else None
    return version.stance if version else None


def _share_count(quota: int, share: float, rng: random.Random) -> int:
    """``quota * share`` rounded at random (so the expected count is exact)."""
    whole = quota * share
    return int(whole) + (rng.random() < whole - int(whole))


def _shown_again(facts: Facts, qtype: str, focal: str, shown: set[str]) -> int:
    """1 when a reason question about ``focal`` would show a cause another reason question of the persona
    already shows (one life event often turns two preferences): a true cause shown in two questions would
    stand out against wrong reasons shown in one."""
    if qtype not in REASON_TYPES or not focal.startswith("pref_"):
        return 0
    version = facts.current(focal, facts.end)
    cause = facts.life_cause(version) if version else None
    return int(cause is not None and cause.event_id in shown)


def _take(facts: Facts, qtype: str, variant: str, count: int, usage: Counter[str], rng: random.Random,
          settings: QuerySettings, forgetful_rate: float = 1.0, shown: set[str] | None = None,
          given: dict[str, Counter[str]] | None = None) -> list[QueryPlan]:
    """Up to ``count`` plans of one variant, least-used topics first (for the reason types, preferences whose
    cause no other reason question shows before them); ``shown`` gathers the events reason questions show."""
    shown = set() if shown is None else shown
    given = {} if given is None else given
    pool = _candidates(facts, qtype, rng, variant) if count > 0 else []
    out: list[QueryPlan] = []
    while pool and len(out) < count:
        # the correct stance balanced, so no stance word gives it away: a focal of the other stance costs
        # as much as a topic used once more, and for changed preferences (which end disliked more often)
        # it weighs before the topic spread
        tally = given.setdefault(qtype, Counter())  # this persona's correct stances of the type so far
        wanted = rng.choice(("like", "dislike")) if tally["like"] == tally["dislike"] else min(
            ("like", "dislike"), key=lambda stance: tally[stance])  # the one given less often, else at random
        first = 1 if qtype in CHANGE_TYPES else 0
        pick = min(pool, key=lambda c: ((miss := _stance(facts, c[1]) not in (wanted, None)) * first,
                                        _shown_again(facts, qtype, c[1], shown), usage[c[0]] + miss, miss, c[2]))
        pool.remove(pick)
        draw = Draw(variant=variant, forgetful=rng.random() < forgetful_rate, tolerance=settings.length_tolerance)
        plan = _plan_one(facts, qtype, pick[0], pick[1], rng, settings, draw)
        if plan is not None:
            out.append(plan)
            usage[pick[0]] += 1
            if (stance := _stance(facts, pick[1])) is not None:
                tally[stance] += 1
            if qtype in REASON_TYPES:
                shown |= {g for o in plan.options for g in o.grounding if g.startswith("evt_")}
    return out


def balanced_positions(count: int, n: int, rng: random.Random) -> list[int]:
    """``count`` positions in 0..n-1, each full block of n a seeded permutation."""
    out: list[int] = []
    while len(out) < count:
        block = list(range(n))
        rng.shuffle(block)
        out += block
    return out[:count]


def _candidates(facts: Facts, qtype: str, rng: random.Random,
                variant: str = "statement") -> list[tuple[str, str, tuple[int, ...]]]:
    """(topic, focal id, rank) for every query this type could ask; lower rank first (changed prefs first)."""
    end = facts.end
    out = []
    for topic in facts.by_topic:
        if variant == "abstention":
            focal = [topic] if qtype == "recall_user_shared_facts" else _unheard(facts, topic, rng)
            out += [(topic, f, (0, rng.random())) for f in focal]
        elif variant == "no_change":
            out += [(topic, pid, (0, rng.random())) for pid in facts.prefs(topic) if not facts.updates(pid, end)]
        elif qtype == "recall_user_shared_facts":
            # events that caused a change last: the revisit and generalize questions show those already, and
            # an event shown in two questions of a persona would stand out against decoys shown in one
            shown = {c.event_id for pid in facts.prefs(topic) for c in facts.causes(pid)}
            out += [(topic, e, (int(e in shown), rng.random())) for e in facts.told_events(topic)]
        elif qtype == "suggest_new_ideas":
            out.append((topic, topic, (0, rng.random())))
        else:
            for pid in facts.prefs(topic):
                updates = facts.updates(pid, end)
                if qtype in PREF_TYPES or updates:
                    out.append((topic, pid, (-min(updates, 1), rng.random())))
    return out


def _unheard(facts: Facts, topic: str, rng: random.Random) -> list[str]:
    """The item an abstention asks about: one the persona never held nor named that its other questions show as
    a decoy (the second item of a preference's item x stance design), so an item seen elsewhere in its
    questions is no sign that it was voiced; a spare item of its pool when there is none."""
    decoys = facts.decoy_items(topic)
    return [rng.choice(decoys)] if decoys else facts.spare_items(topic, rng, 1)


class Draw(BaseModel):
    """Which variant of its type a query is, whether it carries the forgetful distractor, and how far option
    lengths may stray from their median (the length gate's tolerance)."""

    variant: str = "statement"
    forgetful: bool = True
    tolerance: float = 0.25


BUILD_TRIES = 4  # draws of a builder (reply variant, distractors) until the option lengths are even
MESSAGE_TRIES = 6  # draws of the user's message until its words lean toward no reply


def _plan_one(facts: Facts, qtype: str, topic: str, focal: str, rng: random.Random,
              settings: QuerySettings, draw: Draw) -> QueryPlan | None:
    """Anchored inside the topic's final session when drawn and possible, else at the end of history."""
    if rng.random() < settings.anchored_fraction and (plan := _anchored(facts, qtype, topic, focal, rng, draw)):
        return plan
    built = build(facts, qtype, topic, focal, facts.end, rng, draw)
    refs = _refs(facts, built, facts.end)
    if refs is None:
        return None
    return _plan(facts, qtype, topic, focal, built, facts.end, None, refs, rng)


def build(facts: Facts, qtype: str, topic: str, focal: str, as_of: datetime, rng: random.Random,
          draw: Draw) -> Built | None:
    """The type's builder for one draw: redrawn (another reply variant, other distractors of the same kinds)
    while its option lengths are uneven, since code never pads a reply to even them out. Whether a draw is
    kept depends on lengths alone, the same for every role of the design, never on which option is right."""
    out = None
    for _ in range(BUILD_TRIES):
        out = BUILDERS[qtype](facts, topic, focal, as_of, rng, variant=draw.variant, forgetful=draw.forgetful)
        if out is None or length_problem([o.text for o in out.options], draw.tolerance) is None:
            return out
    return out


def _refs(facts: Facts, built: Built | None, as_of: datetime) -> list[TurnRef] | None:
    """The evidence turns; an abstention has none (its evidence is an absence), anything else needs some."""
    if built is None:
        return None
    refs = facts.refs(built.keys, as_of)
    return refs if refs or (refs is not None and built.form == "abstention") else None


def _anchored(facts: Facts, qtype: str, topic: str, focal: str, rng: random.Random, draw: Draw) -> QueryPlan | None:
    """Asked just before a user turn of the final session that follows every evidence turn."""
    final = facts.final(topic)
    if final is None:
        return None
    as_of = final.session.time
    built = build(facts, qtype, topic, focal, as_of, rng, draw)
    refs = _refs(facts, built, as_of)
    if refs is None:
        return None
    after = max((r.turn_index for r in refs if r.session_id == final.session.session_id), default=-1)
    turns = [t.turn_index for t in final.turns if t.role == "user" and t.turn_index > after]
    if not turns:
        return None
    return _plan(facts, qtype, topic, focal, built, as_of, (final.session.session_id, rng.choice(turns)), refs, rng)


def _plan(facts: Facts, qtype, topic, focal, built: Built, as_of: datetime, anchor: tuple[str, int] | None,
          refs: list[TurnRef], rng: random.Random) -> QueryPlan:
    """The plan with the user's in-situ message: a situation of the topic, a message of the type around it."""
    # a message whose words lean toward one reply is drawn again: toward the right one it would give the answer
    # away, and toward a wrong one only (the gate forbids the right one) it would tell a reader which to rule out
    texts = [o.text for o in built.options]
    fallback = None
    for _ in range(MESSAGE_TRIES):
        ask, situation = draw_message(qtype, topic, rng, facts.asked, **built.ask_slots)
        if leaning(ask, texts) is None:
            break
        if fallback is None and overlap_problem(ask, texts, 0) is None:  # the correct option is built first
            fallback = ask, situation
    else:
        ask, situation = fallback or (ask, situation)
    return QueryPlan(
        query_id=stable_id("qry", facts.persona.persona_id, qtype, topic, focal),
        persona_id=facts.persona.persona_id, type=qtype, topic=topic, as_of=as_of,
        anchor_session_id=anchor[0] if anchor else None, anchor_turn_index=anchor[1] if anchor else None,
        ask=ask, answer=built.answer, options=built.options, correct_index=0,
        evidence=[Evidence(session_id=r.session_id, turn_index=r.turn_index) for r in refs],
        n_pref_updates=built.n_pref_updates, focal=focal, form=built.form, situation=situation,
    )


def _ordered(plan: QueryPlan, position: int, rng: random.Random) -> QueryPlan:
    """The correct option (built first) moved to ``position``; distractors shuffled around it."""
    correct, distractors = plan.options[0], list(plan.options[1:])
    rng.shuffle(distractors)
    distractors.insert(position, correct)
    return plan.model_copy(update={"options": distractors, "correct_index": position})


def redraw(facts: Facts, query: Query, rng: random.Random) -> QueryPlan | None:
    """The same question (its message, type, focal, variant, time, anchor, correct position) with a new
    distractor draw."""
    draw = Draw(variant=query.provenance.get("form", "statement"),
                forgetful=any(o.role == "forgetful" for o in query.options))
    focal = query.provenance.get("focal", "")
    if not focal:
        return None
    built = build(facts, query.type, query.topic, focal, query.as_of, rng, draw)
    refs = _refs(facts, built, query.as_of)
    if refs is None:
        return None
    anchor = (query.anchor_session_id, query.anchor_turn_index) if query.anchor_session_id else None
    plan = _plan(facts, query.type, query.topic, focal, built, query.as_of, anchor, refs, rng)
    same = {"ask": query.question, "situation": query.provenance.get("situation", "")}
    return _ordered(plan.model_copy(update=same), query.correct_index, rng)
