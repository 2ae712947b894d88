"""Stage 7, pure code: a persona's sessions plus shared filler, ordered into long histories at each budget.

Token rule (see pipeline/dataset/budget.py, the one place it lives): a message costs
``count_tokens(content) + MESSAGE_OVERHEAD``; a context costs the sum over exactly the messages a
model receives: the profile system message(s) and every turn of every session. Sessions are
counted once (``count_sessions`` fills the ``n_tokens`` caches) and every context reuses those numbers.
A budget is what a harness sends (pipeline/dataset/fit.py): the history under the message rule plus
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
from collections.abc import Callable, Iterable
from datetime import date, datetime
from functools import lru_cache

from pydantic import BaseModel, Field, PrivateAttr

from pipeline.errors import UserError
from pipeline.rng import derive_rng
from pipeline.s5_assembly.budget import count_sessions, date_text, message_tokens, profile_text
from pipeline.s5_assembly.fit import (
    fill_floor,
    fill_tokens,
    fits,
    lme_history_cap,
    lme_session_tokens_many,
    pm_ask_tokens,
    pm_history_cap,
)
from schemas.context import AssemblySettings, ChatMessage, Context, Ordering, Placement, ProfileMode
from schemas.conversation import Session, SessionWithTurns, Turn
from schemas.ids import stable_id
from schemas.persona import Persona
from schemas.query import Query

STAGE = "assemble_contexts"
FINISH_TOKENS = 6000  # the last stretch of a budget is filled exactly by subset sum
FIT_ROUNDS = 8  # filler picks tried before a context that fits neither way is an error


class AssemblyError(UserError):
    """A context cannot be built as configured (budget too small, filler pool too small)."""


class FillerPool(BaseModel):
    """The shared filler sessions (counted once), reused by every context, with what each costs in
    LongMemEval's JSON history (``fit.lme_session_tokens_many``)."""

    sessions: list[Session]
    lme_tokens: dict[str, int] = Field(default_factory=dict)
    _by_id: dict[str, Session] = PrivateAttr(default_factory=dict)

    @classmethod
    def from_sessions(cls, sessions: Iterable[SessionWithTurns], lme: dict[str, int] | None = None) -> FillerPool:
        """The pool of the filler among ``sessions``; ``lme``: their LongMemEval costs, when already counted."""
        fillers = sorted((s for s in sessions if s.session.kind == "filler"), key=lambda s: s.session.session_id)
        if any(s.session.n_tokens <= 0 for s in fillers):
            raise AssemblyError("sessions.n_tokens: filler sessions must be counted before assembly")
        lme = lme if lme is not None else lme_costs(fillers)
        return cls(sessions=[s.session for s in fillers], lme_tokens={s.session.session_id: lme[s.session.session_id]
                                                                      for s in fillers})

    def by_id(self) -> dict[str, Session]:
        if len(self._by_id) != len(self.sessions):
            self._by_id = {s.session_id: s for s in self.sessions}
        return self._by_id


class PersonaAssembly(BaseModel):
    """One persona's contexts (one per budget), placements, and why queries were not placed."""

    contexts: list[Context] = Field(default_factory=list)
    placements: list[Placement] = Field(default_factory=list)
    unplaced: dict[str, int] = Field(default_factory=dict)


class Assembly(PersonaAssembly):
    """Every persona's assembly, plus the sessions with their token counts filled in."""

    sessions: list[SessionWithTurns] = Field(default_factory=list)


class Layout(BaseModel):
    """Where each session of a context starts, in messages and in tokens."""

    session_ids: list[str]
    index: dict[str, int] = Field(description="session id -> its position in the context")
    msg_start: list[int] = Field(description="message index of each session's first turn")
    tok_start: list[int] = Field(description="tokens before each session's first turn")
    n_messages: int
    n_tokens: int


def lme_costs(sessions: Iterable[SessionWithTurns]) -> dict[str, int]:
    """Session id -> what the session costs in LongMemEval's JSON history (``fit.lme_session_tokens_many``)."""
    sessions = list(sessions)
    return dict(zip((s.session.session_id for s in sessions), lme_session_tokens_many([s.turns for s in sessions]),
                    strict=True))


def slot_dates(session_ids: list[str], sessions: dict[str, Session]) -> list[datetime | None]:
    """The date each session opens with: a persona session its own time; filler the date of the slot it
    fills (the persona session before it, or the first one when it comes before all of them)."""
    times = [sessions[sid].time if sessions[sid].kind == "topic" else None for sid in session_ids]
    first = next((t for t in times if t is not None), None)
    out, last = [], first
    for t in times:
        last = t or last
        out.append(last)
    return out


@lru_cache(maxsize=4096)
def date_tokens(day: date) -> int:
    """Tokens of one date system message."""
    return message_tokens(date_text(day))


