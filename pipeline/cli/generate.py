"""`personagen generate`: plan and ETA, the Prefect flow with a live progress display, then a summary."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from pipeline.cli.common import (
    Terminated,
    console,
    err_console,
    fail,
    restore_handlers,
    stop_handlers,
    stopping,
)
from pipeline.config import load_config
from pipeline.errors import UserError
from schemas.llm import LLMSettings


class RichReporter:
    """Shows personas done, model calls against the plan's expected calls (each with an ETA), and the stage.

    The calls bar moves with every call, so a long run shows its ETA from the first minutes, while the
    first persona may take many calls to finish; its total leaves out the calls of personas the plan found
    checkpointed, and grows when the run makes more than planned. Calls made on Dask workers count when their
    persona comes back.
    """

    def __init__(self, progress: Progress, total: int, calls: int = 0) -> None:
        self.progress = progress
        self.personas = progress.add_task("personas (text + queries)", total=total)
        self.calls = progress.add_task("model calls", total=calls) if calls else None
        self.reused = 0

    def call_done(self, stage: str, count) -> None:
        """A gateway listener: one finished call (cached or not)."""
        if self.calls is None:
            return
        task = self.progress.tasks[self.calls]
        if task.completed + count.calls > task.total:  # more calls than planned: keep the bar honest
            self.progress.update(self.calls, total=task.completed + count.calls)
        self.progress.advance(self.calls, count.calls)

    def persona_done(self, index: int, from_checkpoint: bool, failed: bool) -> None:
        """A persona finished; one from its checkpoint made no call (the plan took its calls off the bar)."""
        self.reused += from_checkpoint
        self.progress.advance(self.personas)

    def stage(self, name: str) -> None:
        self.finish()
        self.progress.add_task(name, total=None)

    def notice(self, text: str) -> None:
        """One line above the bars (the Dask cluster, or that no worker has taken a task)."""
        self.progress.console.print(text, soft_wrap=True)

    def finish(self) -> None:
        """Mark every open stage done (the flow has moved on or returned)."""
        for task in self.progress.tasks:
            if task.total is None:
                self.progress.update(task.id, total=1, completed=1)

    def done(self) -> None:
        """The run is over: every stage done, and the calls bar ends at the calls really made."""
        self.finish()
        if self.calls is not None:
            self.progress.update(self.calls, total=self.progress.tasks[self.calls].completed)


def _reused_calls(estimate, made: int) -> int:
    return round(estimate.llm_calls * made / max(1, estimate.personas))


def _plan_table(estimate, config, llm_name: str, workers: int, made: int = 0) -> Table:
    from pipeline.run.estimate import density_rows

    table = Table(title=f"plan: {config.dataset}, {estimate.personas} personas, {llm_name}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    seconds = 0.0 if made == estimate.personas else estimate.eta_s  # a rerun of made personas only: no calls
    eta = "unknown" if seconds is None else f"{seconds / 3600:.1f} h" if seconds > 5400 else f"{seconds / 60:.1f} min"
    for name, value in [
        ("topics x periods", f"{len(config.topics)} x {len(config.periods)}"),
        ("personas at once", f"{min(workers, estimate.personas):,}"),
        ("sessions", f"{estimate.sessions:,}"),
        ("expected LLM calls", f"{estimate.llm_calls:,}"),
        *([("made already (checkpoints: no calls)", f"{made:,} of {estimate.personas:,} personas, "
            f"about {_reused_calls(estimate, made):,} calls")] if made else []),
        ("expected generated tokens", f"{estimate.output_tokens:,}"),
        ("expected prompt tokens", f"{estimate.input_tokens:,}"),
        ("cost", f"${estimate.cost_usd:,.2f}" if estimate.cost_usd is not None else "n/a (no price configured)"),
        ("measured speed", f"{estimate.tokens_per_s:,.0f} tokens/s" if estimate.tokens_per_s else "unknown"),
        ("ETA (cache misses only)", eta),
        ("budgets", ", ".join(f"{b:,}" for b in sorted(config.assembly.budgets))),
        *density_rows(estimate),
    ]:
        table.add_row(name, value)
    return table


def generate(
    n: Annotated[int | None, typer.Option("--n", help="number of personas (default: the profile's)")] = None,
    profile: Annotated[str, typer.Option(help="smoke | default | paper | a YAML file")] = "default",
    seed: Annotated[int | None, typer.Option(help="run seed (default: the profile's)")] = None,
    llm: Annotated[str | None, typer.Option("--llm", envvar="LLM", help=(
        "fake | local[:path.gguf] | openai:<model> (OPENAI_BASE_URL: any OpenAI-compatible server, "
        "where OPENAI_API_KEY may be left unset)"))] = None,
    outputs: Annotated[Path, typer.Option(help="root folder of published datasets")] = Path("outputs"),
    cache: Annotated[Path | None, typer.Option(help="LLM response cache (SQLite) [default: OUTPUTS/.cache/llm.sqlite]")] = None,
    workers: Annotated[int | None, typer.Option(help=(
        "personas processed concurrently [default: the backend's calls in flight, max_concurrency; with --runner "
        "dask: 4 local worker processes, or on --dask-address at least this many, else twice its worker threads]"))] = None,
    runner: Annotated[str, typer.Option(help="thread | dask")] = "thread",
    dask_address: Annotated[str | None, typer.Option(help="tcp://host:port of a Dask scheduler")] = None,
    dask_timeout: Annotated[float, typer.Option(help=(
        "seconds with no Dask worker taking a task before the run fails"))] = 300.0,
    keep: Annotated[int | None, typer.Option(help="keep only the newest K versions")] = None,
    cache_only: Annotated[bool, typer.Option(help="fail on any cache miss instead of calling the model")] = False,
    dry_run: Annotated[bool, typer.Option(help="print the plan and ETA, then stop")] = False,
) -> None:
    """Generate a benchmark dataset and publish it as a new version under OUTPUTS/<dataset>/."""
    from pipeline.config import with_writing
    from pipeline.llm import LLM, LLMError
    from pipeline.run.estimate import check_budgets, estimate_run
    from pipeline.run.jobs import made_already
    from pipeline.run.spec import RunSpec, default_workers

    if runner not in ("thread", "dask"):
        raise fail(f"--runner: expected thread or dask, got {runner!r}")
    for option, value in (("--workers", workers), ("--keep", keep)):
        if value is not None and value < 1:
            raise fail(f"{option} {value}: must be at least 1")
    if dask_timeout <= 0:
        raise fail(f"--dask-timeout {dask_timeout:g}: must be more than 0 seconds")
    if dask_address and runner != "dask":
        raise fail("--dask-address needs --runner dask")
    cache = cache or outputs / ".cache" / "llm.sqlite"
    created = _would_create(cache)  # what to remove if nothing is stored
    gateway = None
    try:
        config = load_config(profile, n_personas=n, seed=seed)
        _preflight(config, outputs, cache.parent)
        settings = LLMSettings(llm=llm, cache_path=cache, cache_only=cache_only)
        gateway = LLM(settings)
        gateway.preflight()
        config = with_writing(config, gateway)  # text.writing auto: the mode this backend writes in
        workers = workers or default_workers(settings, runner)
        estimate = estimate_run(config, gateway, workers=workers)
        check_budgets(config, estimate)
        spec = RunSpec(config=config, llm=settings, outputs=outputs, keep=keep)
        made = made_already(spec)
        if made and estimate.eta_s:  # a rerun: the checkpointed personas make no call
            estimate.eta_s *= (config.n_personas - made) / config.n_personas
        if _starts_prefect_server() and estimate.eta_s is not None:
            estimate.eta_s += PREFECT_START_S
    except (UserError, LLMError) as exc:
        _drop_empty_cache(gateway, cache, created)
        raise fail(str(exc)) from None
    except KeyboardInterrupt as exc:  # Ctrl-C (or SIGTERM) while planning: one line, not click's "Aborted!"
        _drop_empty_cache(gateway, cache, created)
        raise fail("interrupted before the run started; nothing published",
                   code=143 if isinstance(exc, Terminated) else 130) from None
    console.print(_plan_table(estimate, config, gateway.name, workers, made))
    if dry_run:
        _drop_empty_cache(gateway, cache, created)
        return
    path = _run(spec, runner=runner, workers=workers, dask_address=dask_address, dask_timeout=dask_timeout,
                total=config.n_personas, calls=estimate.llm_calls - _reused_calls(estimate, made))
    try:
        _summary(path)
    except KeyboardInterrupt as exc:  # the version is complete; only the summary was cut short
        raise fail(f"interrupted after publishing {path} (the version is complete)",
                   code=143 if isinstance(exc, Terminated) else 130) from None


# Seconds Prefect's temporary server takes to start and take the flow run (12.4-13.1 s measured on 2 cores,
# most of it importing the server), added to the ETA when the run starts one.
PREFECT_START_S = 15.0


def _quiet_prefect() -> None:
    if os.environ.get("PREFECT_API_URL", "").strip() == "":  # set but empty: no server, as when unset
        os.environ.pop("PREFECT_API_URL", None)
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # before Prefect is imported: keep the display clean
    # The CLI reports a failure itself, in one `error:` line; Prefect's console tracebacks would bury it
    # (its logs still reach the Prefect API, and a real crash still prints Python's traceback).
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")


def _starts_prefect_server() -> bool:
    """Whether the run starts Prefect's temporary server; a configured PREFECT_API_URL that does not answer
    is a one-line UserError here, before the run's calls."""
    _quiet_prefect()
    from flows.server import api_problem, uses_temporary_server

    problem = api_problem()
    if problem:
        raise UserError(problem)
    return uses_temporary_server()


