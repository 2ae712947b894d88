"""The main job: `generate-benchmark`, one Prefect task per persona (or one Dask task on a worker), then
assembly and publishing."""


import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote

from flows.progress import current_reporter, heartbeat
from flows.server import start_temporary_server, watch_api
from pipeline.dataset.publishing import PUBLISHED
from pipeline.errors import UserError, redact
from pipeline.llm.errors import ConfigError
from pipeline.llm.limits import Runtime
from pipeline.llm.local import engine_counters
from pipeline.run.card_stats import run_summary
from pipeline.run.cluster import DaskSettings, open_pool, remote_personas
from pipeline.run.filler import complete_filler, filler_inputs
from pipeline.run.jobs import JobResult, filler_job, persona_job, reuse_checkpoints
from pipeline.run.publish import check_failures, check_unanswered, publish_run
from pipeline.run.spec import RunSpec, default_workers, model_name
from pipeline.s1_personas.sample_personas import sample_personas
from schemas.manifest import Failure
from schemas.persona import PersonaSeed


def _transient(task, task_run, state) -> bool:
    """Retry a persona task unless it failed on configuration or bad input (retrying cannot help)."""
    try:
        state.result()
    except (ConfigError, UserError):
        return False
    except Exception:  # anything else may be transient (a crashed call, a full disk that got freed)
        return True
    return False


# Tasks wrap the stage functions themselves; with Dask the persona tasks are plain Dask tasks instead, so the
# workers need neither this machine's disk nor its Prefect API.
_RETRY = {"retries": 2, "retry_delay_seconds": [1, 5], "retry_condition_fn": _transient,
          "cache_policy": NO_CACHE, "persist_result": False}
reuse_task = task(reuse_checkpoints, name="reuse-checkpoints", cache_policy=NO_CACHE, persist_result=False)
persona_task = task(persona_job, name="persona-pipeline", task_run_name="persona-{seed.index}", **_RETRY)
filler_task = task(filler_job, name="filler-pool", **_RETRY)
filler_top_up_task = task(complete_filler, name="filler-top-up", **_RETRY)
publish_task = task(publish_run, name="publish-dataset", cache_policy=NO_CACHE, persist_result=False)


@flow(name="generate-benchmark", persist_result=False, log_prints=False)
def generate_benchmark(spec: RunSpec, dask: DaskSettings | None = None) -> str:
    """Seed personas, run each persona's stages concurrently (in threads, or on Dask workers), then assemble
    and publish one version."""
    Runtime.get().resume()  # a long-lived process (make serve) may have seen an earlier run interrupted
    try:
        return _generate_benchmark(spec, dask)
    except BaseException as exc:
        if not isinstance(exc, Exception):  # Ctrl-C or SIGTERM: stop model calls so the task threads end now
            Runtime.get().stop(f"run interrupted ({type(exc).__name__})")
        raise


def _generate_benchmark(spec: RunSpec, dask: DaskSettings | None) -> str:
    reporter = current_reporter()
    engine_before = engine_counters()
    seeds = sample_personas(spec.config.n_personas, run_seed=spec.config.seed, settings=spec.config.personas)
    # Tasks called in the flow get their big arguments quote()d: those hold no futures, and Prefect would
    # otherwise walk every nested model of them (twice per task), which cost more than the whole rerun of
    # a finished dataset. Submitted tasks get theirs plain: they are small.
    filler_future = filler_task.submit(spec)
    done: dict[int, JobResult] = reuse_task(quote(seeds), quote(spec))
    stage = ["making personas"]
    if reporter is None:  # served: no display, so a line a minute says where the run stands
        started = time.monotonic()
        with heartbeat(lambda: _standing(done, len(seeds), started, engine_before, stage[0]), get_run_logger().info):
            return _make_and_publish(spec, dask, seeds, done, filler_future, reporter, engine_before, stage)
    return _make_and_publish(spec, dask, seeds, done, filler_future, reporter, engine_before, stage)


def _standing(done: dict, total: int, started: float, engine_before, stage: str = "making personas") -> str:
    """A served run's line a minute: personas made, minutes taken, the stage, and the embedded model's tokens."""
    made = engine_counters().since(engine_before).generated
    tokens = f"; the embedded model generated {made:,} tokens" if made else ""
    return f"{len(done)} of {total} personas done after {(time.monotonic() - started) / 60:.0f} min ({stage}){tokens}"


def _make_and_publish(spec: RunSpec, dask, seeds, done, filler_future, reporter, engine_before, stage: list[str]) -> str:
    pending = [seed for seed in seeds if seed.index not in done]
    with _persona_outcomes(spec, pending, dask) as (outcomes, shipped):
        failures = _collect(outcomes, done, len(seeds), reporter, remote=dask is not None)
    stage[0] = "filler pool, assembly, validation, publish"
    check_failures(spec, len(seeds), failures)
    jobs = [done[i] for i in sorted(done)]
    results = [job.result for job in jobs]
    if reporter:
        reporter.stage("filler pool, assembly, validation, publish")
    filler, filler_usage = filler_future.result()
    items, own = filler_inputs(results)
    filler, filler_dropped, top_up_usage = filler_top_up_task(quote(spec), quote(filler), quote(items), quote(own))
    usage, stats = run_summary(jobs, filler, filler_dropped, [filler_usage, top_up_usage])
    check_unanswered(spec, usage)  # before the publish task: one line, and nothing published
    if shipped:
        stats["dask"] = shipped
    engine = engine_counters().since(engine_before)
    if engine.generated:  # the embedded model ran in this process: how full its batches were
        stats["engine"] = engine.figures()
    path = str(publish_task(quote(spec), quote(results), quote(filler), usage=quote(usage),
                                models=[model_name(spec.llm)], extra_stats=quote(stats),
                                failures=quote(sorted(failures, key=lambda f: f.persona_index or 0))))
    create_markdown_artifact(markdown=Path(path, "README.md").read_text(encoding="utf-8"), key="dataset-card",
                             description=f"published {path}")
    get_run_logger().info("published %s", path)
    return path


