"""The ``personagen`` command line: the app and its commands, registered from one module per command group."""

from __future__ import annotations

import typer

from pipeline.cli.audit import audit
from pipeline.cli.dataset import export_app, inspect, prune
from pipeline.cli.eval import eval_command, report_command
from pipeline.cli.generate import generate
from pipeline.cli.prompts import prompts_app
from pipeline.cli.queries import queries
from pipeline.cli.stages import plan, show, text

app = typer.Typer(help="Build PersonaMem-style benchmarks for LLM personalization and long-term memory.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.command()(plan)
app.command()(show)
app.add_typer(export_app, name="export")
app.command()(inspect)
app.command()(audit)
app.command()(prune)
app.add_typer(prompts_app, name="prompts")
app.command()(text)
app.command()(generate)
app.command()(queries)
app.command("eval")(eval_command)
app.command("report")(report_command)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
