"""`personagen plan`, `show` and `text`: the timeline with no model, one persona's tree, the text stages alone."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pipeline.cli.common import console, fail
from pipeline.config import load_config
from pipeline.errors import UserError


def plan(
    n: Annotated[int | None, typer.Option("--n", help="number of personas (default: the profile's)")] = None,
    seed: Annotated[int | None, typer.Option(help="run seed (default: the profile's)")] = None,
    out: Annotated[Path, typer.Option(help="folder to write the plan tables into")] = Path("outputs/plan"),
    profile: Annotated[str, typer.Option(help="profile name or YAML file")] = "default",
    personahub: Annotated[Path | None, typer.Option(help="PersonaHub JSONL of seed personas")] = None,
) -> None:
    """Seed personas and simulate their timelines (no model); write Parquet and print statistics."""
    from pipeline.dataset import check_tables_folder, write_tables
    from pipeline.run.plan import build_plan, plan_stats

    started = time.perf_counter()
    try:
        check_tables_folder(out)
        personas = {"source": "personahub", "personahub_path": str(personahub)} if personahub else None
        config = load_config(profile, n_personas=n, seed=seed, personas=personas)
        result = build_plan(config)
    except UserError as exc:
        raise fail(str(exc)) from None
    tables = {
        "personas": result.personas,
        "preferences": [p for t in result.timelines for p in t.preferences],
        "events": [e for t in result.timelines for e in t.events],
        "event_edges": [e for t in result.timelines for e in t.edges],
    }
    try:
        counts = write_tables(out, tables)
    except UserError as exc:
        raise fail(str(exc)) from None
    elapsed = time.perf_counter() - started
    _print_stats(plan_stats(result.timelines, config.topics), counts, out, elapsed)


def _print_stats(stats: dict, counts: dict[str, int], out: Path, elapsed: float) -> None:
    table = Table(title=f"plan: {stats['personas']} personas in {elapsed:.2f} s -> {out}")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    for name, rows in counts.items():
        table.add_row(f"rows in {name}", str(rows))
    for kind, count in sorted(stats["events"].items()):
        table.add_row(f"{kind} events", str(count))
    table.add_row("life events changing 2+ topics", f"{stats['cross_topic_life_events']} "
                  f"({stats['cross_topic_fraction']:.1%} of {stats['changing_life_events']} that change any)")
    (event, item, stance), count = stats["top_pair"]
    table.add_row("most frequent (event -> change) pair", f"{count} ({stats['top_pair_share']:.1%}): {event} -> "
                  f"{'started to like' if stance == 'like' else 'went off'} {item}" if count else "none")
    table.add_row("preference chain lengths", ", ".join(f"{k}: {v}" for k, v in stats["chain_lengths"].items()))
    table.add_row("longest causal path (events)", str(stats["max_causal_depth"]))
    for topic, count in stats["updates_per_topic"].items():
        table.add_row(f"updates in {topic}", str(count))
    console.print(table)


def show(
    persona_id: Annotated[str, typer.Argument(help="a persona_id from the plan")],
    plan_dir: Annotated[Path, typer.Option("--plan", help="folder written by `personagen plan`, or a dataset version")] = Path("outputs/plan"),
    session: Annotated[str | None, typer.Option("--session", help="print this session's turns (a dataset version)")] = None,
) -> None:
    """Print one persona's timeline as a dated tree: what changed, why (reasons, narratives), caused by what; from
    a dataset version, its sessions too, or one session's turns."""
    from pipeline.reporting.show import load_persona_timeline, sessions_tree, timeline_tree

    try:
        persona, timeline = load_persona_timeline(plan_dir, persona_id)
        talks = sessions_tree(plan_dir, persona_id, session)
    except (UserError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None
    if session is None:
        console.print(timeline_tree(persona, timeline))
    if talks is not None:
        console.print(talks)


def text(
    n: Annotated[int | None, typer.Option("--n", help="number of personas (default: the profile's)")] = None,
    seed: Annotated[int | None, typer.Option(help="run seed (default: the profile's)")] = None,
    out: Annotated[Path, typer.Option(help="folder to write the tables into")] = Path("outputs/text"),
    profile: Annotated[str, typer.Option(help="profile name or YAML file")] = "default",
    llm: Annotated[str | None, typer.Option("--llm", help="fake | local[:path.gguf] | openai:<model>")] = None,
    cache: Annotated[Path, typer.Option(help="LLM response cache")] = Path("outputs/.cache/llm.sqlite"),
) -> None:
    """Run the text stages (profile, timeline, narratives, sessions, filler) and write their tables."""
    from pipeline.dataset import check_tables_folder
    from pipeline.run.text import run_text_stages

    try:
        check_tables_folder(out)  # before any model call
        config = load_config(profile, n_personas=n, seed=seed)
        report = run_text_stages(config, llm=llm, cache=cache, out=out)
    except UserError as exc:
        raise fail(str(exc)) from None
    console.print(report)
