"""`personagen generate --runner dask` on a real `dask scheduler` and two `dask worker` processes that cannot see
the driver's folder (outputs, cache, checkpoints, its templates): the same tables as the thread runner, a driver
killed mid-run repeats no completed call on rerun, a template edit reruns only the calls that used it, and a
worker without the backend or no worker at all fail in one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.dask_cluster import isolated_cluster, isolation_problem, worker_command
from tests.support.openai_server import OpenAIServer
from tests.support.procs import REPO, kill_group, run_in_group, start_in_group

TABLES = ["personas", "preferences", "events", "event_edges", "sessions", "turns", "queries", "contexts", "placements"]
QUERY_TEMPLATE = Path("generate_queries") / "query.jinja"
MARK = "Word the question plainly."


@pytest.fixture(scope="module")
def prefect_api():
    """One Prefect server for every CLI run here (each would otherwise start its own)."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield PREFECT_API_URL.value()


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "generate", "--profile", "smoke", "--n", "6", "--seed", "5", *args]


def _version(outputs: Path) -> Path:
    (version,) = sorted((outputs / "smoke").glob("v0*"))[-1:]
    return version


def _tables(version: Path) -> dict[str, bytes]:
    return {name: (version / f"{name}.parquet").read_bytes() for name in TABLES}


def _manifest(version: Path) -> dict:
    return json.loads((version / "manifest.json").read_text())


def _count(cache: Path, sql: str) -> int:
    try:
        with sqlite3.connect(cache) as db:
            return db.execute(sql).fetchone()[0]
    except sqlite3.OperationalError:  # the run is still creating the file or its table
        return 0


def _ok_rows(cache: Path) -> int:
    return _count(cache, "SELECT COUNT(*) FROM calls WHERE status = 'ok'")


def _env(prefect_api: str) -> dict:
    """The CLI's and the workers' environment: the shared Prefect server, no OpenAI key or server."""
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PREFECT_LOGGING_LEVEL": "ERROR", "PYTHONPATH": str(REPO),
           "COLUMNS": "300"}
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    return env


def _kill_once_a_persona_is_back(args: list[str], cache: Path, log: Path, env: dict) -> None:
    """Run the CLI and kill -9 its whole process group once the first persona's calls reached its cache."""
    proc = start_in_group(args, log, env=env)
    try:
        while _count(cache, "SELECT COUNT(DISTINCT tag) FROM calls WHERE tag IS NOT NULL") < 1:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        kill_group(proc)


def _edited_prompts(folder: Path) -> Path:
    """A copy of the templates with one query template edited."""
    shutil.copytree(REPO / "prompts", folder)
    edited = folder / QUERY_TEMPLATE
    edited.write_text(edited.read_text().replace("{% block system %}", "{% block system %}\n" + MARK, 1))
    return folder


def _error_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("error:")]


