"""Filler at session boundaries: which shared filler sessions fill a context to both harnesses' caps (a seeded first-fit pass, then an exact subset sum), and the boundaries they sit at."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Iterable

from pydantic import BaseModel, Field, PrivateAttr

from pipeline.s5_assembly.budget import AssemblyError, lme_costs
from pipeline.s5_assembly.fit import (
    fill_tokens,
    fits,
    lme_history_cap,
    pm_history_cap,
)
from schemas.context import Ordering
from schemas.conversation import Session, SessionWithTurns

FINISH_TOKENS = 6000  # the last stretch of a budget is filled exactly by subset sum


FIT_ROUNDS = 8  # filler picks tried before a context that fits neither way is an error


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
