"""Scheduled refresh: a `refresh-benchmark` deployment that publishes a new version on a cron.

`make serve` starts (or reuses) a local Prefect server on loopback and serves this deployment;
to use an existing server instead, set PREFECT_API_URL before `python -m flows.schedules serve`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prefect import flow

from flows.generate import generate_benchmark, task_runner_for
from pipeline.config import load_config
from pipeline.dataset import versions
from pipeline.rng import derive_seed
from pipeline.run.spec import RunSpec
from schemas.config import RunConfig
from schemas.llm import LLMSettings


def refresh_seed(config: RunConfig, outputs: Path) -> int:
    """fixed: the profile's seed (only what changed is regenerated); roll: a new seed per published version."""
    if config.refresh.seed_policy == "fixed":
        return config.seed
    published = len(versions(outputs / config.dataset))
    return derive_seed(config.seed, "refresh", published) % 2**31


@flow(name="refresh-benchmark", persist_result=False)
def refresh_benchmark(profile: str = "default", n: int | None = None, llm: str | None = None,
                      outputs: str = "outputs", cache: str = "outputs/.cache/llm.sqlite",
                      workers: int | None = None) -> str:
    """Publish a new version with the profile's refresh policy, then apply its retention; ``workers``
    personas at once (default: as many as the backend takes calls in flight)."""
    config = load_config(profile, n_personas=n)
    config = config.model_copy(update={"seed": refresh_seed(config, Path(outputs))})
    spec = RunSpec(config=config, llm=LLMSettings(llm=llm, cache_path=Path(cache)), outputs=Path(outputs),
                   keep=config.refresh.keep)
    return generate_benchmark.with_options(task_runner=task_runner_for(spec, workers=workers))(spec)


def serve(profile: str, n: int | None, llm: str | None, outputs: str, interval: float | None) -> None:
    """Serve the deployment on the profile's cron (or a fixed interval in seconds, for tests)."""
    config = load_config(profile, n_personas=n)
    schedule = {"interval": interval} if interval else {"cron": config.refresh.cron}
    refresh_benchmark.serve(
        name="refresh-benchmark",
        parameters={"profile": profile, "n": n, "llm": llm, "outputs": outputs,
                    "cache": str(Path(outputs) / ".cache" / "llm.sqlite")},
        **schedule,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--profile", default="default")
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--llm", default=None)
    parser.add_argument("--outputs", default="outputs")
    parser.add_argument("--interval", type=float, default=None, help="seconds between runs instead of the cron")
    args = parser.parse_args()
    serve(args.profile, args.n, args.llm, args.outputs, args.interval)


if __name__ == "__main__":
    main()
