"""`personagen eval` (a model on a dataset version) and `personagen report` (a visual dataset report)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markdown import Markdown
from rich.progress import Progress

from pipeline.cli.common import DatasetArg, OutputsOpt, console, err_console, fail, parse_budget
from pipeline.errors import UserError


def eval_command(
    dataset: DatasetArg,
    llm: Annotated[str | None, typer.Option("--llm", help="openai:<model> | local[:path.gguf] | fake[?answer=a]")] = None,
    budget: Annotated[str | None, typer.Option(help="only contexts of this budget, e.g. 32k (default: all)")] = None,
    limit: Annotated[int | None, typer.Option(help="at most N placements, spread over the budgets")] = None,
    mode: Annotated[str, typer.Option(help="mcq (with history) or no-context (the leakage baseline)")] = "mcq",
    window: Annotated[int | None, typer.Option(help="model context window in tokens (default per backend)")] = None,
    name: Annotated[str | None, typer.Option(help="run folder under <version>/evals/ (default: mode-model)")] = None,
    max_tokens: Annotated[int, typer.Option(help="answer token budget")] = 512,
    temperature: Annotated[float, typer.Option(help="sampling temperature")] = 0.0,
    concurrency: Annotated[int, typer.Option(help="requests in flight")] = 8,
    cache: Annotated[Path | None, typer.Option(help="LLM response cache [default: OUTPUTS/.cache/llm.sqlite]")] = None,
    outputs: OutputsOpt = Path("outputs"),
) -> None:
    """Ask a model every placed query (PersonaMem's multiple-choice protocol); write <version>/evals/<name>/."""
    from pipeline.dataset import resolve
    from pipeline.evaluation.evaluate import EvalSettings, run_eval

    try:
        if mode not in ("mcq", "no-context"):
            raise UserError(f"--mode {mode!r}: use mcq or no-context")
        settings = EvalSettings(mode=mode, budget=parse_budget(budget) if budget else None, limit=limit, window=window)
        gateway = _gateway(llm, window=window, max_tokens=max_tokens, temperature=temperature,
                           concurrency=concurrency, cache=cache or outputs / ".cache" / "llm.sqlite")
        version = resolve(dataset, outputs)
        with Progress(console=err_console, transient=True) as bar:
            task = bar.add_task("evaluating", total=None)
            run = run_eval(version, llm=gateway, settings=settings, name=name,
                           progress=lambda done, total: bar.update(task, completed=done, total=total))
    except UserError as exc:
        raise fail(exc) from None
    console.print(Markdown(run.markdown))
    console.print(f"results: {run.path}")


def _gateway(llm: str | None, *, window: int | None, max_tokens: int, temperature: float, concurrency: int,
             cache: Path):
    """The gateway for an eval; the embedded model's n_ctx follows --window so the window is real."""
    from pipeline.llm import LLM
    from pipeline.llm.factory import resolve_backend_string
    from schemas.llm import LLMSettings

    values = {"llm": llm, "max_tokens": max_tokens, "temperature": temperature, "max_concurrency": concurrency,
              "cache_path": cache}
    if window and resolve_backend_string(LLMSettings(llm=llm)).startswith("local"):
        values["n_ctx"] = max(window, 256)
    gateway = LLM(LLMSettings(**values))
    gateway.preflight()
    return gateway


def report_command(dataset: DatasetArg, outputs: OutputsOpt = Path("outputs")) -> None:
    """Write <version>/report/report.html (self-contained) and its PNG plots."""
    from pipeline.dataset import resolve
    from pipeline.reporting.report import build_report

    try:
        written = build_report(resolve(dataset, outputs))
    except UserError as exc:
        raise fail(exc) from None
    console.print(f"report: {written.html}  ({len(written.images)} plots)")
