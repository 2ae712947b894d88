"""What every command shares: the consoles, the one-line error, the dataset arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console()
err_console = Console(stderr=True)

DatasetArg = Annotated[str, typer.Argument(help="dataset name under --outputs, a dataset folder, or a version folder")]
OutputsOpt = Annotated[Path, typer.Option("--outputs", help="folder holding the datasets")]


def fail(message: object, code: int = 2) -> typer.Exit:
    """Print one error line and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)
