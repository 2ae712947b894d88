"""`personagen audit DATASET`: the option-only probe (question and options, never the history) on a published version."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pipeline.cli.common import DatasetArg, OutputsOpt, console, fail
from pipeline.errors import UserError


def audit(
    dataset: DatasetArg,
    outputs: OutputsOpt = Path("outputs"),
    folds: Annotated[int, typer.Option(min=2, help="persona-grouped cross-validation folds")] = 5,
    rounds: Annotated[int, typer.Option(min=1, help="repeats over different persona splits")] = 2,
    max_accuracy: Annotated[float | None, typer.Option(help="exit 1 when the probe's overall accuracy is above this")] = None,
) -> None:
    """Accuracy of a classifier that sees only each question and its options, overall and per type."""
    from pipeline.baselines import chance_accuracy, lexical_overlap_accuracy, longest_option_accuracy
    from pipeline.dataset import load, resolve
    from pipeline.evaluation.probe import run_probe

    try:
        queries = load(resolve(dataset, outputs), tables=["queries"]).queries
    except UserError as exc:
        raise fail(exc) from None
    result = run_probe(queries, folds=folds, rounds=rounds)
    if result.accuracy is None:
        raise fail(f"{dataset}: the probe needs queries of at least 2 personas", code=2)
    table = Table(title=f"option-only probe: {len(queries):,} queries, {result.folds} folds x {rounds} rounds")
    table.add_column("what")
    table.add_column("accuracy", justify="right")
    table.add_row("probe, overall", f"{result.accuracy:.1%}")
    for qtype, acc in result.by_type.items():
        table.add_row(f"probe, {qtype}", f"{acc:.1%}")
    table.add_row("random guess", f"{chance_accuracy(queries):.1%}")
    table.add_row("longest option", f"{longest_option_accuracy(queries):.1%}")
    table.add_row("most words shared with the question", f"{lexical_overlap_accuracy(queries):.1%}")
    console.print(table)
    if max_accuracy is not None and result.accuracy > max_accuracy:
        raise fail(f"{dataset}: the probe answers {result.accuracy:.1%} without the history (> {max_accuracy:.0%})", code=1)
