"""Flow overhead: N=180 default profile on a zero-latency fake backend, then a resumed rerun.

Reports total time, time outside model calls per persona, the option-only probes and filtering as a
share of the first run (target <= 20%), and the rerun's time as a share of the first run's (target <= 10%,
with zero model calls). One Prefect test server serves both runs, so
its start-up is not counted.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

N = int(os.environ.get("BENCH_FLOW_N", "180"))


def _timed_run(spec) -> tuple[float, dict]:
    from flows.generate import run_generate

    started = time.perf_counter()
    path = run_generate(spec, workers=2)
    elapsed = time.perf_counter() - started
    return elapsed, json.loads((path / "manifest.json").read_text())


def _timed_probe(spec) -> float:
    """The publish step's probe and filter alone, over the first run's personas (from their checkpoints)."""
    from pipeline.run.jobs import reuse_checkpoints
    from pipeline.run.publish import probe_and_filter
    from pipeline.s1_personas.sample_personas import sample_personas

    config = spec.config
    seeds = sample_personas(config.n_personas, run_seed=config.seed, settings=config.personas)
    results = [job.result for _, job in sorted(reuse_checkpoints(seeds, spec).items())]
    started = time.perf_counter()
    probe_and_filter(results, config)
    return time.perf_counter() - started


def run() -> list[dict]:
    from prefect.testing.utilities import prefect_test_harness

    from pipeline.config import load_config
    from pipeline.run.spec import RunSpec
    from schemas.llm import LLMSettings

    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no telemetry from the test server
    with tempfile.TemporaryDirectory() as tmp, prefect_test_harness(server_startup_timeout=180):
        config = load_config("default", n_personas=N)
        # timing only: the gate's verdict is not what this measures, so it may not stop the run
        gate = config.queries.probe.model_copy(update={"max_accuracy": 1.0, "max_type_accuracy": 1.0})
        config = config.model_copy(update={"queries": config.queries.model_copy(update={"probe": gate})})
        spec = RunSpec(config=config, llm=LLMSettings(llm="fake", cache_path=Path(tmp) / "cache" / "llm.sqlite"),
                       outputs=Path(tmp) / "out")
        first, m1 = _timed_run(spec)
        probe = _timed_probe(spec)
        second, m2 = _timed_run(spec)
    calls = m1["usage"]["total"]["backend_calls"]
    return [
        {"figure": f"flow N={N} default profile, fake backend: total", "value": first, "unit": "s",
         "target": None, "ratio": None},
        {"figure": "model calls in the first run", "value": calls, "unit": "calls", "target": None, "ratio": None},
        {"figure": "time outside model calls per persona", "value": first / N, "unit": "s", "target": None,
         "ratio": None},
        {"figure": "option-only probe + adversarial filtering (inside the first run)", "value": probe, "unit": "s",
         "target": 0.20 * first, "ratio": probe / first},
        {"figure": "resumed rerun: total", "value": second, "unit": "s", "target": 0.10 * first,
         "ratio": second / first},
        {"figure": "resumed rerun: model calls", "value": m2["usage"]["total"]["backend_calls"], "unit": "calls",
         "target": 0, "ratio": None},
    ]


if __name__ == "__main__":
    for row in run():
        print(f"{row['figure']:<55} {row['value']:>12.3f} {row['unit']:<6} ratio={row['ratio']}")