def _cache_file(cache: Path) -> Path:
    """The file opening ``cache`` writes: where a link points, for a link (the link itself is never ours)."""
    return Path(os.path.realpath(cache)) if cache.is_symlink() else cache


def _would_create(cache: Path) -> list[Path]:
    """The paths opening ``cache`` creates: the file and the folders above it that are not there yet, deepest
    first. A link itself, dangling or not, is never among them."""
    target = _cache_file(cache)
    return [p for p in (target, *target.parents) if not os.path.lexists(p)]


def _drop_empty_cache(gateway, cache: Path, created: list[Path]) -> None:
    """Remove the cache file (and folders) this command created, if it stored nothing in it (a failed
    preflight, a dry run whose estimate made no call); never a path that was there before, nor a link."""
    if gateway is not None:
        if gateway.cache.count() > 0:
            return
        gateway.close()
    target = _cache_file(cache)
    if target in created:
        for path in (target, target.with_name(target.name + "-wal"), target.with_name(target.name + "-shm")):
            with contextlib.suppress(OSError):  # e.g. --outputs names a file: there is nothing to remove
                path.unlink(missing_ok=True)
    for folder in created:
        if folder != target:
            with contextlib.suppress(OSError):
                folder.rmdir()  # deepest first, and only while empty


def _preflight(config, outputs: Path, cache_folder: Path) -> None:
    """Fail before any model call on what would fail later: a broken template, an unwritable outputs folder."""
    from pipeline.dataset import check_writable
    from pipeline.dataset.store import sweep
    from pipeline.prompting import preflight_templates
    from pipeline.specs import ALL_SPECS

    preflight_templates(ALL_SPECS.values())
    check_writable(outputs, config.dataset)  # sweeps what killed runs left there
    sweep(cache_folder / "personas")  # checkpoints' temporary files of killed runs