def layout(
    session_ids: list[str],
    sessions: dict[str, Session],
    *,
    profile_tokens: int,
    profile_mode: ProfileMode,
    session_dates: bool = False,
) -> Layout:
    """Message and token offsets of each session under the profile rule (once, or per persona session),
    with one date system message opening each session when ``session_dates``."""
    n_msg = 1 if profile_mode == "once" else 0
    n_tok = profile_tokens if profile_mode == "once" else 0
    msg_start, tok_start = [], []
    dates = slot_dates(session_ids, sessions) if session_dates else [None] * len(session_ids)
    for sid, when in zip(session_ids, dates, strict=True):
        session = sessions[sid]
        if profile_mode == "per_session" and session.kind == "topic":
            n_msg, n_tok = n_msg + 1, n_tok + profile_tokens
        if when is not None:
            n_msg, n_tok = n_msg + 1, n_tok + date_tokens(when.date())
        msg_start.append(n_msg)
        tok_start.append(n_tok)
        n_msg, n_tok = n_msg + session.n_turns, n_tok + session.n_tokens
    index = {sid: i for i, sid in enumerate(session_ids)}
    return Layout(session_ids=session_ids, index=index, msg_start=msg_start, tok_start=tok_start, n_messages=n_msg, n_tokens=n_tok)


def context_messages(context: Context, persona: Persona, sessions: dict[str, SessionWithTurns]) -> list[ChatMessage]:
    """The chat messages a model receives for ``context``, in order (the same layout as :func:`layout`)."""
    profile = ChatMessage(role="system", content=profile_text(persona))
    messages = [profile] if context.profile_mode == "once" else []
    dates = (slot_dates(context.session_ids, {sid: sessions[sid].session for sid in context.session_ids})
             if context.session_dates else [None] * len(context.session_ids))
    for sid, when in zip(context.session_ids, dates, strict=True):
        swt = sessions[sid]
        if context.profile_mode == "per_session" and swt.session.kind == "topic":
            messages.append(profile)
        if when is not None:
            messages.append(ChatMessage(role="system", content=date_text(when)))
        messages.extend(ChatMessage(role=t.role, content=t.content) for t in swt.turns)
    return messages


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


def _fitting_filler(
    pool: FillerPool, budget: int, own_tokens: int, own_lme: int, per_filler: int, ask: int,
    new_rng: Callable[[], random.Random], *, full: float,
) -> tuple[list[str], random.Random, int]:
    """Filler ids that fit both harnesses, the RNG after picking them, and the fill (``fit.fill_tokens``).

    Filler is picked to fill LongMemEval's JSON history exactly (usually the larger), then to fill the
    message-rule history exactly; a pick over either cap is retried with its room lowered by the excess.
    The first pick that fits and fills at least ``full`` wins, else the fullest that fits (the first on a
    tie), so the result depends on the seed alone."""
    chat_cost: Callable[[Session], int] = lambda s: s.n_tokens + per_filler  # noqa: E731
    lme_cost: Callable[[Session], int] = lambda s: pool.lme_tokens[s.session_id]  # noqa: E731
    best: tuple[int, list[str], random.Random] | None = None
    chat_cap, lme_cap = pm_history_cap(budget, ask), lme_history_cap(budget)
    for cost, room in ((lme_cost, lme_cap - own_lme), (chat_cost, chat_cap - own_tokens)):
        for _ in range(FIT_ROUNDS):
            rng = new_rng()
            picked = _pick_filler(pool, room, rng, cost)
            chat = own_tokens + sum(chat_cost(s) for s in picked)
            lme_total = own_lme + sum(lme_cost(s) for s in picked)
            if fits(budget, chat, lme_total, ask):
                fill = fill_tokens(budget, chat, lme_total, ask)
                if best is None or fill > best[0]:
                    best = (fill, [s.session_id for s in picked], rng)
                break
            room -= max(chat - chat_cap, lme_total - lme_cap)  # over a cap: ask again with less room
        if best is not None and best[0] >= full:
            break
    if best is None:
        return [], new_rng(), fill_tokens(budget, own_tokens, own_lme, ask)
    return best[1], best[2], best[0]


def _pick_filler(pool: FillerPool, room: int, rng: random.Random, cost: Callable[[Session], int]) -> list[Session]:
    """Filler whose costs sum as close to ``room`` as the pool allows, never over: a seeded first-fit pass
    up to ``FINISH_TOKENS`` short of the room, then an exact subset sum for the rest."""
    order = list(pool.sessions)
    rng.shuffle(order)
    picked, rest, used = [], [], 0
    for s in order:
        if used + cost(s) <= room - FINISH_TOKENS:
            picked.append(s)
            used += cost(s)
        else:
            rest.append(s)
    picked += _subset_sum([s for s in rest if cost(s) <= room - used], room - used, cost)
    return picked


