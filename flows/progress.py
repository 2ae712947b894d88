"""How the flow reports progress to whoever started it (the CLI's rich display, or a test)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol


class Reporter(Protocol):
    """Receives progress from the flow; set it with ``REPORTER.set(...)`` around the flow call."""

    def persona_done(self, index: int, from_checkpoint: bool, failed: bool) -> None: ...
    def stage(self, name: str) -> None: ...
    def notice(self, text: str) -> None: ...


REPORTER: ContextVar[Reporter | None] = ContextVar("personagen_reporter", default=None)


def current_reporter() -> Reporter | None:
    """The reporter set by the caller, if any (a function, so the flow's code pickles by reference)."""
    return REPORTER.get()
