"""Dask against threads: the same run (default profile, zero-latency fake backend) on the thread runner and on
a local Dask cluster of one single-thread worker process per core, one run of each, side by side; and the bytes
each persona task ships (to the worker and back), on a fresh run and when every persona is shipped its earlier
calls (a rerun after a template edit). One Prefect test server serves every run.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

N = int(os.environ.get("BENCH_SCALEOUT_N", "8"))
EDITED = Path("generate_queries") / "query.jinja"


def _timed(spec, **runner) -> tuple[float, dict]:
    from flows.generate import run_generate

    started = time.perf_counter()
    path = run_generate(spec, **runner)
    return time.perf_counter() - started, json.loads((path / "manifest.json").read_text())


def _spec(root: Path):
    from pipeline.config import load_config
    from pipeline.run.spec import RunSpec
    from schemas.llm import LLMSettings

    settings = LLMSettings(llm="fake", cache_path=root / "cache" / "llm.sqlite")
    return RunSpec(config=load_config("default", n_personas=N), llm=settings, outputs=root / "out")


def _edited_prompts(root: Path) -> Path:
    from pipeline.prompting import PromptEnv

    folder = root / "prompts"
    shutil.copytree(PromptEnv().root, folder)
    path = folder / EDITED
    path.write_text(path.read_text().replace("{% block system %}", "{% block system %}\nWord it plainly.", 1))
    return folder


def _warm_up(payload: bytes) -> bytes:
    """A task that loads what a persona task loads first (personagen, its numpy and scikit-learn)."""
    import pipeline.run.remote  # noqa: F401

    return payload


def _cluster_cost(workers: int) -> float:
    """Seconds to start a local cluster, load personagen on each worker and close it again (no persona)."""

    from pipeline.run.cluster import DaskSettings, open_pool

    started = time.perf_counter()
    with open_pool(DaskSettings(workers=workers), lambda text: None) as pool:
        pool.client.gather([pool.client.submit(_warm_up, bytes([i]), pure=False) for i in range(workers)])
    return time.perf_counter() - started


def _per_persona(manifest: dict, key: str) -> float:
    dask = manifest["stats"]["dask"]
    return dask[key] / max(1, dask["tasks"])


def run() -> list[dict]:
    from prefect.testing.utilities import prefect_test_harness

    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    workers = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp, prefect_test_harness(server_startup_timeout=180):
        threads, m_threads = _timed(_spec(Path(tmp, "threads")))
        dask, m_dask = _timed(_spec(Path(tmp, "dask")), runner="dask", workers=workers)
        fixed = _cluster_cost(workers)
        os.environ["PERSONAGEN_PROMPTS"] = str(_edited_prompts(Path(tmp)))
        try:
            _, m_edit = _timed(_spec(Path(tmp, "dask")), runner="dask", workers=workers)
        finally:
            del os.environ["PERSONAGEN_PROMPTS"]
    calls = m_dask["usage"]["total"]["calls"] / N
    return [
        {"figure": f"thread runner, N={N} default profile, fake backend: total", "value": threads, "unit": "s",
         "target": None, "ratio": None},
        {"figure": f"Dask, a local cluster of {workers} worker processes: the same run", "value": dask, "unit": "s",
         "target": threads, "ratio": dask / threads},
        {"figure": "of which the cluster's start, loading personagen on its workers and its close (measured apart)",
         "value": fixed, "unit": "s", "target": None, "ratio": fixed / dask},
        {"figure": f"Dask: bytes to the worker per persona ({calls:.0f} calls, none cached)",
         "value": _per_persona(m_dask, "bytes_to_workers"), "unit": "B", "target": None, "ratio": None},
        {"figure": "Dask: bytes back per persona (its tables, usage and calls)",
         "value": _per_persona(m_dask, "bytes_from_workers"), "unit": "B", "target": None, "ratio": None},
        {"figure": "Dask rerun after a template edit: bytes to the worker per persona (its earlier calls shipped)",
         "value": _per_persona(m_edit, "bytes_to_workers"), "unit": "B", "target": None, "ratio": None},
        {"figure": "Dask rerun after a template edit: model calls (only the edited template's)",
         "value": m_edit["usage"]["total"]["backend_calls"], "unit": "calls",
         "target": m_edit["usage"]["by_stage"].get("generate_queries", {}).get("calls"), "ratio": None},
    ]


if __name__ == "__main__":
    for row in run():
        print(f"{row['figure']:<95} {row['value']:>12,.1f} {row['unit']:<6} ratio={row['ratio']}")
