"""Embedded-model throughput: llama.cpp's own llama-batched-bench against the pipeline's requests on our engine.

1. ``llama-batched-bench`` (built by ``make bench`` from the llama.cpp sources of the installed
   llama-cpp-python; ``LLAMA_BATCHED_BENCH`` names the binary) on the same GGUF and threads: 400-token
   prompts, 128 generated tokens, 1 to 16 parallel sequences. Its best generated tokens/s (S_TG) and best
   total tokens/s (S, prompts included) are the hardware's figures.
2. The pipeline's own requests: every request a smoke-profile run of ``REPLAY_PERSONAS`` personas sends (its
   prompts, JSON-schema grammars and token caps, recorded from the fake backend), replayed through the
   ``local`` backend with ``max_concurrency`` calls in flight, as the run keeps them.
3. Prompt tokens per generated token of the default profile (the fake backend, a persona's every call).
4. The README's commands on the embedded model: the smoke run itself (`generate --n 2 --profile smoke --llm
   local`; its engine counters from the manifest's stats.engine) against (1)'s single stream and best S_TG, and
   the `make generate N=180` plan's hours against the floor of (1)'s best speeds for the tokens it plans.

The replay's generated tokens per second of decoding are set against (1)'s best S_TG; its prompt-evaluated
plus generated tokens per second of wall time against (1)'s best S.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipeline.config import load_config  # noqa: E402
from pipeline.llm import LLM  # noqa: E402
from pipeline.llm.backends import BackendRequest  # noqa: E402
from pipeline.llm.local import LocalBackend, default_model_path  # noqa: E402
from pipeline.run.persona_text import build_persona_text  # noqa: E402
from pipeline.s1_personas.sample_personas import sample_personas  # noqa: E402
from pipeline.s4_queries.generate_queries import generate_queries  # noqa: E402
from schemas.llm import LLMSettings  # noqa: E402

WIDTHS = "1,4,8,16"
REPLAY_PERSONAS = int(os.environ.get("BENCH_ENGINE_PERSONAS", "4"))  # 60 calls: the tail of a short replay is not its steady state
SLOTS = LLMSettings().max_concurrency  # as a run keeps them


def _row(figure: str, value: float, unit: str, target: float | None = None, ratio: float | None = None) -> dict:
    return {"figure": figure, "value": round(value, 3), "unit": unit, "target": target,
            "ratio": round(ratio, 3) if ratio is not None else None}


def batched_bench(binary: Path, threads: int) -> list[dict]:
    """llama-batched-bench's rows (one per parallel width), as its JSONL output gives them."""
    from pipeline.llm.local import OMP_SETTINGS  # importing it sets the engine's OpenMP defaults

    env = {**os.environ, **{k: os.environ[k] for k in OMP_SETTINGS if k in os.environ}}  # as the engine runs
    out = subprocess.run(
        [str(binary), "-m", str(default_model_path()), "-c", "16384", "-b", "2048", "-ub", "512", "-npp", "400",
         "-ntg", "128", "-npl", WIDTHS, "-t", str(threads), "--output-format", "jsonl"],
        capture_output=True, text=True, check=True, env=env, timeout=1800).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


class _Recorder:
    """The fake backend, recording every request it is sent."""

    def __init__(self, backend) -> None:
        self.inner, self.requests = backend, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def complete(self, request: BackendRequest):
        self.requests.append(request)
        return await self.inner.complete(request)


def pipeline_requests(profile: str, personas: int, workdir: Path) -> tuple[list[BackendRequest], LLM]:
    """Every request the text and query stages of ``personas`` personas of ``profile`` send (fake backend)."""
    config = load_config(profile, n_personas=personas)
    llm = LLM(LLMSettings(llm="fake", cache_path=workdir / f"fake-{profile}.sqlite"))
    llm.backend = recorder = _Recorder(llm.backend)
    for seed in sample_personas(personas, run_seed=config.seed, settings=config.personas):
        text = build_persona_text(seed, config=config, llm=llm)
        generate_queries(text.persona, text.timeline, text.sessions, llm=llm, config=config)
    return recorder.requests, llm


def replay(requests: list[BackendRequest], slots: int) -> dict:
    """The requests through the local backend, ``slots`` in flight; wall time and the engine's counters."""
    backend = LocalBackend(None, LLMSettings(llm="local", max_concurrency=slots))
    backend.preflight()
    engine = backend.loaded().engine
    before = engine.stats.__dict__.copy()

    async def main() -> list:
        gate = asyncio.Semaphore(slots)

        async def one(request: BackendRequest):
            async with gate:
                return await backend.complete(request)

        return await asyncio.gather(*(one(r) for r in requests))

    started = time.perf_counter()
    replies = asyncio.run(main())
    wall = time.perf_counter() - started
    stats = {k: v - before[k] for k, v in engine.stats.__dict__.items()}
    return {"wall_s": wall, "replies": replies, **stats}


