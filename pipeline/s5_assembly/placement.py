"""Question placement: where in a context each query is asked, only when all its evidence lies strictly before that message."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel

from pipeline.s5_assembly.budget import Layout, layout
from pipeline.s5_assembly.filling import FillerPool
from schemas.context import Context, Placement
from schemas.conversation import SessionWithTurns, Turn
from schemas.query import Query


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
                         evidence_position=0.0, voicing=query.voicing)
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
        voicing=query.voicing,
    )


def turn_prefix(turns: list[Turn]) -> list[int]:
    """Cumulative turn tokens with a leading 0: tokens before turn t is ``prefix[t]``."""
    out = [0]
    for turn in turns:
        out.append(out[-1] + turn.n_tokens)
    return out