def _collect(outcomes, done: dict[int, JobResult], total: int, reporter, *, remote: bool) -> list[Failure]:
    """Take each persona's outcome into ``done`` (or the failures), with the display and the progress artifact."""
    progress = create_progress_artifact(progress=100.0 * len(done) / max(1, total), key="generate-progress",
                                        description="personas done")
    if reporter:
        for index in sorted(done):
            reporter.persona_done(index, True, False)
    failures: list[Failure] = []
    shown = 0
    for i, (seed, outcome) in enumerate(outcomes, start=len(done) + 1):
        if isinstance(outcome, Exception):
            failures.append(Failure(persona_index=seed.index, stage="persona", reason=_one_line(outcome)))
        else:
            done[seed.index] = outcome
        if reporter:
            job = done.get(seed.index)
            if remote and job is not None and hasattr(reporter, "call_done"):
                reporter.call_done("persona", job.usage.total)  # its calls were made in another process
            reporter.persona_done(seed.index, bool(job and job.from_checkpoint), job is None)
        percent = int(100 * i / total)
        if percent > shown:  # one API call per percent, not per persona
            shown = percent
            update_progress_artifact(progress, progress=float(percent))
    return failures


@contextlib.contextmanager
def _persona_outcomes(spec: RunSpec, pending: list[PersonaSeed], dask: DaskSettings | None
                      ) -> Iterator[tuple[Iterator[tuple[PersonaSeed, JobResult | Exception]], dict]]:
    """(seed, JobResult or the exception) per persona as each finishes, and, with Dask, the shipping tallies
    (filled in as the run goes). Threads: one Prefect task per persona. Dask: one plain task per persona on the
    workers, which get everything from this process and write nothing of the run's (`pipeline.run.cluster`)."""
    if dask is None:
        futures = {persona_task.submit(seed, spec): seed for seed in pending}
        yield _thread_outcomes(futures), {}
        return
    shipped: dict = {}
    with open_pool(dask, _notify) as pool:
        try:
            yield remote_personas(pool, pending, spec), shipped
        finally:
            shipped.update(pool.stats())


def _thread_outcomes(futures: dict) -> Iterator[tuple[PersonaSeed, JobResult | Exception]]:
    for future in as_completed(list(futures)):
        seed = futures[future]
        try:
            yield seed, future.result()
        except Exception as exc:
            yield seed, exc


def _notify(text: str) -> None:
    """A line for whoever watches the run: the CLI's display, and the flow run's log."""
    reporter = current_reporter()
    if reporter and hasattr(reporter, "notice"):
        reporter.notice(text)
    get_run_logger().warning(text)


def _one_line(exc: BaseException) -> str:
    text = redact(str(exc)).strip().splitlines()  # it goes into the manifest and the error line
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def task_runner_for(spec: RunSpec, *, runner: Literal["thread", "dask"] = "thread", workers: int | None = None):
    """The flow's task runner: ``workers`` threads; by default as many as the backend takes calls in flight
    (`default_workers`). Never Prefect's default thread pool, which has no bound. With Dask the persona tasks
    go to the Dask workers, not through it (the filler pool and publishing still run here)."""
    return ThreadPoolTaskRunner(max_workers=workers or default_workers(spec.llm, runner))


def run_generate(spec: RunSpec, *, runner: Literal["thread", "dask"] = "thread", workers: int | None = None,
                 dask_address: str | None = None, dask_timeout_s: float | None = None) -> Path:
    """Run the flow with the chosen runner; returns the published version's path."""
    start_temporary_server()  # outside our process group, so a terminal's Ctrl-C does not kill it first
    task_runner = task_runner_for(spec, runner=runner, workers=workers)
    dask = None
    if runner == "dask":
        dask = DaskSettings(address=dask_address, workers=workers or default_workers(spec.llm, "dask"),
                            **({"timeout_s": dask_timeout_s} if dask_timeout_s else {}))
    stop, published = threading.Event(), len(PUBLISHED)
    watch_api(lambda reason: api_lost(reason, PUBLISHED[published:]), stop)
    try:
        return Path(generate_benchmark.with_options(task_runner=task_runner)(spec, dask))
    finally:
        stop.set()  # before Prefect's exit hook stops the temporary server


def api_lost(reason: str, published: list) -> None:
    """The run's Prefect API is gone: stop the model calls, say so in one line and exit 1 at once.

    Prefect's client would retry every state report for minutes, then end in a traceback. Exiting at once is
    what kill -9 does, which a run survives: every answered call is cached, every finished persona
    checkpointed, a version is only ever renamed into place whole, and leftovers are swept at the next start."""
    Runtime.get().stop(reason)
    if published:  # the rename happened: the version is whole, a rerun would publish another
        line = f"{redact(reason)} after publishing {published[-1]} (the version is complete)"
    else:
        line = (f"{redact(reason)}; nothing published; every answered model call is cached and every finished "
                "persona checkpointed: rerun the same command to resume")
    sys.stderr.write(f"\nerror: {line}\n")
    sys.stderr.flush()
    os._exit(1)
