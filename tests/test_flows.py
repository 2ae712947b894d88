"""The generate-benchmark flow under Prefect's test harness, with the fake backend."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import load_config
from pipeline.dataset import load
from pipeline.run.spec import RunSpec
from schemas.llm import LLMSettings
from tests.support.procs import kill_group, run_in_group, start_in_group

REPO = Path(__file__).resolve().parents[1]
TABLES = ["personas", "preferences", "events", "event_edges", "sessions", "turns", "queries", "contexts", "placements"]


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


def spec_for(tmp: Path, n: int, *, cache: Path | None = None) -> RunSpec:
    config = load_config("smoke", n_personas=n, seed=11)
    llm = LLMSettings(llm="fake", cache_path=cache or tmp / "cache" / "llm.sqlite", backoff_s=0)
    return RunSpec(config=config, llm=llm, outputs=tmp / "out")


def table_bytes(version: Path) -> dict[str, bytes]:
    return {name: (version / f"{name}.parquet").read_bytes() for name in TABLES}


def manifest(version: Path) -> dict:
    import json

    return json.loads((version / "manifest.json").read_text())


def test_flow_publishes_then_reruns_byte_identical_with_zero_model_calls(harness, tmp_path):
    from flows.generate import run_generate

    spec = spec_for(tmp_path, 3)
    first = run_generate(spec, workers=2)
    assert first.name == "v0001"
    ds = load(first)
    assert len(ds.personas) == 3 and ds.queries and ds.placements
    assert manifest(first)["usage"]["total"]["backend_calls"] > 0
    second = run_generate(spec, workers=2)
    assert second.name == "v0002"
    assert table_bytes(first) == table_bytes(second)
    assert manifest(second)["usage"]["total"]["backend_calls"] == 0
    assert manifest(second)["stats"]["personas_from_checkpoint"] == 3


def test_growing_n_reuses_finished_personas(harness, tmp_path):
    from flows.generate import run_generate

    run_generate(spec_for(tmp_path, 2), workers=2)
    grown = run_generate(spec_for(tmp_path, 3), workers=2)
    assert manifest(grown)["stats"]["personas_from_checkpoint"] == 2


def test_killed_run_resumes_with_each_request_sent_once(tmp_path):
    """A run killed at the 20th model call (like kill -9) reruns to completion; no request is sent twice."""
    env = {**os.environ, "PREFECT_LOGGING_LEVEL": "ERROR"}
    cache = tmp_path / "cache" / "llm.sqlite"
    base = [sys.executable, "-m", "pipeline.cli", "generate", "--profile", "smoke", "--n", "2", "--seed", "5",
            "--outputs", str(tmp_path / "out"), "--cache", str(cache), "--workers", "1"]
    killed = _run_cli([*base, "--llm", "fake?exit_after=20"], env, tmp_path / "killed.log")
    assert killed == 137, (tmp_path / "killed.log").read_text()[-2000:]
    rows_after_kill = _ok_rows(cache)
    assert 0 < rows_after_kill <= 20  # calls are committed as they finish; in-flight ones die with the process
    done = _run_cli([*base, "--llm", "fake"], env, tmp_path / "resumed.log")
    assert done == 0, (tmp_path / "resumed.log").read_text()[-2000:]
    (version,) = (tmp_path / "out" / "smoke").glob("v0*")
    resumed_calls = manifest(version)["usage"]["total"]["backend_calls"]
    assert rows_after_kill + resumed_calls == _ok_rows(cache)  # every distinct request reached the model once


@pytest.mark.slow
def test_sigterm_stops_a_run_promptly_and_cleanly_and_a_rerun_continues(tmp_path):
    """SIGTERM mid-run: queued model calls are dropped, one error line, exit 143, Prefect's server gone."""
    import time

    env = {**os.environ, "PREFECT_LOGGING_LEVEL": "ERROR"}
    cache = tmp_path / "cache" / "llm.sqlite"
    base = [sys.executable, "-m", "pipeline.cli", "generate", "--profile", "smoke", "--n", "2", "--seed", "5",
            "--outputs", str(tmp_path / "out"), "--cache", str(cache), "--workers", "2"]
    log = tmp_path / "stopped.log"
    proc = start_in_group([*base, "--llm", "fake?latency_s=0.3"], log, env=env)
    try:
        while _ok_rows_so_far(cache) < 5:  # the run may be creating the cache right now
            assert proc.poll() is None, log.read_text()[-2000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)  # without the stop, the run went on to its last call
        time.sleep(1)
        left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    finally:
        kill_group(proc)
    text = log.read_text()
    assert code == 143 and "error: interrupted" in text and "Traceback" not in text, text[-2000:]
    assert left == []  # the temporary Prefect server was shut down with the run
    assert not (tmp_path / "out" / "smoke").exists() or not list((tmp_path / "out" / "smoke").glob("v0*"))
    stopped_rows = _ok_rows(cache)
    assert _run_cli([*base, "--llm", "fake"], env, tmp_path / "resumed.log") == 0
    (version,) = (tmp_path / "out" / "smoke").glob("v0*")
    assert stopped_rows + manifest(version)["usage"]["total"]["backend_calls"] == _ok_rows(cache)


