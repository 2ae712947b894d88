"""ETA benchmark: the first ETA of a smoke run against the loopback OpenAI server with latency, against the
time the run then takes; and `personagen generate --n 2 --profile smoke` on the embedded model from an
empty outputs folder (no cache, no measured engine speeds: as a fresh clone's `make generate N=2
PROFILE=smoke`), its wall time against the ETA its plan printed.

The plan's ETA is made on an empty cache (nothing learnt yet, as on a first run against a new server):
the measuring burst is all it knows. The run is timed from the flow's start to its publish, under a Prefect
test server started beforehand (its start-up is not the run's). Target: the ratio within 1/1.5 and 1.5.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

N = int(os.environ.get("BENCH_ETA_N", "4"))
LATENCY_S = float(os.environ.get("BENCH_ETA_LATENCY_S", "0.3"))
WORKERS = 4


def measure(root: Path) -> tuple[float, float, int]:
    """(first ETA in s, measured run time in s, model calls of the run) against a fresh loopback server."""
    from flows.generate import run_generate
    from pipeline.config import load_config
    from pipeline.llm import LLM
    from pipeline.run.estimate import estimate_run
    from pipeline.run.spec import RunSpec
    from schemas.llm import LLMSettings
    from tests.support.openai_server import OpenAIServer

    config = load_config("smoke", n_personas=N)
    settings = LLMSettings(llm="openai:test-model", cache_path=root / "cache" / "llm.sqlite")
    with OpenAIServer(latency_s=LATENCY_S) as server:
        os.environ.update(OPENAI_API_KEY="sk-bench-loopback", OPENAI_BASE_URL=server.base_url)
        gateway = LLM(settings)
        gateway.preflight()
        estimate = estimate_run(config, gateway, workers=WORKERS)
        gateway.close()
        before = server.requests
        started = time.perf_counter()
        run_generate(RunSpec(config=config, llm=settings, outputs=root / "out"), workers=WORKERS)
        elapsed = time.perf_counter() - started
        calls = server.requests - before
    return estimate.eta_s or 0.0, elapsed, calls


ROOT = Path(__file__).resolve().parents[1]
ETA_ROW = re.compile(r"ETA \(cache misses only\)\W+([\d.]+) (s|min|h)\b")


def embedded_smoke(root: Path) -> tuple[float, float, dict]:
    """(the plan's ETA in s, the command's wall time in s, its usage totals) of the embedded model's smoke run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "OPENAI_", "LLM"))}
    env["COLUMNS"] = "200"
    started = time.perf_counter()
    done = subprocess.run([str(ROOT / ".venv/bin/personagen"), "generate", "--n", "2", "--profile", "smoke",
                           "--llm", "local", "--outputs", str(root / "out")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"embedded smoke run failed: {done.stderr.strip().splitlines()[-1:]}")
    match = ETA_ROW.search(done.stdout)
    value, unit = (float(match[1]), match[2]) if match else (0.0, "s")
    usage = json.loads((root / "out" / "smoke" / "latest" / "manifest.json").read_text())["usage"]["total"]
    return value * {"s": 1, "min": 60, "h": 3600}[unit], wall, usage


def run() -> list[dict]:
    from prefect.testing.utilities import prefect_test_harness

    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    saved = {k: os.environ.get(k) for k in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    try:
        with tempfile.TemporaryDirectory() as tmp, prefect_test_harness(server_startup_timeout=180):
            eta, elapsed, calls = measure(Path(tmp))
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    with tempfile.TemporaryDirectory() as tmp:
        local_eta, local_wall, usage = embedded_smoke(Path(tmp))
    return [
        {"figure": "embedded model, `generate --n 2 --profile smoke` from empty outputs: wall time",
         "value": local_wall, "unit": "s", "target": 157.5, "ratio": local_wall / 157.5},
        {"figure": "  its first ETA against that wall time", "value": local_eta, "unit": "s", "target": "1/1.5-1.5",
         "ratio": local_eta / local_wall},
        {"figure": "  its model calls / re-asks / generated tokens / prompt tokens", "value": usage["backend_calls"],
         "unit": f"/ {usage['reasks']} / {usage['output_tokens']:,} / {usage['input_tokens']:,}", "target": None,
         "ratio": None},
        {"figure": f"smoke N={N}, loopback server {LATENCY_S} s latency: run time", "value": elapsed, "unit": "s",
         "target": None, "ratio": None},
        {"figure": "model calls of the run", "value": calls, "unit": "calls", "target": None, "ratio": None},
        {"figure": "first ETA (empty cache) against the run time", "value": eta, "unit": "s",
         "target": "1/1.5-1.5", "ratio": eta / elapsed if elapsed else None},
    ]


if __name__ == "__main__":
    for row in run():
        print(f"{row['figure']:<60} {row['value']:>10.2f} {row['unit']:<6} ratio={row['ratio']}")
