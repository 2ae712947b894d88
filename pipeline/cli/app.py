"""The ``personagen`` command line: the app and its commands, registered from one module per command group."""

from __future__ import annotations

import typer

from pipeline.cli.audit import audit, audit_score, audit_sheet
from pipeline.cli.common import interruptible, stopping
from pipeline.cli.dataset import export_app, inspect, prune, review
from pipeline.cli.eval import eval_command, report_command
from pipeline.cli.generate import generate
from pipeline.cli.prompts import prompts_app
from pipeline.cli.queries import queries
from pipeline.cli.stages import plan, show, text

app = typer.Typer(help="Build PersonaMem-style benchmarks for LLM personalization and long-term memory.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.command()(interruptible(plan))
app.command()(interruptible(show))
app.add_typer(export_app, name="export")
app.command()(interruptible(inspect))
app.command()(interruptible(audit))
app.command("audit-sheet")(interruptible(audit_sheet))
app.command("audit-score")(interruptible(audit_score))
app.command()(interruptible(prune))
app.command()(interruptible(review))
app.add_typer(prompts_app, name="prompts")
app.command()(interruptible(text))
app.command()(interruptible(generate))
app.command()(interruptible(queries))
app.command("eval")(interruptible(eval_command))
app.command("report")(interruptible(report_command))


def main() -> None:
    """The `personagen` command: once the command has ended (its one line said), Ctrl-C and SIGTERM are not
    heard while the exit hooks run (Prefect's temporary server stopping), so none ends in a traceback."""
    try:
        app()
    finally:
        stopping()


if __name__ == "__main__":
    main()
