"""Who hears about calls: listeners told of every finished call (a live progress display) and of long waits (a
429's Retry-After); with no notice listener a notice goes to stderr."""

from __future__ import annotations

import sys
from collections.abc import Callable

from schemas.llm import TokenCount

# Called with (stage, count) as each call finishes, cached or not, from whichever thread ran it: a live
# progress display listens here (see `listen`).
_LISTENERS: list[Callable[[str, TokenCount], None]] = []


# Called with one line when a call waits long (a 429's Retry-After): the CLI's display shows it above its
# bars; with no listener it goes to stderr.
_NOTICES: list[Callable[[str], None]] = []


def notice(text: str) -> None:
    """Say ``text`` (one line) to whoever watches: the notice listeners, else stderr."""
    if _NOTICES:
        for listener in list(_NOTICES):
            listener(text)
    else:
        print(text, file=sys.stderr, flush=True)


def listen_notices(listener: Callable[[str], None]) -> Callable[[], None]:
    """Send the gateway's notices (long waits) to ``listener``; returns the function that stops it."""
    _NOTICES.append(listener)
    return lambda: _NOTICES.remove(listener) if listener in _NOTICES else None


def listen(listener: Callable[[str, TokenCount], None]) -> Callable[[], None]:
    """Call ``listener(stage, count)`` for every call any gateway in this process finishes; returns the
    function that stops it. Listeners must be quick and thread-safe (calls finish on the gateway loop)."""
    _LISTENERS.append(listener)
    return lambda: _LISTENERS.remove(listener) if listener in _LISTENERS else None


def finished(stage: str, count: TokenCount) -> None:
    """Tell every call listener that a call of ``stage`` finished with ``count``."""
    for listener in list(_LISTENERS):
        listener(stage, count)
