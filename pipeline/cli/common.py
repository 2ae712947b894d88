"""What every command shares: the consoles, the one-line error, the dataset arguments."""

from __future__ import annotations

import functools
import re
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from pipeline.errors import UserError, redact

console = Console()
err_console = Console(stderr=True)

DatasetArg = Annotated[str, typer.Argument(help="dataset name under --outputs, a dataset folder, or a version folder")]
OutputsOpt = Annotated[Path, typer.Option("--outputs", help="folder holding the datasets")]
BudgetOpt = Annotated[str | None, typer.Option(
    "--budget", help="only contexts of this budget: a token count such as 32k, 128000 or 1M (default: every budget)")]
_BUDGET = re.compile(r"^(\d+(?:\.\d+)?)([kKmM]?)$")


def fail(message: object, code: int = 2) -> typer.Exit:
    """Print one error line (secrets redacted) and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {escape(redact(message))}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so every command stops the same way."""


def _on_sigterm(signum, frame) -> None:
    stopping()
    raise Terminated()


def _on_sigint(signum, frame) -> None:
    stopping()
    raise KeyboardInterrupt()


def _unheard(signum, frame) -> None:
    """A Ctrl-C or SIGTERM while the command already stops (or exits): its clean-up runs to the end, so no
    second KeyboardInterrupt lands in a Prefect log call or an exit hook as a traceback."""


def stopping() -> None:
    """From now on further Ctrl-C and SIGTERM are not heard (main thread only; the clean-up is bounded)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _unheard)
        signal.signal(signal.SIGTERM, _unheard)


def stop_handlers(terminated: Callable = _on_sigterm) -> tuple:
    """Install the handlers: Ctrl-C and SIGTERM (``terminated``) raise once, then are not heard while the
    command stops; returns the previous handlers for :func:`restore_handlers`."""
    return signal.signal(signal.SIGINT, _on_sigint), signal.signal(signal.SIGTERM, terminated)


def restore_handlers(previous: tuple) -> None:
    signal.signal(signal.SIGINT, previous[0])
    signal.signal(signal.SIGTERM, previous[1])


def interruptible(command: Callable) -> Callable:
    """``command`` with SIGTERM raised like Ctrl-C, and either one ending in one line (exit 130 or 143) instead
    of click's "Aborted!" or a silent death; commands that say more about an interruption catch it themselves."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        main = threading.current_thread() is threading.main_thread()
        previous = stop_handlers() if main else None
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt as exc:
            code, what = (143, "terminated (SIGTERM)") if isinstance(exc, Terminated) else (130, "interrupted")
            raise fail(f"{what}; nothing half-written is left (every file is written whole or not at all)",
                       code=code) from None
        finally:
            if main:
                restore_handlers(previous)

    return run


def parse_budget(text: str) -> int:
    """'32k' -> 32000, '1M' -> 1000000, '128000' or '128,000' -> 128000: the one parser of every --budget."""
    match = _BUDGET.match(text.strip().replace(",", "").replace("_", ""))
    if not match:
        raise UserError(f"--budget {text!r}: use a token count such as 32k, 128000 or 1M")
    scale = {"": 1, "k": 1000, "m": 1_000_000}[match.group(2).lower()]
    tokens = round(float(match.group(1)) * scale)
    if tokens < 1:
        raise UserError(f"--budget {text!r}: must be at least 1 token")
    return tokens


def budget_option(text: str | None) -> int | None:
    """A ``BudgetOpt`` value in tokens, or None when the option was not given."""
    return None if text is None else parse_budget(text)