@pytest.mark.slow
def test_dask_workers_without_the_drivers_disk(tmp_path, prefect_api):
    if problem := isolation_problem():
        pytest.skip(problem)
    driver = tmp_path / "driver"  # everything of the driver's; no worker can see into it
    driver.mkdir(mode=0o700)
    env = _env(prefect_api)
    logs = {name: tmp_path / f"{name}.log" for name in ("threads", "killed", "resumed", "edited", "keyless")}
    assert run_in_group(_cli("--outputs", str(driver / "threads"), "--llm", "fake"), logs["threads"], env=env) == 0
    out, cache = driver / "dask", driver / "dask" / ".cache" / "llm.sqlite"
    with isolated_cluster(driver, tmp_path / "workers", env=env) as address:
        dask_cli = _cli("--outputs", str(out), "--runner", "dask", "--dask-address", address)
        seen = subprocess.run(worker_command(driver, sys.executable, "-c", "import os, sys; print(os.listdir(sys.argv[1]))"
                                             "; open(os.path.join(sys.argv[1], 'probe'), 'w')", str(driver)),
                              capture_output=True, text=True)
        assert seen.stdout.strip() == "[]" and "Read-only file system" in seen.stderr  # a worker's view of it
        _kill_once_a_persona_is_back([*dask_cli, "--llm", "fake?latency_s=0.1"], cache, logs["killed"], env)
        assert not list(out.glob("smoke/v0*")), logs["killed"].read_text()[-3000:]
        kept = _ok_rows(cache)
        assert run_in_group([*dask_cli, "--llm", "fake"], logs["resumed"], env=env) == 0, \
            logs["resumed"].read_text()[-3000:]
        resumed = _manifest(_version(out))
        before = _ok_rows(cache)
        # Every persona again, after a template edit the workers cannot read: each is shipped its earlier calls.
        assert run_in_group([*dask_cli, "--llm", "fake"], logs["edited"], env={
            **env, "PERSONAGEN_PROMPTS": str(_edited_prompts(driver / "prompts"))}) == 0, \
            logs["edited"].read_text()[-3000:]
        edit = _manifest(_version(out))
        with OpenAIServer() as server:  # the driver reaches a server; the workers have no key for OpenAI's
            keyless = run_in_group([*_cli("--outputs", str(driver / "keyless"), "--runner", "dask", "--n", "2",
                                          "--dask-address", address, "--llm", "openai:test-model")],
                                   logs["keyless"], env={**env, "OPENAI_BASE_URL": server.base_url})
    assert _tables(_version(out)) != _tables(_version(driver / "threads"))  # the edit changed the queries
    assert _tables(out / "smoke" / "v0001") == _tables(_version(driver / "threads"))
    assert resumed["stats"]["personas_from_checkpoint"] >= 1 and resumed["stats"]["dask"]["tasks"] >= 1
    assert kept + resumed["usage"]["total"]["backend_calls"] == before  # no completed call repeated
    usage = edit["usage"]
    assert edit["stats"]["personas_from_checkpoint"] == 0 and usage["total"]["cache_hits"] > 0
    assert usage["by_stage"]["generate_queries"]["backend_calls"] > 0 and all(
        count["backend_calls"] == 0 for stage, count in usage["by_stage"].items() if stage != "generate_queries")
    assert before + usage["total"]["backend_calls"] == _ok_rows(cache)
    assert _count(cache, f"SELECT COUNT(*) FROM calls WHERE request LIKE '%{MARK}%'") > 0
    assert not list((tmp_path / "workers").glob("worker-*/personagen-task-*"))  # each task cleaned its scratch
    (error,) = _error_lines(logs["keyless"])
    assert keyless == 2 and error.startswith("error: 2 of 2 personas failed (allowed 5%); nothing published; "
                                             "failed: personas 0, 1; first: persona "), error
    assert "WorkerFailed: worker worker-" in error and "OPENAI_API_KEY is not set" in error, error
    assert not (driver / "keyless" / "smoke").exists()
    print(f"\ndriver killed with {kept} calls kept; the rerun made {resumed['usage']['total']['backend_calls']}, "
          f"the template edit {usage['total']['backend_calls']} of {usage['total']['calls']}")


@pytest.mark.slow
def test_a_dask_run_nobody_can_serve_fails_in_one_line(tmp_path, prefect_api):
    """No worker connected: said within the timeout's first half, then one error line, nothing published."""
    driver, log, env = tmp_path / "driver", tmp_path / "idle.log", _env(prefect_api)
    with isolated_cluster(driver, tmp_path / "idle", workers=0, env=env) as address:
        code = run_in_group(_cli("--outputs", str(driver / "out"), "--n", "2", "--runner", "dask", "--dask-address",
                                 address, "--dask-timeout", "4", "--llm", "fake"), log, env=env)
    text = log.read_text()
    assert code == 2 and re.search(r"no Dask worker has taken a task for \d+ s \(", text), text[-3000:]
    assert _error_lines(log) == [f"error: no Dask worker took a task within 4 s ({address}: 0 workers connected); "
                                 "nothing published"], text[-3000:]
    assert "Traceback" not in text and not (driver / "out" / "smoke").exists()
