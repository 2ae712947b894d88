"""Stage 7, pure code: a persona's sessions plus shared filler, ordered into long histories at each budget.

Token rule (see pipeline/tokens.py, the one place it lives): a message costs
``count_tokens(content) + MESSAGE_OVERHEAD``; a context costs the sum over exactly the messages a
model receives: the profile system message(s) and every turn of every session. Sessions are
counted once (``count_sessions`` fills the ``n_tokens`` caches) and every context reuses those numbers.
A budget is what a harness sends (pipeline/s5_assembly/fit.py): the history under the message rule plus
PersonaMem's reserve for the question and answer, and the history in LongMemEval's JSON format plus
its reader's reserve, each at most the budget.

Invariants: the persona's sessions appear in non-decreasing simulated time (so a topic's earlier
period never follows a later one); filler sits only at session boundaries; every context fits both
harnesses, the larger of the two ending within ``tolerance`` below its budget; a query is placed only
when all its evidence lies in the context strictly before the message where it is asked.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict

from pydantic import BaseModel, Field

from pipeline.rng import derive_rng
from pipeline.s5_assembly.budget import AssemblyError, date_tokens, layout, lme_costs, profile_text
from pipeline.s5_assembly.filling import FillerPool, _filler_slots, _fitting_filler
from pipeline.s5_assembly.fit import (
    fill_floor,
    lme_history_cap,
    pm_ask_tokens,
    pm_history_cap,
)
from pipeline.s5_assembly.placement import place_queries
from pipeline.tokens import count_sessions, message_tokens
from schemas.context import AssemblySettings, Context, Ordering, Placement
from schemas.conversation import SessionWithTurns
from schemas.ids import stable_id
from schemas.persona import Persona
from schemas.query import Query

STAGE = "assemble_contexts"


class PersonaAssembly(BaseModel):
    """One persona's contexts (one per budget), placements, and why queries were not placed."""

    contexts: list[Context] = Field(default_factory=list)
    placements: list[Placement] = Field(default_factory=list)
    unplaced: dict[str, int] = Field(default_factory=dict)


class Assembly(PersonaAssembly):
    """Every persona's assembly, plus the sessions with their token counts filled in."""

    sessions: list[SessionWithTurns] = Field(default_factory=list)


def assemble_all(
    personas: list[Persona],
    sessions: list[SessionWithTurns],
    queries: list[Query],
    *,
    settings: AssemblySettings,
    run_seed: int,
) -> Assembly:
    """Count every session once, then assemble each persona's contexts against the shared filler pool."""
    counted = count_sessions(sessions)
    lme = lme_costs(counted)  # every session once, as count_sessions counts each once
    pool = FillerPool.from_sessions(counted, lme)
    by_persona: dict[str, list[SessionWithTurns]] = defaultdict(list)
    for swt in counted:
        if swt.session.kind == "topic" and swt.session.persona_id is not None:
            by_persona[swt.session.persona_id].append(swt)
    queries_of: dict[str, list[Query]] = defaultdict(list)
    for q in queries:
        queries_of[q.persona_id].append(q)
    out = Assembly()
    out.sessions = counted  # already validated models: skip revalidating every session
    unplaced: Counter[str] = Counter()
    for persona in personas:
        part = _assemble(persona, by_persona[persona.persona_id], queries_of[persona.persona_id],
                         pool=pool, settings=settings, run_seed=run_seed, lme=lme)
        out.contexts.extend(part.contexts)
        out.placements.extend(part.placements)
        unplaced.update(part.unplaced)
    out.unplaced = dict(sorted(unplaced.items()))
    return out


def assemble_contexts(
    persona: Persona,
    sessions: list[SessionWithTurns],
    queries: list[Query],
    *,
    pool: FillerPool,
    settings: AssemblySettings,
    run_seed: int,
) -> PersonaAssembly:
    """One context per budget for ``persona``, with every query placed where its evidence precedes it."""
    return _assemble(persona, count_sessions(sessions), queries, pool=pool, settings=settings, run_seed=run_seed)


def _assemble(
    persona: Persona,
    sessions: list[SessionWithTurns],
    queries: list[Query],
    *,
    pool: FillerPool,
    settings: AssemblySettings,
    run_seed: int,
    lme: dict[str, int] | None = None,
) -> PersonaAssembly:
    own = sorted(sessions, key=lambda s: (s.session.time, s.session.session_id))
    for swt in own:
        if swt.session.persona_id != persona.persona_id or swt.session.kind != "topic":
            raise AssemblyError(f"sessions: {swt.session.session_id} is not a topic session of {persona.persona_id}")
    rng = derive_rng(run_seed, persona.persona_id, STAGE, "ordering")
    ordering: Ordering = rng.choice(sorted(settings.orderings))
    focal = _focal_topic(own, rng)
    priority = _topic_priority(own, focal, rng)
    profile_tokens = message_tokens(profile_text(persona))
    if lme is None or any(s.session.session_id not in lme for s in own):
        lme = lme_costs(own)
    ask = max((pm_ask_tokens(q.question, [o.text for o in q.options]) for q in queries), default=0)
    result = PersonaAssembly()
    unplaced: Counter[str] = Counter()
    for budget in sorted(settings.budgets):
        chosen = _choose_sessions(own, priority, budget, profile_tokens, settings, persona.persona_id, lme, ask)
        context = _build_context(persona, chosen, focal, ordering, budget, profile_tokens, pool, settings, run_seed,
                                 lme, ask)
        result.contexts.append(context)
        placements = place_queries(context, {s.session.session_id: s for s in chosen}, queries, pool, profile_tokens)
        result.placements.extend(placements.placements)
        unplaced.update(placements.unplaced)
    result.unplaced = dict(unplaced)
    return result