class _Terminated(Terminated):
    """SIGTERM during the run, raised like Ctrl-C's KeyboardInterrupt."""


def _on_sigterm(signum, frame) -> None:
    stopping()
    raise _Terminated()


def _run(spec, *, runner: str, workers: int, dask_address: str | None, dask_timeout: float, total: int,
         calls: int = 0) -> Path:
    _quiet_prefect()
    from prefect.exceptions import TerminationSignal

    from flows.generate import run_generate
    from flows.progress import REPORTER
    from pipeline.dataset.publishing import PUBLISHED
    from pipeline.llm import listen, listen_notices
    from pipeline.llm.errors import Interrupted

    # SIGTERM unwinds like Ctrl-C, so the run stops its model calls and cleans up (Prefect's temporary
    # server included) instead of Python's default of dying on the spot.
    previous = stop_handlers(_on_sigterm)
    started, published_before = time.perf_counter(), len(PUBLISHED)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    try:
        with Progress(*columns, console=console) as progress:
            reporter = RichReporter(progress, total, calls)
            token, unlisten = REPORTER.set(reporter), listen(reporter.call_done)
            unnotice = listen_notices(reporter.notice)
            try:
                path = run_generate(spec, runner=runner, workers=workers, dask_address=dask_address,
                                    dask_timeout_s=dask_timeout)
                reporter.done()
            finally:
                unlisten()
                unnotice()
                REPORTER.reset(token)
    except UserError as exc:
        raise fail(str(exc)) from None
    except (KeyboardInterrupt, Interrupted, TerminationSignal) as exc:
        code = 143 if isinstance(exc, _Terminated | TerminationSignal) else 130
        if len(PUBLISHED) > published_before:  # the rename happened: the version is whole, a rerun would add one
            raise fail(f"interrupted after publishing {PUBLISHED[-1]} (the version is complete; a rerun would "
                       "publish another)", code=code) from None
        saved = ("every finished persona is saved (the calls of those in flight on Dask workers are not)"
                 if runner == "dask" else "every finished model call and persona is saved")
        raise fail(f"interrupted; {saved}: rerun the same command to continue", code=code) from None
    finally:
        restore_handlers(previous)
    console.print(f"finished in {time.perf_counter() - started:.1f} s")
    return path