@pytest.mark.slow
def test_ctrl_c_to_the_process_group_stops_in_seconds_and_a_rerun_continues(tmp_path):
    """A terminal's Ctrl-C signals the whole group (Prefect's temporary server too): within 10 s, exit 130,
    one error line, no traceback, no server left; the rerun repeats no completed call."""
    import time

    env = {**os.environ, "PREFECT_LOGGING_LEVEL": "ERROR"}
    cache = tmp_path / "cache" / "llm.sqlite"
    base = [sys.executable, "-m", "pipeline.cli", "generate", "--profile", "smoke", "--n", "4", "--seed", "5",
            "--outputs", str(tmp_path / "out"), "--cache", str(cache), "--workers", "4"]
    log = tmp_path / "interrupted.log"
    proc = start_in_group([*base, "--llm", "fake?latency_s=0.2"], log, env=env)
    try:
        while _ok_rows_so_far(cache) < 12:
            assert proc.poll() is None, log.read_text()[-2000:]
            time.sleep(0.2)
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        os.killpg(proc.pid, signal.SIGINT)
        started = time.monotonic()
        code = proc.wait(timeout=30)
        took = time.monotonic() - started
    finally:
        kill_group(proc)
    text = log.read_text()
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert code == 130 and took < 10, (code, took, text[-3000:])
    assert errors == [text.strip().splitlines()[-1]] and "interrupted" in errors[0], text[-3000:]
    assert "Traceback" not in text and "Aborted" not in text, text[-3000:]
    assert children and not [pid for pid in children if Path(f"/proc/{pid}").exists()]  # the server is gone
    assert not list((tmp_path / "out" / "smoke").glob("v0*"))
    stopped_rows = _ok_rows(cache)
    assert _run_cli([*base, "--llm", "fake"], env, tmp_path / "resumed.log") == 0
    (version,) = (tmp_path / "out" / "smoke").glob("v0*")
    assert stopped_rows + manifest(version)["usage"]["total"]["backend_calls"] == _ok_rows(cache)
    print(f"\nCtrl-C to the group: exit {code} after {took:.1f} s, {stopped_rows} calls kept")


@pytest.mark.slow
def test_losing_the_prefect_server_mid_run_is_one_line_at_once_and_a_rerun_resumes(tmp_path):
    """The temporary server killed mid-run: within seconds, exit 1, one error line, no traceback (it was a
    146 s stall in Prefect's client retries, then an httpx traceback); the rerun repeats no completed call."""
    import time

    env, cache, base = _generate(tmp_path)
    log = tmp_path / "lost.log"
    proc = _started([*base, "--llm", "fake?latency_s=0.3"], log, env, cache, rows=5)
    try:
        (server,) = subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "uvicorn"], capture_output=True,
                                   text=True).stdout.split()
        os.kill(int(server), signal.SIGKILL)
        started = time.monotonic()
        code = proc.wait(timeout=60)
        took = time.monotonic() - started
    finally:
        kill_group(proc)
    text = log.read_text()
    assert code == 1 and "Traceback" not in text, text[-2000:]
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "stopped mid-run" in errors[0] and "rerun the same command" in errors[0]
    assert took < 15, took
    assert not (tmp_path / "out" / "smoke").exists() or not list((tmp_path / "out" / "smoke").glob("v0*"))
    stopped_rows = _ok_rows(cache)
    assert _run_cli([*base, "--llm", "fake"], env, tmp_path / "resumed.log") == 0
    (version,) = (tmp_path / "out" / "smoke").glob("v0*")
    assert stopped_rows + manifest(version)["usage"]["total"]["backend_calls"] == _ok_rows(cache)


def _generate(tmp_path: Path) -> tuple[dict, Path, list[str]]:
    """(env, cache, the generate command without --llm) of a 2-persona smoke run under ``tmp_path``."""
    cache = tmp_path / "cache" / "llm.sqlite"
    return ({**os.environ, "PREFECT_LOGGING_LEVEL": "ERROR"}, cache,
            [sys.executable, "-m", "pipeline.cli", "generate", "--profile", "smoke", "--n", "2", "--seed", "5",
             "--outputs", str(tmp_path / "out"), "--cache", str(cache), "--workers", "2"])


def _started(args: list[str], log: Path, env: dict, cache: Path, rows: int) -> subprocess.Popen:
    """The CLI started in its own process group, returned once ``rows`` calls are cached."""
    import time

    proc = start_in_group(args, log, env=env)
    while _ok_rows_so_far(cache) < rows:
        if proc.poll() is not None:
            kill_group(proc)
            raise AssertionError(log.read_text()[-2000:])
        time.sleep(0.2)
    return proc


