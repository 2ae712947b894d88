"""The token rule every stage shares: what one chat message costs, and what one session costs.

A message costs ``count_tokens(content) + MESSAGE_OVERHEAD`` (o200k_base tokens, plus a fixed
allowance for the role and chat formatting). A context costs the sum over exactly the messages a
model receives: the profile system message(s) and every turn of every session in it. The text
stage fills ``Turn.n_tokens`` / ``Session.n_tokens`` with :func:`message_tokens`; assembly reuses
those numbers and counts a session only when they are missing, so each session is counted once.
"""

from __future__ import annotations

from pipeline.tokens import count_tokens
from schemas.conversation import SessionWithTurns
from schemas.persona import Persona

MESSAGE_OVERHEAD = 4


def message_tokens(content: str) -> int:
    """Tokens one chat message costs: its content plus the per-message overhead."""
    return count_tokens(content) + MESSAGE_OVERHEAD


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
