"""The history an eval call sends before the question, per context mode.

Every mode draws from the messages of the placement's context before its ``end_index`` (the question's
position), so nothing the user says after the question ever reaches the model:

- ``mcq``: all of them (PersonaMem's protocol); ``no-context``: none.
- ``oracle``: only the sessions holding the query's evidence turns, in context order, each with its
  opening system messages (its date). A query without evidence (an abstention: the user never said it)
  gets no session at all, which is exactly the evidence it has.
- ``recent``: the last ``recent_tokens`` tokens of turns (whole messages), with the date of each session
  they come from.
- ``rag``: the top-``k`` sessions or exchanges (a user turn and the reply after it) that BM25 ranks for the
  question text alone (pipeline.evaluation.retrieval), shown in context order with their sessions' dates.

Modes with history keep the profile system message(s) the context opens with (the persona, as in every
PersonaMem context): they differ from ``mcq`` only in which sessions or turns they keep.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from pipeline.dataset import Dataset
from pipeline.evaluation.retrieval import terms, top_k
from pipeline.s5_assembly.budget import layout
from pipeline.tokens import message_tokens
from schemas.context import ChatMessage, Placement
from schemas.query import Query

Mode = Literal["mcq", "no-context", "oracle", "recent", "rag"]
MODES: tuple[str, ...] = Mode.__args__  # type: ignore[attr-defined]
Granularity = Literal["session", "turn"]


class HistorySettings(BaseModel):
    """How the non-mcq modes cut the history."""

    model_config = ConfigDict(extra="forbid")

    granularity: Granularity = "session"
    k: int = 5
    recent_tokens: int = 4000


class Segment(BaseModel):
    """One session inside a context: its opening system messages from ``start``, its turns from ``first_turn``."""

    session_id: str
    start: int
    first_turn: int
    stop: int


class Unit(BaseModel):
    """A retrievable span of turns: a whole session or one exchange, as a message range of one segment."""

    segment: int
    start: int
    stop: int


class ContextView:
    """A context's messages, their token counts, and where each session lies (built once per context)."""

    def __init__(self, messages: list[ChatMessage], tokens: list[int], head: int, segments: list[Segment]) -> None:
        self.messages = messages
        self.tokens = tokens
        self.head = head
        self.segments = segments
        self._units: dict[str, list[Unit]] = {}
        self._terms: dict[tuple[int, int], list[str]] = {}
        self._user_terms: list[tuple[int, list[str]]] | None = None

    def units(self, granularity: Granularity, end: int) -> list[Unit]:
        """The units whose turns start before ``end``, the last one cut at ``end``."""
        if granularity not in self._units:
            self._units[granularity] = [u for i, s in enumerate(self.segments) for u in _split(self, i, s, granularity)]
        out = []
        for unit in self._units[granularity]:
            if unit.start >= end:
                break
            out.append(unit if unit.stop <= end else unit.model_copy(update={"stop": end}))
        return out

    def unit_terms(self, unit: Unit) -> list[str]:
        """The BM25 terms of a unit's turns (cached per message range)."""
        key = (unit.start, unit.stop)
        if key not in self._terms:
            self._terms[key] = terms(" ".join(m.content for m in self.messages[unit.start:unit.stop]))
        return self._terms[key]

    def user_terms(self, end: int) -> list[list[str]]:
        """The BM25 terms of each user turn before ``end``, in order (the retrieval reader's corpus)."""
        if self._user_terms is None:
            self._user_terms = [(i, terms(m.content)) for i, m in enumerate(self.messages) if m.role == "user"]
        return [t for i, t in self._user_terms if i < end]

    def compose(self, units: list[Unit]) -> list[int]:
        """Message indices of the head, then per segment (in order) its opening messages and the units' turns."""
        picked: dict[int, list[Unit]] = {}
        for unit in sorted(units, key=lambda u: u.start):
            picked.setdefault(unit.segment, []).append(unit)
        indices = list(range(self.head))
        for seg in sorted(picked):
            indices += range(self.segments[seg].start, self.segments[seg].first_turn)
            for unit in picked[seg]:
                indices += range(unit.start, unit.stop)
        return indices


