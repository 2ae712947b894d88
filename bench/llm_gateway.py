"""Gateway benchmark: HTTP throughput at concurrency 16 and the cache-hit rate (the embedded model: engine.py).

Run standalone (`python bench/llm_gateway.py`) for a table, or call `run()` for rows of
{figure, value, unit, target, ratio}.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipeline.llm import LLM  # noqa: E402
from pipeline.specs import PING  # noqa: E402
from schemas.llm import LLMSettings, PingContext  # noqa: E402

LATENCY_S = 0.2
CONCURRENCY = 16
HTTP_CALLS = 960  # 60 rounds of 16: steady state, as in a long run (320 calls lose ~3% to the ramp)
MODEL_RUNS = 6


def _contexts(count: int, prefix: str) -> list[PingContext]:
    return [PingContext(persona=f"{prefix} persona number {i}", topic="books") for i in range(count)]


@contextmanager
def _loopback_server(latency_s: float):
    """The loopback OpenAI-compatible server in its own process (its own core and GIL), env pointed at it."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.openai_server", str(latency_s)], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        with _openai_env(proc.stdout.readline().strip()):
            yield
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


@contextmanager
def _openai_env(base_url: str):
    """Point the openai backend at `base_url` for the duration."""
    saved = {name: os.environ.get(name) for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    os.environ.update(OPENAI_API_KEY="sk-bench", OPENAI_BASE_URL=base_url)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _row(figure: str, value: float, unit: str, target: float | None) -> dict:
    return {"figure": figure, "value": round(value, 2), "unit": unit, "target": target,
            "ratio": round(value / target, 3) if target else None}


def bench_http(workdir: Path) -> list[dict]:
    """calls/s through the openai path against a 200 ms server, then the same calls as cache hits."""
    ideal = CONCURRENCY / LATENCY_S
    with _loopback_server(LATENCY_S):
        settings = LLMSettings(llm="openai:test-model", max_concurrency=CONCURRENCY, cache_path=workdir / "http.sqlite")
        llm = LLM(settings)
        llm.preflight()
        llm.generate_many(PING, _contexts(CONCURRENCY, "warm-up"))
        contexts = _contexts(HTTP_CALLS, "http")
        started = time.perf_counter()
        llm.generate_many(PING, contexts)
        http_rate = HTTP_CALLS / (time.perf_counter() - started)
        sent = llm.usage_summary().total.backend_calls
        started = time.perf_counter()
        llm.generate_many(PING, contexts)
        hit_rate = HTTP_CALLS / (time.perf_counter() - started)
        assert llm.usage_summary().total.backend_calls == sent, "cache hits must not reach the server"
    return [
        _row(f"openai path calls/s at concurrency {CONCURRENCY}, {int(LATENCY_S * 1000)} ms latency",
             http_rate, "calls/s", ideal),
        _row("cache-hit calls/s", hit_rate, "calls/s", None),
    ]


def run() -> list[dict]:
    """Every figure of this benchmark."""
    with tempfile.TemporaryDirectory(prefix="bench-llm-") as tmp:
        return bench_http(Path(tmp))


def main() -> None:
    """Print the figures as a table."""
    rows = run()
    print(f"{'figure':<62} {'value':>10} {'unit':<9} {'target':>8} {'ratio':>6}")
    for row in rows:
        target = "" if row["target"] is None else f"{row['target']:.1f}"
        ratio = "" if row["ratio"] is None else f"{row['ratio']:.2f}"
        print(f"{row['figure']:<62} {row['value']:>10.1f} {row['unit']:<9} {target:>8} {ratio:>6}")


if __name__ == "__main__":
    main()
