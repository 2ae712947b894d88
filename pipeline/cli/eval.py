"""`personagen eval` (a model on a dataset version) and `personagen report` (a visual dataset report)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markdown import Markdown
from rich.progress import MofNCompleteColumn, Progress

from pipeline.cli.common import BudgetOpt, DatasetArg, OutputsOpt, budget_option, console, err_console, fail
from pipeline.errors import UserError

MODES = ("mcq", "no-context", "oracle", "recent", "rag")


def eval_command(
    dataset: DatasetArg,
    llm: Annotated[str | None, typer.Option("--llm", help="openai:<model> | local[:path.gguf] | fake[?answer=a]")] = None,
    budget: BudgetOpt = None,
    limit: Annotated[int | None, typer.Option(help="at most N placements, spread over the budgets")] = None,
    mode: Annotated[list[str] | None, typer.Option(
        help="history sent before the question: mcq (all of it), no-context, oracle (the evidence sessions), "
             "recent (the last --recent-tokens), rag (--k retrieved for the question); repeat with --suite")] = None,
    suite: Annotated[bool, typer.Option("--suite", help="model-free references and every mode (or the --mode "
                                                        "given) in one table, with the memory gap")] = False,
    answer: Annotated[str, typer.Option(help="choice (lettered options) or open (no options; --judge grades)")] = "choice",
    judge: Annotated[str | None, typer.Option(help="the model that grades open answers, e.g. openai:gpt-4o")] = None,
    judge_sample: Annotated[int, typer.Option(help="queries whose options the judge grades for agreement")] = 40,
    retriever: Annotated[str, typer.Option(help="rag retriever")] = "bm25",
    granularity: Annotated[str, typer.Option(help="rag units: session or turn (a user turn and its reply)")] = "session",
    k: Annotated[int, typer.Option("--k", help="rag: units retrieved")] = 5,
    recent_tokens: Annotated[int, typer.Option(help="recent: tokens of the latest turns kept")] = 4000,
    window: Annotated[int | None, typer.Option(help="model context window in tokens (default per backend)")] = None,
    name: Annotated[str | None, typer.Option(help="run folder under <version>/evals/ (default: mode-model)")] = None,
    max_tokens: Annotated[int, typer.Option(help="answer token budget")] = 512,
    temperature: Annotated[float, typer.Option(help="sampling temperature")] = 0.0,
    concurrency: Annotated[int, typer.Option(help="requests in flight")] = 8,
    cache: Annotated[Path | None, typer.Option(help="LLM response cache [default: OUTPUTS/.cache/llm.sqlite]")] = None,
    outputs: OutputsOpt = Path("outputs"),
) -> None:
    """Ask a model every placed query (PersonaMem's multiple-choice protocol, or open answers and a judge) in
    one context mode or a whole suite; write <version>/evals/<name>/."""
    from pipeline.dataset import check_output_name, eval_folder, resolve
    from pipeline.evaluation.evaluate import EvalSettings, run_name

    modes = list(mode or ([] if suite else ["mcq"]))
    try:
        _check_options(modes=modes, suite=suite, answer=answer, judge=judge, retriever=retriever,
                       granularity=granularity, numbers={"--limit": limit, "--window": window, "--k": k,
                       "--recent-tokens": recent_tokens, "--judge-sample": judge_sample, "--max-tokens": max_tokens,
                       "--concurrency": concurrency}, temperature=temperature)
        settings = EvalSettings(mode=modes[0] if modes else "mcq", answer=answer, retriever=retriever,
                                granularity=granularity, k=k, recent_tokens=recent_tokens, limit=limit,
                                window=window, judge_sample=judge_sample, budget=budget_option(budget))
        if name is not None:
            check_output_name(name)
        version = None if cache else resolve(dataset, outputs)
        cache = cache or _default_cache(version, outputs)
        gateway = _gateway(llm, window=window, max_tokens=max_tokens, temperature=temperature,
                           concurrency=concurrency, cache=cache)
        grader = _gateway(judge, window=None, max_tokens=256, temperature=0.0, concurrency=concurrency,
                          cache=cache, share=gateway) if answer == "open" else None
        version = version or resolve(dataset, outputs)
        name = name or run_name(gateway.name, settings, prefix="suite" if suite else None)
        eval_folder(version, name, outputs=outputs)  # writable, before any call
        for g in (gateway, grader):
            if g is not None:
                g.preflight()
        _say_window(version, gateway, settings, modes, suite=suite)
        run = _run(version, gateway, grader, settings, modes, suite=suite, name=name, outputs=outputs)
    except UserError as exc:
        raise fail(exc) from None
    console.print(Markdown(run.markdown))
    console.print(f"results: {run.path}" + ("" if run.path.parent.name == "evals" else
                                           "  (the version is read-only: written under --outputs)"))
    failed = run.summary.n_failed
    if failed:
        raise fail(f"{failed} model or judge calls failed and are not scored; rerun the same command to retry "
                   "them (every finished call is cached)", code=1)


def _say_window(version: Path, gateway, settings, modes: list[str], *, suite: bool) -> None:
    """Before any call: how many queries are longer than the model's window in each mode asked (they are skipped,
    counted, not scored), and the modes in which every one fits."""
    from pipeline.dataset import load
    from pipeline.evaluation.evaluate import default_window, fitting_recent, window_fit
    from pipeline.evaluation.suite import SUITE_MODES

    asked = list(modes or (SUITE_MODES if suite else [settings.mode]))
    window, answer = settings.window or default_window(gateway), gateway.settings.max_tokens
    ds = load(version)
    n, skipped = window_fit(ds, settings, asked, window, answer)
    over = {m: k for m, k in skipped.items() if k}
    if not over:
        return
    others = window_fit(ds, settings, [m for m in ("oracle", "rag") if m not in over], window, answer)[1]
    fits = [m for m, k in others.items() if not k]
    recent = fitting_recent(ds, settings, window, answer)
    fits += ["recent"] if recent is not None else []
    said = ", ".join(f"{m} ({k} of {n})" for m, k in over.items())
    offer = ", ".join(f"recent (--recent-tokens {recent:,})" if m == "recent" else m for m in fits)
    err_console.print(f"note: {gateway.name}'s window is {window:,} tokens: queries longer than it (with a "
                      f"{answer:,}-token answer) are skipped, counted and not scored, in {said}."
                      + (f" Every query fits in: {offer}." if fits else ""), highlight=False, soft_wrap=True)


def _default_cache(version: Path, outputs: Path) -> Path:
    """``OUTPUTS/.cache/llm.sqlite`` where the version lies under ``--outputs``; else the cache of the outputs
    folder that holds the version (``<version>/../../.cache``): a command run inside a version folder never
    writes its cache into the version."""
    here = version.resolve()
    root = outputs if here.is_relative_to(outputs.resolve()) else here.parent.parent
    return root / ".cache" / "llm.sqlite"


def _check_options(*, modes: list[str], suite: bool, answer: str, judge: str | None, retriever: str,
                   granularity: str, numbers: dict[str, int | None], temperature: float) -> None:
    """One-line errors for option values no run can use, before anything is read or asked."""
    for mode in modes:
        if mode not in MODES:
            raise UserError(f"--mode {mode!r}: use {', '.join(MODES)}")
    if len(modes) > 1 and not suite:
        raise UserError("--mode given more than once: pass --suite to run several modes in one table")
    if len(set(modes)) != len(modes):
        raise UserError(f"--mode: {', '.join(modes)} repeats a mode")
    choices = {"--answer": (answer, ("choice", "open")), "--retriever": (retriever, ("bm25",)),
               "--granularity": (granularity, ("session", "turn"))}
    for option, (value, allowed) in choices.items():
        if value not in allowed:
            raise UserError(f"{option} {value!r}: use {' or '.join(allowed)}")
    if answer == "open" and not judge:
        raise UserError("--answer open needs --judge <llm>: the model that grades the answers")
    for option, value in numbers.items():
        if value is not None and value < 1:
            raise UserError(f"{option} {value}: must be at least 1")
    if not 0 <= temperature <= 2:
        raise UserError(f"--temperature {temperature:g}: must be between 0 and 2")


def _run(version: Path, gateway, grader, settings, modes: list[str], *, suite: bool, name: str, outputs: Path):
    """Run the eval or the suite with a progress bar; Ctrl-C stops the calls and says how to resume."""
    from pipeline.evaluation.evaluate import run_eval
    from pipeline.evaluation.suite import SUITE_MODES, run_suite
    from pipeline.llm.errors import Interrupted

    gateway.runtime.resume()  # a process that saw an earlier run interrupted
    try:
        columns = (*Progress.get_default_columns(), MofNCompleteColumn())
        with Progress(*columns, console=err_console, transient=True) as bar:
            task = bar.add_task("evaluating", total=None)
            progress = lambda done, total: bar.update(task, completed=done, total=total)  # noqa: E731
            if suite:
                return run_suite(version, llm=gateway, settings=settings, modes=modes or SUITE_MODES, judge=grader,
                                 name=name, outputs=outputs, progress=progress)
            return run_eval(version, llm=gateway, settings=settings, name=name, judge=grader, outputs=outputs,
                            progress=progress)
    except (KeyboardInterrupt, Interrupted) as exc:
        from pipeline.cli.common import Terminated

        gateway.runtime.stop("eval interrupted")
        raise fail("interrupted; every finished call is cached: rerun the same command to continue",
                   code=143 if isinstance(exc, Terminated) else 130) from None


def _gateway(llm: str | None, *, window: int | None, max_tokens: int, temperature: float, concurrency: int,
             cache: Path, share=None):
    """The gateway for an eval (not yet preflighted); the embedded model's n_ctx follows --window so the window
    is real. A judge (``share``: the model's gateway) uses the model's cache, and its backend when it names
    the same one (one embedded model loaded, not two)."""
    from pipeline.llm import LLM
    from pipeline.llm.factory import resolve_backend_string
    from schemas.llm import LLMSettings

    values = {"llm": llm, "max_tokens": max_tokens, "temperature": temperature, "max_concurrency": concurrency,
              "cache_path": cache}
    backend = resolve_backend_string(LLMSettings(llm=llm))
    if window and backend.startswith("local"):
        values["n_ctx"] = max(window, 256)
    if share is None:
        return LLM(LLMSettings(**values))
    same = backend == resolve_backend_string(share.settings)
    return LLM(LLMSettings(**values), cache=share.cache, backend=share.backend if same else None)


def report_command(dataset: DatasetArg, outputs: OutputsOpt = Path("outputs")) -> None:
    """Write <version>/report/: report.html (its plots embedded), the PNG plots and a page per persona."""
    from pipeline.dataset import resolve
    from pipeline.reporting.report import build_report

    try:
        written = build_report(resolve(dataset, outputs))
    except UserError as exc:
        raise fail(exc) from None
    console.print(f"report: {written.html}  ({len(written.images)} plots)")
