"""`personagen export personamem|longmemeval|jsonl`, `personagen inspect`, `personagen prune`: read published datasets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.common import BudgetOpt, DatasetArg, OutputsOpt, budget_option, console, fail, interruptible
from pipeline.errors import UserError

export_app = typer.Typer(help="Export a dataset version in formats other tools read unchanged.", no_args_is_help=True)


@export_app.command("personamem")
@interruptible
def export_personamem(
    dataset: DatasetArg,
    out: Annotated[Path, typer.Option("--out", help="folder for questions_<size>.csv and shared_contexts_<size>.jsonl")],
    outputs: OutputsOpt = Path("outputs"),
) -> None:
    """Write PersonaMem's released format, one CSV + JSONL pair per budget."""
    from pipeline.dataset import load, resolve
    from pipeline.dataset.export import export_personamem as run

    try:
        files = run(load(resolve(dataset, outputs)), out)
    except UserError as exc:
        raise fail(exc) from None
    for f in files:
        console.print(f"{f.path}" + ("" if f.path.suffix == ".md" else f"  ({f.rows:,} rows)"))


@export_app.command("longmemeval")
@interruptible
def export_longmemeval(
    dataset: DatasetArg,
    out: Annotated[Path, typer.Option("--out", help="folder for longmemeval_<size>.json")],
    budget: BudgetOpt = None,
    outputs: OutputsOpt = Path("outputs"),
) -> None:
    """Write LongMemEval's JSON (longmemeval_s-style), one file per budget, one entry per placed query."""
    from pipeline.dataset import load, resolve
    from pipeline.dataset.export_longmemeval import export_longmemeval as run

    try:
        files = run(load(resolve(dataset, outputs)), out, budget=budget_option(budget))
    except UserError as exc:
        raise fail(exc) from None
    for f in files:
        console.print(f"{f.path}" + ("" if f.path.suffix == ".md" else f"  ({f.rows:,} entries)"))


@export_app.command("jsonl")
@interruptible
def export_jsonl(
    dataset: DatasetArg,
    out: Annotated[Path, typer.Option("--out", help="the JSONL file to write")],
    budget: BudgetOpt = None,
    outputs: OutputsOpt = Path("outputs"),
) -> None:
    """One self-contained record per (query, context), with the history before the question."""
    from pipeline.dataset import load, resolve
    from pipeline.dataset.export import export_jsonl as run

    try:
        written = run(load(resolve(dataset, outputs)), out, budget=budget_option(budget))
    except UserError as exc:
        raise fail(exc) from None
    console.print(f"{written.path}  ({written.rows:,} records)")


def inspect(dataset: DatasetArg, outputs: OutputsOpt = Path("outputs")) -> None:
    """Counts, budgets and token histograms of a dataset version (after checking every file's checksum)."""
    from pipeline.dataset import load, resolve, verify
    from pipeline.reporting.inspect_dataset import TABLES_NEEDED, render, summarize

    try:
        version = resolve(dataset, outputs)
        verify(version)
        ds = load(version, tables=TABLES_NEEDED)
    except UserError as exc:
        raise fail(exc) from None
    console.print(render(summarize(ds)))


def prune(
    dataset: DatasetArg,
    keep: Annotated[int, typer.Option("--keep", help="how many of the newest versions to keep")],
    outputs: OutputsOpt = Path("outputs"),
) -> None:
    """Remove old complete versions, keeping the newest K (and whatever `latest` names)."""
    from pipeline.dataset import prune as run
    from pipeline.dataset import resolve

    kept: list[str] = []
    try:
        removed = run(resolve(dataset, outputs).parent, keep, kept=kept)
    except UserError as exc:
        raise fail(exc) from None
    for line in kept:
        console.print(f"kept {line}: not provably a version personagen published", highlight=False)
    console.print(f"removed: {', '.join(removed) or 'nothing'}")


def review(
    dataset: DatasetArg,
    out: Annotated[Path, typer.Option("--out", help="folder for the pages (new, or one an earlier review wrote)")],
    persona: Annotated[str | None, typer.Option("--persona", help="only this persona's page (a persona_id)")] = None,
    outputs: OutputsOpt = Path("outputs"),
) -> None:
    """Write a static HTML page per persona (profile, timeline, preferences, sessions, queries) and an index."""
    from pipeline.dataset import load, resolve
    from pipeline.dataset.files import write_pages
    from pipeline.reporting.review import render_review

    try:
        ds = load(resolve(dataset, outputs))
        try:
            pages = render_review(ds, persona)
        except ValueError as exc:
            raise UserError(f"--persona {persona}: {exc}") from None
        written = write_pages(out, pages)
    except UserError as exc:
        raise fail(exc) from None
    console.print(f"review: {written / 'index.html'}  ({len(pages) - 1} persona pages)", highlight=False)
