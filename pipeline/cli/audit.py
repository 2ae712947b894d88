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


def audit_sheet(
    dataset: DatasetArg,
    out: Annotated[Path, typer.Option("--out", help="folder for sheet.csv and the item pages (new, or an earlier sheet's)")],
    n: Annotated[int, typer.Option("--n", min=1, help="how many queries to draw")] = 100,
    seed: Annotated[int, typer.Option(help="the draw's seed (the same seed draws the same items)")] = 0,
    outputs: OutputsOpt = Path("outputs"),
) -> None:
    """Draw a stratified sample of queries (by type, voicing and budget) as a rater's form: sheet.csv to fill
    in and a page per item with the evidence, the message and the replies in a fresh order, the key folded."""
    from pipeline.dataset import load, resolve
    from pipeline.dataset.files import write_pages
    from pipeline.reporting.audit_sheet import draw, render_sheet

    try:
        ds = load(resolve(dataset, outputs))
        if not ds.queries:
            raise UserError(f"{ds.path}: the version has no queries to audit")
        items = draw(ds, n, seed)
        written = write_pages(out, render_sheet(ds, items))
    except UserError as exc:
        raise fail(exc) from None
    short = f" (the version has {len(ds.queries)} queries)" if len(items) < n else ""
    console.print(f"audit sheet: {written / 'index.html'}  ({len(items)} items{short}); each rater fills in a copy "
                  f"of {written / 'sheet.csv'}", highlight=False)


def audit_score(
    dataset: DatasetArg,
    sheets: Annotated[list[Path], typer.Argument(help="filled sheets, one CSV per rater (the file name names the rater)")],
    record: Annotated[bool, typer.Option("--record/--no-record",
                                         help="publish the version again with the audit on its card and manifest")] = True,
    outputs: OutputsOpt = Path("outputs"),
) -> None:
    """Score filled audit sheets: per question the rate and its 95% interval, the raters' agreement (kappa) and
    the estimated ceiling; recorded as a new version of the same tables whose card shows the audit."""
    from pipeline.dataset import load, resolve
    from pipeline.dataset.audited import publish_audit
    from pipeline.dataset.card_audit import QUESTIONS
    from pipeline.reporting.audit_score import read_sheets, score
    from schemas.tables import TABLES

    try:
        ds = load(resolve(dataset, outputs))
        audit = score(read_sheets(sheets, ds))
        target = publish_audit(ds.path, audit, {name: getattr(ds, name) for name in TABLES}) if record else None
    except UserError as exc:
        raise fail(exc) from None
    table = Table(title=f"human audit of {ds.manifest.dataset} {ds.manifest.version}: {audit['items']} items, "
                        f"{audit['raters']} raters")
    table.add_column("question")
    table.add_column("yes [95% interval]", justify="right", no_wrap=True)
    table.add_column("kappa [95% interval]", justify="right", no_wrap=True)
    for key, label in QUESTIONS.items():
        if (q := audit["questions"].get(key)) is not None:
            kappa = "-" if q.get("kappa") is None else f"{q['kappa']:.2f} [{q['kappa_low']:.2f}, {q['kappa_high']:.2f}]"
            table.add_row(label, f"{q['rate']:.1%} [{100 * q['low']:.0f}-{100 * q['high']:.0f}]", kappa)
    console.print(table)
    c = audit["ceiling"]
    console.print(f"estimated ceiling (marked answer judged right): {c['rate']:.1%} [{100 * c['low']:.0f}-"
                  f"{100 * c['high']:.0f}] over {c['items']} items", highlight=False)
    for name, r in audit["per_rater"].items():
        mine = [f"{label} {x['rate']:.1%} [{100 * x['low']:.0f}-{100 * x['high']:.0f}]" for key, label in
                (("choice_agrees_with_key", "own choice is the key"), ("key_right", "marked answer right"))
                if (x := r.get(key)) is not None]
        console.print(f"rater {name}: {r['items']} items; " + "; ".join(mine), highlight=False)
    if target is not None:
        console.print(f"recorded: {target} (the audit of {ds.manifest.version}, same tables; card and manifest "
                      "show it)", highlight=False)
