"""The token rule every stage shares: what one chat message costs, and what one session costs.

A message costs ``count_tokens(content) + MESSAGE_OVERHEAD`` (o200k_base tokens, plus a fixed
allowance for the role and chat formatting). A context costs the sum over exactly the messages a
model receives: the profile system message(s) and every turn of every session in it. The text
stage fills ``Turn.n_tokens`` / ``Session.n_tokens`` with :func:`message_tokens`; assembly reuses
those numbers and counts a session only when they are missing, so each session is counted once.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from datetime import date

from pipeline.tokens import count_tokens, encoding
from schemas.conversation import SessionWithTurns
from schemas.persona import Persona

MESSAGE_OVERHEAD = 4


def message_tokens(content: str) -> int:
    """Tokens one chat message costs: its content plus the per-message overhead."""
    return count_tokens(content) + MESSAGE_OVERHEAD


def message_tokens_many(contents: list[str]) -> list[int]:
    """:func:`message_tokens` of many messages, through tiktoken's ``encode_ordinary`` (the same counts:
    special-token text is ordinary text in both; about twice as fast on short messages)."""
    encode = encoding().encode_ordinary
    return [len(encode(text)) + MESSAGE_OVERHEAD for text in contents]


def date_text(when: date) -> str:
    """The system message that opens a session when contexts carry dates ("as of" questions need them)."""
    return f"Conversation date: {when:%Y-%m-%d}"


def profile_text(persona: Persona) -> str:
    """The system message that introduces the user, PersonaMem's wording."""
    return f"Current user persona: {persona.profile}"


def is_counted(swt: SessionWithTurns) -> bool:
    """True when every turn carries its token count and the session total agrees."""
    turns = swt.turns
    return all(t.n_tokens > 0 for t in turns) and swt.session.n_tokens == sum(t.n_tokens for t in turns)


def with_token_counts(swt: SessionWithTurns) -> SessionWithTurns:
    """The session with ``n_tokens`` filled on every turn and on the session (counted at most once)."""
    if is_counted(swt) and swt.session.n_turns == len(swt.turns):
        return swt
    turns = [t.model_copy(update={"n_tokens": message_tokens(t.content)}) for t in swt.turns]
    session = swt.session.model_copy(update={"n_tokens": sum(t.n_tokens for t in turns), "n_turns": len(turns)})
    return SessionWithTurns.model_construct(session=session, turns=turns)


def count_sessions(sessions: list[SessionWithTurns]) -> list[SessionWithTurns]:
    """Fill the token counts of the sessions not yet counted, in place, and return the sessions.

    ``n_tokens`` is a cache derived from ``content`` (0 = not counted), so filling it in place is safe;
    it avoids copying every turn of a large run, which would cost as much as the tokenizer itself.
    """
    todo = [swt for swt in sessions if not is_counted(swt) or swt.session.n_turns != len(swt.turns)]
    with _paused_gc():
        counts = message_tokens_many([t.content for swt in todo for t in swt.turns])
    it = iter(counts)
    for swt in todo:
        for turn in swt.turns:
            turn.n_tokens = next(it)
        swt.session.n_tokens = sum(t.n_tokens for t in swt.turns)
        swt.session.n_turns = len(swt.turns)
    return list(sessions)


@contextmanager
def _paused_gc():
    """Pause the cycle collector while allocating many acyclic objects: with a large heap, its full
    passes otherwise cost as much as the tokenizer."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
