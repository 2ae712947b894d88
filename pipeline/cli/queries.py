"""`personagen queries`: the text stages plus generate_queries for a config, tables written, and a
report of what the queries cost and how honest they are (gates, fallbacks, no-context baselines)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pipeline.baselines import baseline_report
from pipeline.cli.common import console, fail
from pipeline.config import load_config
from pipeline.errors import UserError
from pipeline.llm import LLM, LLMError
from pipeline.s4_queries.generate_queries import QueryStats, gate_report, generate_queries
from schemas.config import RunConfig
from schemas.llm import LLMSettings
from schemas.query import Query


def queries(
    n: Annotated[int | None, typer.Option("--n", help="number of personas (default: the profile's)")] = None,
    seed: Annotated[int | None, typer.Option(help="run seed (default: the profile's)")] = None,
    out: Annotated[Path, typer.Option(help="folder to write the tables into")] = Path("outputs/queries"),
    profile: Annotated[str, typer.Option(help="profile name or YAML file")] = "default",
    llm: Annotated[str | None, typer.Option("--llm", help="fake | local[:path.gguf] | openai:<model>")] = None,
    judge: Annotated[str | None, typer.Option("--judge", help="no-context judge backend (off by default)")] = None,
    cache: Annotated[Path, typer.Option(help="LLM response cache")] = Path("outputs/.cache/llm.sqlite"),
) -> None:
    """Run the text stages and generate the queries; write the tables and print a report."""

    from pipeline.dataset import check_tables_folder

    try:
        check_tables_folder(out)  # before any model call
        config = load_config(profile, n_personas=n, seed=seed)
        report = run_queries(config, llm=llm, judge=judge, cache=cache, out=out)
    except UserError as exc:
        raise fail(str(exc)) from None
    console.print(report)


def _gateway(backend: str | None, cache: Path) -> LLM:
    gateway = LLM(LLMSettings(llm=backend, cache_path=cache))
    try:
        gateway.preflight()
    except LLMError as exc:
        raise UserError(str(exc)) from exc
    return gateway


def run_queries(config: RunConfig, *, llm: str | None, judge: str | None, cache: Path, out: Path) -> Table:
    """All personas through the text stages and generate_queries; the tables written to ``out``."""
    from pipeline.dataset import write_tables
    from pipeline.run.persona_text import build_persona_text
    from pipeline.run.text import text_tables
    from pipeline.s1_personas.sample_personas import sample_personas
    from pipeline.s3_text.filler import filter_filler, write_filler_pool

    gateway = _gateway(llm, cache)
    judge_gateway = _gateway(judge, cache) if judge else None
    started = time.perf_counter()
    seeds = sample_personas(config.n_personas, run_seed=config.seed, settings=config.personas)
    results = [build_persona_text(seed, config=config, llm=gateway) for seed in seeds]
    total, kept = QueryStats(), []
    for r in results:
        found, stats = generate_queries(r.persona, r.timeline, r.sessions, llm=gateway, config=config,
                                        judge=judge_gateway, inventory=r.inventory)
        kept += found
        total.merge(stats)
    items = {p.item for r in results for p in r.timeline.preferences}
    filler, _ = filter_filler(write_filler_pool(llm=gateway, config=config), items)
    write_tables(out, {**text_tables(results, filler), "queries": kept})
    title = f"queries: {len(results)} personas in {time.perf_counter() - started:.1f} s with {gateway.name} -> {out}"
    return query_report(kept, total, gateway, title=title)


def query_report(kept: list[Query], stats: QueryStats, llm: LLM, *, title: str) -> Table:
    """Counts, calls per kept query, drop rate per gate, fallback rate, baselines, correct positions."""
    usage = llm.usage_summary().by_stage.get("generate_queries")
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [("queries planned / kept", f"{stats.planned} / {stats.kept}")]
    rows += [(f"kept {t}", str(c)) for t, c in sorted(stats.by_type.items())]
    rows += [(name, f"{value:.2f}" if name.startswith("LLM") else f"{value:.1%}") for name, value in gate_report(stats).items()]
    if usage is not None:
        rows.append(("model calls per kept query (cache misses)", f"{usage.backend_calls / max(1, stats.kept):.2f}"))
    rows.append(("judge calls", str(stats.judge_calls)))
    rows += [(f"gate failures ({g})", str(n)) for g, n in sorted(stats.gate_failures.items())]
    rows += [(f"baseline: {name}", f"{value:.1%}") for name, value in baseline_report(kept).items()]
    positions = Counter(q.correct_index for q in kept)
    rows.append(("correct positions", ", ".join(f"{i + 1}: {positions[i]}" for i in sorted(positions))))
    for name, value in rows:
        table.add_row(name, value)
    return table