def _subset_sum(candidates: list[Session], target: int, cost: Callable[[Session], int]) -> list[Session]:
    """The candidates whose cost sum is the largest reachable value <= ``target`` (bitset dynamic programming)."""
    if target < 0:
        return []
    mask = (1 << (target + 1)) - 1
    states = [1]
    for s in candidates:
        states.append((states[-1] | (states[-1] << cost(s))) & mask)
    best = states[-1].bit_length() - 1
    chosen = []
    for i in range(len(candidates), 0, -1):
        if not (states[i - 1] >> best) & 1:
            chosen.append(candidates[i - 1])
            best -= cost(candidates[i - 1])
    return chosen[::-1]


def _filler_slots(
    chosen: list[SessionWithTurns],
    focal: str | None,
    ordering: Ordering,
    fillers: list[tuple[str, int]],
    gap_fraction: float,
    rng: random.Random,
) -> dict[int, list[str]]:
    """Boundary index -> filler ids. The gap sits before the focal topic's final session (focal_gap)
    or right after it (end_gap); the rest is spread over random boundaries."""
    focal_positions = [i for i, s in enumerate(chosen) if s.session.topic == focal]
    gap_at = (focal_positions[-1] + (ordering == "end_gap")) if focal_positions else len(chosen)
    gap_room = gap_fraction * sum(n for _, n in fillers)
    slots: dict[int, list[str]] = defaultdict(list)
    in_gap = 0
    for sid, n in fillers:
        if in_gap < gap_room:
            slots[gap_at].append(sid)
            in_gap += n
        else:
            slots[rng.randrange(len(chosen) + 1)].append(sid)
    return slots


class Placed(BaseModel):
    """The placements of one context, and per reason how many queries could not be placed in it."""

    placements: list[Placement]
    unplaced: dict[str, int]


def place_queries(
    context: Context,
    own: dict[str, SessionWithTurns],
    queries: list[Query],
    pool: FillerPool,
    profile_tokens: int,
) -> Placed:
    """Placements for the queries whose anchor and evidence are in ``context``, sorted by end index."""
    sessions = pool.by_id() | {sid: s.session for sid, s in own.items()}
    lay = layout(context.session_ids, sessions, profile_tokens=profile_tokens, profile_mode=context.profile_mode,
                 session_dates=context.session_dates)
    prefixes = {sid: turn_prefix(swt.turns) for sid, swt in own.items()}
    placements, unplaced = [], Counter()
    for query in queries:
        placement = place_query(context, lay, prefixes, query)
        if isinstance(placement, str):
            unplaced[placement] += 1
        else:
            placements.append(placement)
    placements.sort(key=lambda p: (p.end_index, p.query_id))
    return Placed(placements=placements, unplaced=dict(unplaced))


def place_query(context: Context, lay: Layout, prefixes: dict[str, list[int]], query: Query) -> Placement | str:
    """The placement of ``query`` in ``context``, or the reason it cannot be placed there."""
    position = lay.index
    if query.anchor_session_id is None:
        end_index, end_tokens, end_session = lay.n_messages, lay.n_tokens, len(lay.session_ids)
    else:
        j = position.get(query.anchor_session_id)
        if j is None or query.anchor_session_id not in prefixes:
            return "anchor_not_in_context"
        turns = prefixes[query.anchor_session_id]
        if query.anchor_turn_index >= len(turns) - 1:
            return "anchor_turn_missing"
        end_index = lay.msg_start[j] + query.anchor_turn_index
        end_tokens = lay.tok_start[j] + turns[query.anchor_turn_index]
        end_session = j
    if not query.evidence:
        if not query.abstains():
            return "no_evidence"
        # an abstention's evidence is the absence of a voicing: the whole history before the question
        return Placement(context_id=context.context_id, query_id=query.query_id, end_index=end_index,
                         context_tokens=end_tokens, distance_tokens=end_tokens, distance_sessions=end_session,
                         evidence_position=0.0)
    nearest = None
    for ev in query.evidence:
        j = position.get(ev.session_id)
        if j is None or ev.session_id not in prefixes or ev.turn_index >= len(prefixes[ev.session_id]) - 1:
            return "evidence_not_in_context"
        msg = lay.msg_start[j] + ev.turn_index
        if msg >= end_index:
            return "evidence_not_before_anchor"
        if nearest is None or msg > nearest[0]:
            nearest = (msg, j, lay.tok_start[j] + prefixes[ev.session_id][ev.turn_index],
                       lay.tok_start[j] + prefixes[ev.session_id][ev.turn_index + 1])
    _, ev_session, ev_start, ev_end = nearest
    return Placement(
        context_id=context.context_id,
        query_id=query.query_id,
        end_index=end_index,
        context_tokens=end_tokens,
        distance_tokens=end_tokens - ev_end,
        distance_sessions=end_session - ev_session,
        evidence_position=ev_start / lay.n_tokens if lay.n_tokens else 0.0,
    )


def turn_prefix(turns: list[Turn]) -> list[int]:
    """Cumulative turn tokens with a leading 0: tokens before turn t is ``prefix[t]``."""
    out = [0]
    for turn in turns:
        out.append(out[-1] + turn.n_tokens)
    return out
