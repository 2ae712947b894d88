"""How many personas a run processes at once when the user names no number, and that no run uses
Prefect's unbounded default thread pool (the scheduled refresh did)."""

from __future__ import annotations

import subprocess
import sys

from prefect.task_runners import ThreadPoolTaskRunner

from flows.generate import task_runner_for
from pipeline.config import load_config
from pipeline.run.spec import DASK_WORKERS, RunSpec, default_workers
from schemas.llm import LLMSettings


def _spec(tmp_path, **llm) -> RunSpec:
    settings = LLMSettings(llm="fake", cache_path=tmp_path / "cache" / "llm.sqlite", **llm)
    return RunSpec(config=load_config("smoke", n_personas=3), llm=settings, outputs=tmp_path / "out")


def test_default_workers_fill_the_backends_calls_in_flight():
    assert default_workers(LLMSettings(llm="fake", max_concurrency=6)) == 6
    assert default_workers(LLMSettings(llm="fake")) == LLMSettings().max_concurrency
    assert default_workers(LLMSettings(llm="fake", max_concurrency=6), "dask") == DASK_WORKERS  # processes


def test_the_thread_runner_is_bounded_by_default_and_by_workers(tmp_path):
    runner = task_runner_for(_spec(tmp_path, max_concurrency=5))
    assert isinstance(runner, ThreadPoolTaskRunner) and runner._max_workers == 5
    assert task_runner_for(_spec(tmp_path, max_concurrency=5), workers=2)._max_workers == 2


def test_the_scheduled_refresh_runs_on_a_bounded_pool(tmp_path, monkeypatch):
    """refresh-benchmark calls the generate flow as a subflow; without a runner of its own that subflow
    got Prefect's default pool (no bound: every persona of the run at once)."""
    import flows.schedules as schedules

    seen = {}

    class Flow:
        def with_options(self, *, task_runner):
            seen["runner"] = task_runner
            return lambda spec: seen.setdefault("spec", spec) and "published"

    monkeypatch.setattr(schedules, "generate_benchmark", Flow())
    common = {"profile": "smoke", "n": 2, "llm": "fake", "outputs": str(tmp_path / "out"),
              "cache": str(tmp_path / "cache.sqlite")}
    assert schedules.refresh_benchmark.fn(**common) == "published"
    assert seen["runner"]._max_workers == LLMSettings().max_concurrency
    schedules.refresh_benchmark.fn(**common, workers=3)
    assert seen["runner"]._max_workers == 3


def test_the_plan_says_how_many_personas_run_at_once(tmp_path):
    def plan(*extra: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "generate", "--profile", "smoke", "--n", "20", "--llm", "fake",
             "--outputs", str(tmp_path / "out"), "--dry-run", *extra],
            capture_output=True, text=True, check=True, env={"COLUMNS": "200", **_env()}).stdout
        (line,) = [line for line in out.splitlines() if "personas at once" in line]
        return line.split()[-2]

    assert plan() == str(LLMSettings().max_concurrency)
    assert plan("--workers", "3") == "3"


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "COLUMNS"}
