"""Run the text stages for a whole config without Prefect (the flow in flows/ does the same per task)."""

from __future__ import annotations

import time
from pathlib import Path

from rich.table import Table

from pipeline.dataset import write_tables
from pipeline.llm import LLM, LLMError
from pipeline.run.persona_text import PersonaText, build_persona_text
from pipeline.s1_personas.sample_personas import sample_personas
from pipeline.s3_text.filler import filter_filler, write_filler_pool
from pipeline.s3_text.write_sessions import SessionStats
from pipeline.tokens import count_tokens
from schemas.config import RunConfig
from schemas.llm import LLMSettings


def run_text_stages(config: RunConfig, *, llm: str | None, cache: Path, out: Path) -> Table:
    """All personas' text stages plus the filler pool; writes the tables and returns a report table."""
    gateway = LLM(LLMSettings(llm=llm, cache_path=cache))
    try:
        gateway.preflight()
    except LLMError as exc:
        from pipeline.errors import UserError

        raise UserError(str(exc)) from exc
    started = time.perf_counter()
    seeds = sample_personas(config.n_personas, run_seed=config.seed, settings=config.personas)
    results = [build_persona_text(seed, config=config, llm=gateway) for seed in seeds]
    items = {p.item for r in results for p in r.timeline.preferences}
    filler, dropped = filter_filler(write_filler_pool(llm=gateway, config=config), items)
    write_tables(out, text_tables(results, filler))
    return text_report(results, gateway, filler_kept=len(filler), filler_dropped=dropped,
                       seconds=time.perf_counter() - started)


def text_tables(results: list[PersonaText], filler) -> dict[str, list]:
    sessions = [s for r in results for s in r.sessions] + list(filler)
    return {
        "personas": [r.persona for r in results],
        "preferences": [p for r in results for p in r.timeline.preferences],
        "events": [e for r in results for e in r.timeline.events],
        "event_edges": [e for r in results for e in r.timeline.edges],
        "sessions": [s.session for s in sessions],
        "turns": [t for s in sessions for t in s.turns],
    }


def text_report(results: list[PersonaText], llm: LLM, *, filler_kept: int, filler_dropped: int, seconds: float) -> Table:
    """Calls and generated tokens per persona, fallback rate, and generated tokens per final text token."""
    usage = llm.usage_summary().total
    stats = SessionStats()
    for r in results:
        for name in ("sessions", "beats", "regenerated", "fallback_beats", "small_talk_kept", "small_talk_dropped"):
            setattr(stats, name, getattr(stats, name) + getattr(r.stats, name))
    final = sum(count_tokens(t.content) for r in results for s in r.sessions for t in s.turns)
    by_stage = llm.usage_summary().by_stage
    written = by_stage["write_sessions"].output_tokens if "write_sessions" in by_stage else 0
    n = max(1, len(results))
    table = Table(title=f"text stages: {len(results)} personas in {seconds:.1f} s with {llm.name}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in [
        ("LLM calls per persona", f"{usage.calls / n:.1f}"),
        ("model calls per persona (cache misses)", f"{usage.backend_calls / n:.1f}"),
        ("generated tokens per persona", f"{usage.output_tokens / n:.0f}"),
        ("write_sessions generated tokens per token of session text", f"{written / max(1, final):.2f}"),
        ("all generated tokens per token of session text", f"{usage.output_tokens / max(1, final):.2f}"),
        ("sessions", str(stats.sessions)),
        ("beats", str(stats.beats)),
        ("beats regenerated", str(stats.regenerated)),
        ("beat fallback rate", f"{stats.fallback_beats / max(1, stats.beats):.1%}"),
        ("small-talk exchanges kept / dropped", f"{stats.small_talk_kept} / {stats.small_talk_dropped}"),
        ("filler sessions kept / dropped", f"{filler_kept} / {filler_dropped}"),
    ]:
        table.add_row(name, value)
    return table