def run() -> list[dict]:
    """Every figure of this benchmark."""
    binary = Path(os.environ.get("LLAMA_BATCHED_BENCH", ROOT / ".venv/llama.cpp/bin/llama-batched-bench"))
    threads = os.cpu_count() or 1
    rows: list[dict] = []
    best_tg = best_total = None
    if binary.is_file():
        table = batched_bench(binary, threads)
        best_tg = max(table, key=lambda r: r["speed_tg"])
        best_total = max(table, key=lambda r: r["speed"])
        single = next(r for r in table if r["pl"] == 1)
        rows += [
            _row("llama-batched-bench: generated tokens/s, 1 sequence", single["speed_tg"], "tokens/s"),
            _row(f"llama-batched-bench: best generated tokens/s (S_TG, {best_tg['pl']} sequences)",
                 best_tg["speed_tg"], "tokens/s"),
            _row(f"llama-batched-bench: best total tokens/s (S, {best_total['pl']} sequences)",
                 best_total["speed"], "tokens/s"),
            _row("llama-batched-bench: prompt tokens/s, 1 sequence", single["speed_pp"], "tokens/s"),
        ]
    else:
        rows.append(_row(f"llama-batched-bench not built ({binary}); run `make bench`", 0, ""))
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as tmp:
        requests, _ = pipeline_requests("smoke", REPLAY_PERSONAS, Path(tmp))
        result = replay(requests, SLOTS)
        _, fake = pipeline_requests("default", 1, Path(tmp))
    generated = result["generated"]
    decode_rate = generated / result["decode_s"]
    total_rate = (generated + result["prompt_evaluated"]) / result["wall_s"]
    rows += [
        _row(f"pipeline requests replayed (smoke, {REPLAY_PERSONAS} personas), {SLOTS} in flight", len(requests),
             "calls"),
        _row("  generated tokens / prompt tokens sent / prompt tokens evaluated",
             generated, f"/ {result['prompt_tokens']:,} / {result['prompt_evaluated']:,}"),
        _row("  generated tokens/s while decoding, against llama-batched-bench's best S_TG", decode_rate, "tokens/s",
             best_tg["speed_tg"] if best_tg else None, decode_rate / best_tg["speed_tg"] if best_tg else None),
        _row("  generated + evaluated prompt tokens/s of wall time, against its best S", total_rate, "tokens/s",
             best_total["speed"] if best_total else None, total_rate / best_total["speed"] if best_total else None),
        _row("  generated tokens/s of wall time", generated / result["wall_s"], "tokens/s"),
        _row("  mean sequences per decoding pass", generated / max(result["decode_steps"], 1), "sequences"),
        _row("  graph evaluations per decoding pass (llama.cpp splits a pass at every gap in the slots)",
             result["ubatches"] / max(result["decode_steps"], 1), f"per pass ({result['moves']} moves)"),
        _row("  prompt tokens evaluated / sent (prefix reuse)", result["prompt_evaluated"] / result["prompt_tokens"],
             "ratio"),
        _row("  tokens the grammar rejected (resampled) / of those, over the whole vocabulary",
             result["grammar_resamples"] / max(generated, 1), f"share / {result['grammar_full']}"),
    ]
    rows += embedded_run_rows(table if binary.is_file() else [])
    total = fake.usage_summary().total
    rows.append(_row("default profile (fake backend, 1 persona): prompt tokens sent per generated token",
                     total.input_tokens / total.output_tokens, "ratio", 1.0, total.input_tokens / total.output_tokens))
    return rows


def embedded_run_rows(table: list[dict]) -> list[dict]:
    """The README's own commands on the embedded model: `generate --n 2 --profile smoke --llm local` (its engine
    counters, manifest stats.engine, against llama-batched-bench in this session), and the plan of
    `make generate N=180` (its hours against the floor of llama-batched-bench's best speeds for the tokens it
    plans: generated ones at the best S_TG, evaluated prompt ones at the best prompt speed)."""
    from bench.eta import embedded_smoke
    from pipeline.config import with_writing
    from pipeline.run.estimate import PROMPT_EVALUATED_TURNS, estimate_run
    from pipeline.run.spec import default_workers

    with tempfile.TemporaryDirectory(prefix="bench-embedded-") as tmp:
        _, wall, _ = embedded_smoke(Path(tmp))
        engine = json.loads((Path(tmp) / "out" / "smoke" / "latest" / "manifest.json").read_text())["stats"]["engine"]
        settings = LLMSettings(llm="local", cache_path=Path(tmp) / "plan" / "llm.sqlite")
        llm = LLM(settings)
        config = with_writing(load_config("default"), llm)
        plan = estimate_run(config, llm, workers=default_workers(settings))
        llm.close()
    rate = engine["generated_per_decode_s"]
    best_tg = max(table, key=lambda r: r["speed_tg"]) if table else None
    single = next((r for r in table if r["pl"] == 1), None)
    rows = [
        _row("embedded smoke run (generate --n 2 --profile smoke --llm local): wall time", wall, "s", 93, wall / 93),
        _row("  generated tokens/s while decoding, against llama-batched-bench's single stream", rate, "tokens/s",
             single["speed_tg"] if single else None, rate / single["speed_tg"] if single else None),
        _row("  the same, against llama-batched-bench's best S_TG", rate, "tokens/s",
             best_tg["speed_tg"] if best_tg else None, rate / best_tg["speed_tg"] if best_tg else None),
        _row("  mean sequences per decoding pass", engine["mean_width"], "sequences"),
        _row("  prompt tokens evaluated per generated token", engine["evaluated_per_generated"], "ratio", 0.6,
             engine["evaluated_per_generated"] / 0.6),
        _row("  prompt tokens evaluated / sent (prefix reuse)", engine["evaluated_per_sent"], "ratio"),
    ]
    if best_tg and single:
        floor = (plan.output_tokens / best_tg["speed_tg"]
                 + plan.input_tokens * PROMPT_EVALUATED_TURNS / max(r["speed_pp"] for r in table))
        rows.append(_row("`make generate N=180` plan (default profile, embedded model): ETA, against the floor of "
                         "llama-batched-bench's best speeds for its tokens", plan.eta_s / 3600, "h", floor / 3600,
                         plan.eta_s / floor))
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
