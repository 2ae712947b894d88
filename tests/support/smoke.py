"""A real published dataset: the smoke profile through every stage with the fake backend, without Prefect.

The same job functions the generate flow calls (persona jobs, the filler pool and its top-up, publish),
run inline, so a test gets what `personagen generate --profile smoke --llm fake` publishes in seconds.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config import load_config
from pipeline.run.card_stats import run_summary
from pipeline.run.filler import complete_filler, filler_inputs
from pipeline.run.jobs import filler_job, persona_job
from pipeline.run.publish import publish_run
from pipeline.run.spec import RunSpec, model_name
from pipeline.s1_personas.sample_personas import sample_personas
from schemas.llm import LLMSettings


def publish_smoke(tmp: Path, *, n_personas: int | None = None, seed: int | None = None) -> Path:
    """Generate and publish the smoke profile under ``tmp/out`` (cache in ``tmp/cache``); the version's path."""
    overrides = {k: v for k, v in {"n_personas": n_personas, "seed": seed}.items() if v is not None}
    config = load_config("smoke", **overrides)
    llm = LLMSettings(llm="fake", cache_path=tmp / "cache" / "llm.sqlite", backoff_s=0)
    spec = RunSpec(config=config, llm=llm, outputs=tmp / "out")
    seeds = sample_personas(config.n_personas, run_seed=config.seed, settings=config.personas)
    jobs = [persona_job(seed, spec) for seed in seeds]
    results = [job.result for job in jobs]
    pool, pool_usage = filler_job(spec)
    items, own = filler_inputs(results)
    filler, dropped, top_up_usage = complete_filler(spec, pool, items, own)
    usage, stats = run_summary(jobs, filler, dropped, [pool_usage, top_up_usage])
    return publish_run(spec, results, filler, usage=usage, failures=[], models=[model_name(spec.llm)],
                       extra_stats=stats)
