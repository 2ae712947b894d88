"""The main job: `generate-benchmark`, one Prefect task per persona, then assembly and publishing."""


from pathlib import Path
from typing import Literal

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote

from flows.progress import current_reporter
from flows.server import start_temporary_server
from pipeline.errors import UserError
from pipeline.llm.errors import ConfigError
from pipeline.llm.limits import Runtime
from pipeline.run.jobs import (
    JobResult,
    RunSpec,
    check_failures,
    complete_filler,
    default_workers,
    filler_inputs,
    filler_job,
    model_name,
    persona_job,
    publish_run,
    reuse_checkpoints,
    run_summary,
)
from pipeline.timeline.sample_personas import sample_personas
from schemas.manifest import Failure


def _transient(task, task_run, state) -> bool:
    """Retry a persona task unless it failed on configuration or bad input (retrying cannot help)."""
    try:
        state.result()
    except (ConfigError, UserError):
        return False
    except Exception:  # anything else may be transient (a crashed call, a full disk that got freed)
        return True
    return False


# Tasks wrap the stage functions themselves, so Dask workers unpickle them by reference.
_RETRY = {"retries": 2, "retry_delay_seconds": [1, 5], "retry_condition_fn": _transient,
          "cache_policy": NO_CACHE, "persist_result": False}
reuse_task = task(reuse_checkpoints, name="reuse-checkpoints", cache_policy=NO_CACHE, persist_result=False)
persona_task = task(persona_job, name="persona-pipeline", task_run_name="persona-{seed.index}", **_RETRY)
filler_task = task(filler_job, name="filler-pool", **_RETRY)
filler_top_up_task = task(complete_filler, name="filler-top-up", **_RETRY)
publish_task = task(publish_run, name="publish-dataset", cache_policy=NO_CACHE, persist_result=False)


@flow(name="generate-benchmark", persist_result=False, log_prints=False)
def generate_benchmark(spec: RunSpec) -> str:
    """Seed personas, run each persona's stages concurrently, then assemble and publish one version."""
    Runtime.get().resume()  # a long-lived process (make serve) may have seen an earlier run interrupted
    try:
        return _generate_benchmark(spec)
    except BaseException as exc:
        if not isinstance(exc, Exception):  # Ctrl-C or SIGTERM: stop model calls so the task threads end now
            Runtime.get().stop(f"run interrupted ({type(exc).__name__})")
        raise


def _generate_benchmark(spec: RunSpec) -> str:
    reporter = current_reporter()
    seeds = sample_personas(spec.config.n_personas, run_seed=spec.config.seed, settings=spec.config.personas)
    # Tasks called in the flow get their big arguments quote()d: those hold no futures, and Prefect would
    # otherwise walk every nested model of them (twice per task), which cost more than the whole rerun of
    # a finished dataset. Submitted tasks get theirs plain: they are small, and Dask would turn a quote
    # into a bare tuple on its way to a worker.
    filler_future = filler_task.submit(spec)
    done: dict[int, JobResult] = reuse_task(quote(seeds), quote(spec))
    futures = {persona_task.submit(seed, spec): seed for seed in seeds if seed.index not in done}
    progress = create_progress_artifact(progress=100.0 * len(done) / max(1, len(seeds)), key="generate-progress",
                                        description="personas done")
    if reporter:
        for index in sorted(done):
            reporter.persona_done(index, True, False)
    failures: list[Failure] = []
    shown = 0
    for i, future in enumerate(as_completed(list(futures)), start=len(done) + 1):
        seed = futures[future]
        try:
            done[seed.index] = future.result()
        except Exception as exc:
            failures.append(Failure(persona_index=seed.index, stage="persona", reason=_one_line(exc)))
        if reporter:
            job = done.get(seed.index)
            reporter.persona_done(seed.index, bool(job and job.from_checkpoint), job is None)
        percent = int(100 * i / len(seeds))
        if percent > shown:  # one API call per percent, not per persona
            shown = percent
            update_progress_artifact(progress, progress=float(percent))
    check_failures(spec, len(seeds), failures)
    jobs = [done[i] for i in sorted(done)]
    results = [job.result for job in jobs]
    if reporter:
        reporter.stage("filler pool, assembly, validation, publish")
    filler, filler_usage = filler_future.result()
    items, own = filler_inputs(results)
    filler, filler_dropped, top_up_usage = filler_top_up_task(quote(spec), quote(filler), quote(items), quote(own))
    usage, stats = run_summary(jobs, filler, filler_dropped, [filler_usage, top_up_usage])
    path = str(publish_task(quote(spec), quote(results), quote(filler), usage=quote(usage),
                                models=[model_name(spec.llm)], extra_stats=quote(stats),
                                failures=quote(sorted(failures, key=lambda f: f.persona_index or 0))))
    create_markdown_artifact(markdown=Path(path, "README.md").read_text(encoding="utf-8"), key="dataset-card",
                             description=f"published {path}")
    get_run_logger().info("published %s", path)
    return path


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def task_runner_for(spec: RunSpec, *, runner: Literal["thread", "dask"] = "thread", workers: int | None = None,
                    dask_address: str | None = None):
    """The task runner of a run: ``workers`` threads (or Dask processes); by default as many as the backend
    takes calls in flight (`default_workers`). Never Prefect's default thread pool, which has no bound."""
    workers = workers or default_workers(spec.llm, runner)
    if runner == "dask":
        from prefect_dask import DaskTaskRunner

        return (DaskTaskRunner(address=dask_address) if dask_address else DaskTaskRunner(
            cluster_kwargs={"n_workers": workers, "processes": True, "threads_per_worker": 1}))
    return ThreadPoolTaskRunner(max_workers=workers)


def run_generate(spec: RunSpec, *, runner: Literal["thread", "dask"] = "thread", workers: int | None = None,
                 dask_address: str | None = None) -> Path:
    """Run the flow with the chosen task runner; returns the published version's path."""
    start_temporary_server()  # outside our process group, so a terminal's Ctrl-C does not kill it first
    task_runner = task_runner_for(spec, runner=runner, workers=workers, dask_address=dask_address)
    return Path(generate_benchmark.with_options(task_runner=task_runner)(spec))
