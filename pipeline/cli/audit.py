"""`personagen audit DATASET`: the option-only probes (question and options, never the history) on a published version."""

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
    max_accuracy: Annotated[float | None, typer.Option(help="exit 1 when a probe's overall accuracy is above this")] = None,
) -> None:
    """Accuracy of classifiers that see only each question and its options (one option at a time, and
    each option's relations to the others), overall and per type, with 95% intervals."""
    from pipeline.baselines import chance_accuracy, lexical_overlap_accuracy, longest_option_accuracy
    from pipeline.dataset import load, resolve
    from pipeline.s4_queries.probe import run_probes

    try:
        queries = load(resolve(dataset, outputs), tables=["queries"]).queries
    except UserError as exc:
        raise fail(exc) from None
    results = run_probes(queries, folds=folds, rounds=rounds)
    if results[0].accuracy is None:
        raise fail(f"{dataset}: the probe needs queries of at least 2 personas", code=2)
    overall = Table(title=f"option-only probes, overall: {len(queries):,} queries, {results[0].folds} folds x {rounds} rounds")
    overall.add_column("probe")
    overall.add_column("accuracy [95% interval]", justify="right", no_wrap=True)
    for r in results:
        overall.add_row(r.name, _cell(r.accuracy, r.interval()))
    console.print(overall)
    table = Table(title="per type (accuracy)")  # one column per probe: narrow enough for an 80-column terminal
    table.add_column("type")
    table.add_column("queries", justify="right")
    for r in results:
        table.add_column(r.name, justify="right")
    for qtype in results[0].by_type:
        table.add_row(qtype.split("_")[0], f"{results[0].n_by_type.get(qtype, 0):,}",
                      *(f"{r.by_type[qtype]:.1%}" if qtype in r.by_type else "-" for r in results))
    console.print(table)
    baselines = Table(title="no-context baselines")
    baselines.add_column("what")
    baselines.add_column("accuracy", justify="right")
    baselines.add_row("random guess", f"{chance_accuracy(queries):.1%}")
    baselines.add_row("longest option", f"{longest_option_accuracy(queries):.1%}")
    baselines.add_row("most words shared with the question", f"{lexical_overlap_accuracy(queries):.1%}")
    console.print(baselines)
    worst = max(results, key=lambda r: r.accuracy or 0.0)
    if max_accuracy is not None and worst.accuracy > max_accuracy:
        raise fail(f"{dataset}: the {worst.name} probe answers {worst.accuracy:.1%} without the history "
                   f"(> {max_accuracy:.0%})", code=1)


def _cell(accuracy: float | None, interval: tuple[float, float] | None) -> str:
    if accuracy is None or interval is None:
        return "-"
    return f"{accuracy:.1%} [{100 * interval[0]:.0f}-{100 * interval[1]:.0f}]"
