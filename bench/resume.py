"""Resume benchmark: `personagen generate` killed (like kill -9) halfway through its model calls, then rerun.

Reports the completed calls the rerun sends again (target 0: only calls in flight at the kill are lost),
and the rerun's wall time against an uninterrupted run's (both include Prefect's start-up, a few seconds).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
N = int(os.environ.get("BENCH_RESUME_N", "4"))
FAKE = "fake?latency_s=0.05"  # a model that takes time, so the rerun's saving shows


def _cli(root: Path, llm: str) -> tuple[int, float]:
    """Exit code and wall time of one smoke run into root/out with its cache in root/cache."""
    args = [sys.executable, "-m", "pipeline.cli", "generate", "--profile", "smoke", "--n", str(N), "--workers", "2",
            "--llm", llm, "--outputs", str(root / "out"), "--cache", str(root / "cache" / "llm.sqlite")]
    env = {**os.environ, "PREFECT_LOGGING_LEVEL": "ERROR"}
    started = time.perf_counter()
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        code = proc.wait(timeout=900)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # Prefect's temporary server, left by a killed run
        except ProcessLookupError:
            pass
    return code, time.perf_counter() - started


def _ok_rows(root: Path) -> int:
    with sqlite3.connect(root / "cache" / "llm.sqlite") as db:
        return db.execute("SELECT COUNT(*) FROM calls WHERE status = 'ok'").fetchone()[0]


def _backend_calls(root: Path) -> int:
    manifest = json.loads((root / "out" / "smoke" / "latest" / "manifest.json").read_text(encoding="utf-8"))
    return manifest["usage"]["total"]["backend_calls"]


def run() -> list[dict]:
    """Every figure of this benchmark."""
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        whole, resumed = Path(tmp) / "whole", Path(tmp) / "resumed"
        code, whole_s = _cli(whole, FAKE)
        assert code == 0, f"uninterrupted run exited {code}"
        total = _ok_rows(whole)
        kill_at = total // 2
        code, _ = _cli(resumed, f"{FAKE}&exit_after={kill_at}")
        assert code == 137, f"killed run exited {code}"
        done = _ok_rows(resumed)
        code, resumed_s = _cli(resumed, FAKE)
        assert code == 0, f"rerun exited {code}"
        resent = _backend_calls(resumed)
        repeated = done + resent - _ok_rows(resumed)
    return [
        {"figure": f"kill -9 at call {kill_at} of {total} (smoke N={N}, 50 ms model), rerun: completed calls sent again",
         "value": repeated, "unit": "calls", "target": 0, "ratio": None},
        {"figure": "calls in flight at the kill (lost, re-sent by the rerun)", "value": kill_at - done,
         "unit": "calls", "target": None, "ratio": None},
        {"figure": "model calls the rerun sends (share of an uninterrupted run's)", "value": resent,
         "unit": "calls", "target": None, "ratio": resent / total},
        {"figure": "uninterrupted run: wall time", "value": whole_s, "unit": "s", "target": None, "ratio": None},
        {"figure": "rerun after the kill: wall time", "value": resumed_s, "unit": "s", "target": None,
         "ratio": resumed_s / whole_s},
    ]


if __name__ == "__main__":
    for row in run():
        print(f"{row['figure']:<75} {row['value']:>10.2f} {row['unit']}")
