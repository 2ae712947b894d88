"""How the flow reports progress to whoever started it (the CLI's rich display, or a test)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


# A served run (a deployment, `make serve`) has no display: it logs where it stands this often, so a quiet stretch
# (the embedded model's first persona takes minutes) is never silence.
HEARTBEAT_S = 60.0


@contextmanager
def heartbeat(line: Callable[[], str], log: Callable[[str], None], every: float = HEARTBEAT_S) -> Iterator[None]:
    """Log ``line()`` through ``log`` every ``every`` seconds while the block runs (from a daemon thread)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            try:
                log(line())
            except Exception:  # noqa: BLE001 - a line that cannot be made this minute is tried again the next
                continue

    thread = threading.Thread(target=beat, name="personagen-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
