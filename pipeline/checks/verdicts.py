"""The stages' verdicts on model drafts, for a listener: `personagen prompts try` shows what the checks said.

A stage calls ``heard(draft, problem)`` where it decides on a draft (or on a part of one: an exchange of a
session); with nobody listening it only returns ``problem``. Listening is for one command at a time in one
process: a module-level list, locked, since stages decide on the gateway's event-loop thread as well as on the
caller's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_heard: list[tuple[object, str | None]] | None = None


def heard(draft: object, problem: str | None) -> str | None:
    """Tell a listener the stage's verdict on ``draft`` (None: it passed every check); returns ``problem``."""
    if _heard is not None and draft is not None:
        with _lock:
            if _heard is not None:
                _heard.append((draft, problem))
    return problem


@contextmanager
def listening() -> Iterator[list[tuple[object, str | None]]]:
    """Collect every verdict the stages give inside the block, as (draft, problem) in the order given."""
    global _heard
    with _lock:
        _heard = []
        collected = _heard
    try:
        yield collected
    finally:
        with _lock:
            _heard = None