def test_a_configured_prefect_api_is_lost_after_three_unanswered_health_checks():
    """With PREFECT_API_URL set, the watch asks its /health: one miss is a blip, three in a row are a loss."""
    import http.server
    import threading

    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.server import HEALTH_MISSES, api_lost_reason

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200 if self.path == "/api/health" else 404)
            self.end_headers()

        def log_message(self, *_):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/api"
    misses = [0]
    with temporary_settings({PREFECT_API_URL: url}):
        assert api_lost_reason(misses) is None and misses == [0]
        server.shutdown()
        server.server_close()
        found = [api_lost_reason(misses) for _ in range(HEALTH_MISSES)]
    assert found[:-1] == [None] * (HEALTH_MISSES - 1)
    assert found[-1] == f"the Prefect API at PREFECT_API_URL {url} stopped answering mid-run"


def _run_cli(args: list[str], env: dict, log: Path) -> int:
    """Run the CLI in its own process group; afterwards kill what it left (Prefect's temporary server)."""
    return run_in_group(args, log, env=env)


def _ok_rows_so_far(cache: Path) -> int:
    """Completed calls in a cache another process may be creating right now (0 until its table exists)."""
    try:
        return _ok_rows(cache) if cache.exists() else 0
    except sqlite3.OperationalError:
        return 0


def _ok_rows(cache: Path) -> int:
    with sqlite3.connect(cache) as db:
        return db.execute("SELECT COUNT(*) FROM calls WHERE status = 'ok'").fetchone()[0]


@pytest.mark.slow
def test_dask_runner_gives_the_same_tables_as_threads(harness, tmp_path):
    from flows.generate import run_generate

    threads = run_generate(spec_for(tmp_path / "a", 4), workers=2)
    dask = run_generate(spec_for(tmp_path / "b", 4), runner="dask", workers=2)
    assert table_bytes(threads) == table_bytes(dask)


def test_filler_top_up_asks_for_what_the_shortfall_needs(tmp_path):
    from pipeline.run.filler import FILLER_BATCH_MAX, complete_filler, top_up_size
    from pipeline.s3_text.filler import filler_need

    spec = spec_for(tmp_path, 2)
    spec.config.filler.source = "llm"  # the model-written pool is what gets topped up
    need = filler_need(spec.config, [1000])
    assert need == 2000 - 1000 + 200  # smoke: largest budget 2,000, margin a tenth of it
    kept, dropped, usage = complete_filler(spec, [], set(), [1000])
    sizes = [s.session.n_tokens for s in kept]
    assert sum(sizes) >= need and not dropped
    calls = usage.by_stage["filler"].calls if "filler" in usage.by_stage else usage.total.calls
    mean = sum(sizes) / len(sizes)
    assert calls == len(kept) <= 1.25 * need / mean + 2  # sized rounds, not batches of a fixed 16
    assert top_up_size(10, [], spec.config) == 1
    assert top_up_size(10**9, kept, spec.config) == FILLER_BATCH_MAX
    assert top_up_size(1000, kept[:2], spec.config) == math.ceil(1250 / (sum(sizes[:2]) / 2))
    spec.config.filler.source = "sharegpt"  # the default: real conversations, no model call
    kept, _, usage = complete_filler(spec, [], set(), [1000])
    assert sum(s.session.n_tokens for s in kept) >= need and usage.total.calls == 0
    assert {s.session.provenance["source"] for s in kept} == {"sharegpt"}


def test_a_rerun_reuses_the_probe_and_filter_outcome(tmp_path, monkeypatch):
    """The run-level probe is fitted once per run fingerprint and persona set; a rerun publishes the same queries."""
    import pipeline.run.publish as publishing
    from tests.support.smoke import publish_smoke

    calls = []
    real = publishing.filter_queries
    monkeypatch.setattr(publishing, "filter_queries", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = publish_smoke(tmp_path)
    second = publish_smoke(tmp_path)
    assert len(calls) == 1
    assert load(first).queries == load(second).queries
    assert manifest(first)["stats"]["probe"] == manifest(second)["stats"]["probe"]


def test_a_served_run_logs_where_it_stands_while_it_is_quiet():
    import time

    from flows.generate import _standing
    from flows.progress import heartbeat
    from pipeline.llm.local import engine_counters

    lines: list[str] = []
    done: dict = {0: object()}
    with heartbeat(lambda: _standing(done, 3, time.monotonic(), engine_counters()), lines.append, every=0.05):
        deadline = time.monotonic() + 5
        while len(lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    count = len(lines)
    time.sleep(0.15)
    assert count >= 2 and len(lines) == count  # stops with the block
    assert lines[0].startswith("1 of 3 personas done after 0 min (making personas)"), lines