def _focal_topic(own: list[SessionWithTurns], rng: random.Random) -> str | None:
    """A topic with at least two sessions (so a gap can sit inside it), chosen by seed."""
    counts = Counter(s.session.topic for s in own)
    multi = sorted(t for t, n in counts.items() if n >= 2)
    candidates = multi or sorted(counts)
    return rng.choice(candidates) if candidates else None


def _topic_priority(own: list[SessionWithTurns], focal: str | None, rng: random.Random) -> list[str]:
    """Topics in the order they are kept when the budget cannot hold them all: focal first, rest seeded."""
    others = sorted({s.session.topic for s in own} - {focal})
    rng.shuffle(others)
    return ([focal] if focal else []) + others


def _choose_sessions(
    own: list[SessionWithTurns],
    priority: list[str],
    budget: int,
    profile_tokens: int,
    settings: AssemblySettings,
    persona_id: str,
    lme: dict[str, int],
    ask: int,
) -> list[SessionWithTurns]:
    """Whole topics, by priority, while the persona's own messages stay within ``max_persona_fraction``
    (and within both harnesses' history caps); then, where room is left, the earliest sessions of the
    remaining topics (a causal prefix of each), so the persona's own text fills the context before any
    filler does."""
    share = int(budget * settings.max_persona_fraction)
    cap = min(share, pm_history_cap(budget, ask))
    lme_cap = min(share, lme_history_cap(budget))
    per_session = settings.profile == "per_session"

    def cost(s: SessionWithTurns) -> int:
        return (s.session.n_tokens + (profile_tokens if per_session else 0)
                + (date_tokens(s.session.time.date()) if settings.session_dates else 0))

    used = 0 if per_session else profile_tokens
    used_lme = 0
    kept: set[str] = set()
    for topic in priority:
        topic_cost = sum(cost(s) for s in own if s.session.topic == topic)
        topic_lme = sum(lme[s.session.session_id] for s in own if s.session.topic == topic)
        if used + topic_cost <= cap and used_lme + topic_lme <= lme_cap:
            kept.add(topic)
            used += topic_cost
            used_lme += topic_lme
    if priority and not kept:
        raise AssemblyError(
            f"assembly.budgets: {budget} tokens cannot hold any whole topic of persona {persona_id} "
            f"(max_persona_fraction {settings.max_persona_fraction})"
        )
    chosen = {s.session.session_id for s in own if s.session.topic in kept}
    for topic in (t for t in priority if t not in kept):
        for s in (s for s in own if s.session.topic == topic):  # ``own`` is in time order
            if used + cost(s) > cap or used_lme + lme[s.session.session_id] > lme_cap:
                break
            chosen.add(s.session.session_id)
            used += cost(s)
            used_lme += lme[s.session.session_id]
    return [s for s in own if s.session.session_id in chosen]


def _build_context(
    persona: Persona,
    chosen: list[SessionWithTurns],
    focal: str | None,
    ordering: Ordering,
    budget: int,
    profile_tokens: int,
    pool: FillerPool,
    settings: AssemblySettings,
    run_seed: int,
    lme: dict[str, int],
    ask: int,
) -> Context:
    """Pick filler so that both harnesses receive the context within the budget, the larger of the two
    ending within the tolerance below it; then interleave it at session boundaries per the ordering mode."""
    per_session = settings.profile == "per_session"
    own_tokens = sum(s.session.n_tokens for s in chosen) + profile_tokens * (len(chosen) if per_session else 1)
    dated = settings.session_dates
    if dated:
        own_tokens += sum(date_tokens(s.session.time.date()) for s in chosen)
    per_filler = max((date_tokens(s.session.time.date()) for s in chosen), default=0) if dated else 0
    own_lme = sum(lme[s.session.session_id] for s in chosen)
    fillers, rng, fill = _fitting_filler(pool, budget, own_tokens, own_lme, per_filler, ask,
                                         lambda: derive_rng(run_seed, persona.persona_id, STAGE, budget),
                                         full=budget * (1 - settings.tolerance))
    if fill < fill_floor(budget, settings.tolerance, min(pool.lme_tokens.values(), default=0)):
        raise AssemblyError(
            f"filler pool: {len(pool.sessions)} sessions ({sum(f.n_tokens for f in pool.sessions)} tokens) cannot fill the "
            f"{budget}-token context of persona {persona.persona_id} (reached {fill})"
        )
    by_id = pool.by_id()
    filler_tokens = sum(by_id[sid].n_tokens for sid in fillers)
    total = own_tokens + filler_tokens + per_filler * len(fillers)  # an upper bound; the layout below is exact
    slots = _filler_slots(chosen, focal, ordering, [(sid, by_id[sid].n_tokens) for sid in fillers],
                          settings.gap_fraction, rng)
    order: list[str] = []
    for i, swt in enumerate([*chosen, None]):
        order.extend(slots.get(i, []))
        if swt is not None:
            order.append(swt.session.session_id)
    if dated:
        members = pool.by_id() | {s.session.session_id: s.session for s in chosen}
        total = layout(order, members, profile_tokens=profile_tokens, profile_mode=settings.profile,
                       session_dates=True).n_tokens
    return Context(
        context_id=stable_id("ctx", persona.persona_id, budget),
        persona_id=persona.persona_id,
        budget_tokens=budget,
        ordering=ordering,
        session_ids=order,
        n_tokens=total,
        filler_tokens=filler_tokens,
        profile_mode=settings.profile,
        focal_topic=focal,
        session_dates=dated,
    )