def _split(view: ContextView, index: int, seg: Segment, granularity: Granularity) -> list[Unit]:
    """A segment's units: the whole session, or one unit per user turn with the replies up to the next one."""
    if granularity == "session":
        return [Unit(segment=index, start=seg.first_turn, stop=seg.stop)] if seg.stop > seg.first_turn else []
    starts = [i for i in range(seg.first_turn, seg.stop) if i == seg.first_turn or view.messages[i].role == "user"]
    return [Unit(segment=index, start=a, stop=b) for a, b in zip(starts, [*starts[1:], seg.stop], strict=True)]


def context_view(ds: Dataset, context_id: str) -> ContextView:
    """The view of one context: materialized messages, per-message tokens, session segments."""
    context = next(c for c in ds.contexts if c.context_id == context_id)
    messages = ds.materialize_context(context_id)
    sessions = {sid: ds.session(sid) for sid in context.session_ids}
    lay = layout(context.session_ids, {sid: s.session for sid, s in sessions.items()}, profile_tokens=0,
                 profile_mode=context.profile_mode, session_dates=context.session_dates)
    head = 1 if context.profile_mode == "once" else 0
    segments, tokens, previous = [], [0] * len(messages), head
    for sid, first in zip(context.session_ids, lay.msg_start, strict=True):
        turns = sessions[sid].turns
        segments.append(Segment(session_id=sid, start=previous, first_turn=first, stop=first + len(turns)))
        for offset, turn in enumerate(turns):
            tokens[first + offset] = turn.n_tokens or message_tokens(turn.content)
        previous = first + len(turns)
    for i in [*range(head), *(j for s in segments for j in range(s.start, s.first_turn))]:
        tokens[i] = message_tokens(messages[i].content)
    return ContextView(messages, tokens, head, segments)


def history_indices(view: ContextView, placement: Placement, query: Query, mode: Mode,
                    settings: HistorySettings) -> list[int]:
    """The message indices (into the context) a call in ``mode`` sends before the question."""
    end = placement.end_index
    if mode == "mcq":
        return list(range(end))
    if mode == "no-context":
        return []
    if mode == "oracle":
        return view.compose(oracle_units(view, end, query))
    if mode == "recent":
        return view.compose(recent_units(view, end, settings.recent_tokens))
    return view.compose(rag_units(view, end, query.question, settings))


def oracle_units(view: ContextView, end: int, query: Query) -> list[Unit]:
    """Every session holding one of the query's evidence turns, cut at ``end`` (none for an abstention)."""
    evidence = {e.session_id for e in query.evidence}
    return [u for u in view.units("session", end) if view.segments[u.segment].session_id in evidence]


def recent_units(view: ContextView, end: int, budget: int) -> list[Unit]:
    """The longest run of whole turns ending at ``end`` whose tokens fit in ``budget``."""
    units, spent = [], 0
    for unit in reversed(view.units("session", end)):
        start = unit.stop
        while start > unit.start and spent + view.tokens[start - 1] <= budget:
            start -= 1
            spent += view.tokens[start]
        if start < unit.stop:
            units.append(unit.model_copy(update={"start": start}))
        if start > unit.start:
            break
    return units


def rag_units(view: ContextView, end: int, question: str, settings: HistorySettings) -> list[Unit]:
    """The ``k`` units BM25 ranks highest for the question text: it never sees the options or the key."""
    units = view.units(settings.granularity, end)
    picked = top_k(terms(question), [view.unit_terms(u) for u in units], settings.k)
    return [units[i] for i in picked]


def history_messages(view: ContextView, indices: list[int]) -> list[ChatMessage]:
    """The messages at ``indices``."""
    return [view.messages[i] for i in indices]


def history_tokens(view: ContextView, indices: list[int]) -> int:
    """Tokens of the messages at ``indices`` under the dataset's token rule."""
    return sum(view.tokens[i] for i in indices)
