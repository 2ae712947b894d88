"""What a context costs: the system messages a history carries (the profile, each session's date) and how its
slots are laid out. A context costs the sum over exactly the messages a model receives: the profile system
message(s) and every turn of every session in it, each under the token rule of :mod:`pipeline.tokens`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime
from functools import lru_cache

from pydantic import BaseModel, Field

from pipeline.errors import UserError
from pipeline.s5_assembly.fit import lme_session_tokens_many
from pipeline.tokens import message_tokens
from schemas.context import ChatMessage, Context, ProfileMode
from schemas.conversation import Session, SessionWithTurns
from schemas.persona import Persona


def date_text(when: date) -> str:
    """The system message that opens a session when contexts carry dates ("as of" questions need them)."""
    return f"Conversation date: {when:%Y-%m-%d}"


def profile_text(persona: Persona) -> str:
    """The system message that introduces the user, PersonaMem's wording."""
    return f"Current user persona: {persona.profile}"


class AssemblyError(UserError):
    """A context cannot be built as configured (budget too small, filler pool too small)."""


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