def _summary(path: Path) -> None:
    import json

    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    table = Table(title=f"published {path}")
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, count in manifest["counts"].items():
        table.add_row(name, f"{count:,}")
    console.print(table)
    usage = manifest.get("usage", {}).get("total", {})
    reused = manifest.get("stats", {}).get("personas_from_checkpoint", 0)
    console.print(f"model calls: {usage.get('calls', 0):,}, {usage.get('cache_hits', 0):,} of them answered by the cache"
                  + (f"; {reused:,} personas from their checkpoints (no calls)" if reused else ""), highlight=False,
                  soft_wrap=True)
    if usage.get("transport_failures"):
        console.print(f"{usage['transport_failures']} of {usage.get('calls', 0)} model calls got no answer (within "
                      "llm.max_failed_share): code-written text stands in for them; a rerun asks them again",
                      soft_wrap=True, highlight=False)
    if engine := manifest.get("stats", {}).get("engine"):
        console.print(engine_line(engine), soft_wrap=True, highlight=False, markup=False)
    origin_line, warning = origin_summary(manifest.get("stats", {}).get("text_origin", {}))
    if origin_line:
        console.print(origin_line, soft_wrap=True, highlight=False, markup=False)
    if warning:
        err_console.print(warning, soft_wrap=True, highlight=False, markup=False)
    from pipeline.dataset.card import unenforced

    if gate := unenforced(manifest.get("stats", {}).get("probe")):
        err_console.print(f"note: {gate}", soft_wrap=True, highlight=False, markup=False)
    from pipeline.dataset.publishing import KEPT

    for line in KEPT:
        console.print(f"--keep left {line}: not provably a version personagen published", highlight=False)
    console.print(load_commands(path), soft_wrap=True, highlight=False, markup=False)


def engine_line(engine: dict) -> str:
    """The embedded model's line at the end of a run: how full its batches were and what its prompts cost."""
    return (f"embedded model: {engine['generated']:,} tokens generated at {engine['generated_per_decode_s']:,.0f} "
            f"tokens/s while decoding, {engine['mean_width']:.1f} sequences a pass; "
            f"{engine['evaluated_per_generated']:.2f} prompt tokens evaluated per generated token "
            f"({engine['evaluated_per_sent']:.0%} of those sent: the rest was a cached prefix)")


# A run whose model wrote less than this share of the model-written fields (the rest fell back to code) ends
# with a warning: a server that answers schema-valid junk publishes, but not silently.
WARN_MODEL_SHARE = 0.5


def origin_summary(origin: dict[str, dict[str, int]]) -> tuple[str, str | None]:
    """The line "model wrote: field N%, ..." of a run's text origins (model and re-asked count as the model's),
    and a warning when the model wrote under ``WARN_MODEL_SHARE`` of all the fields' texts."""
    shares = {}
    for field, counts in sorted(origin.items()):
        total = sum(counts.values())
        if total:
            shares[field] = ((counts.get("model", 0) + counts.get("reasked", 0)) / total, total)
    if not shares:
        return "", None
    line = "model wrote: " + ", ".join(f"{f} {share:.0%}" for f, (share, _) in shares.items()) + " (code the rest)"
    overall = sum(share * n for share, n in shares.values()) / sum(n for _, n in shares.values())
    if overall >= WARN_MODEL_SHARE:
        return line, None
    low = ", ".join(f for f, (share, _) in sorted(shares.items(), key=lambda kv: kv[1][0])[:4])
    return line, (f"warning: the model wrote only {overall:.0%} of the texts (lowest: {low}); the rest is code's "
                  "fallback wording: check the model's replies (`personagen prompts`) before using this version")


def load_commands(path: Path) -> str:
    """The "Load it with" lines, quoted so that they run as printed whatever the path holds (spaces, quotes)."""
    import sys
    from shlex import quote

    path = Path(os.path.abspath(path))  # the lines run from any folder
    python = quote(sys.executable)  # the interpreter with personagen's packages (the system one may lack them)
    beside = Path(sys.executable).parent / "personagen"  # the venv's command: a fresh shell has no venv on PATH
    personagen = str(beside) if beside.is_file() else "personagen"
    table = str(path / "queries.parquet").replace("'", "''")  # a SQL string literal
    sql = f"select type, count(*) from '{table}' group by type"
    load = f"from pipeline.dataset import load; d = load({str(path)!r}); print(len(d.queries), 'queries')"
    return ("Load it with:\n"
            f"  {python} -c {quote(load)}\n"
            f"  {python} -c {quote(f'import duckdb; duckdb.sql({sql!r}).show()')}\n"
            f"  {quote(personagen)} export personamem {quote(str(path))} "
            f"--out {quote(str(path.parent / 'personamem_format'))}")
