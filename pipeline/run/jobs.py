"""The run's jobs without Prefect: one persona end to end (or its checkpoint), and the model-written filler pool.

flows/ wraps these functions in Prefect tasks; everything here is plain, testable Python. The rest of a run
lives beside it: ``spec`` (what a run is, its fingerprint), ``filler`` (the top-up), ``publish`` (the gates,
assembly and the published version) and ``card_stats`` (the manifest's statistics).
"""

from __future__ import annotations

from pydantic import BaseModel

from pipeline.llm import LLM
from pipeline.llm.cache import LLMCache
from pipeline.run.checkpoint import PersonaResult
from pipeline.run.persona_text import build_persona_text
from pipeline.run.spec import RunSpec, fingerprint, model_name
from pipeline.s3_text.filler import (
    write_filler_pool,
)
from pipeline.s4_queries.generate_queries import generate_queries
from schemas.conversation import SessionWithTurns
from schemas.ids import digest
from schemas.llm import UsageSummary
from schemas.persona import PersonaSeed


class JobResult(BaseModel):
    result: PersonaResult
    usage: UsageSummary
    from_checkpoint: bool


def persona_tag(seed: PersonaSeed, llm_name: str) -> str:
    """What the cache records with each call a persona makes (not part of the key): the persona's seed and the
    model, so a Dask driver can ship a persona's earlier calls to the worker that runs it again."""
    return digest("persona", llm_name, seed.source, seed.text, length=16)


def persona_job(seed: PersonaSeed, spec: RunSpec) -> JobResult:
    """One persona end to end (text stages + queries), or its checkpoint when nothing changed."""
    name = model_name(spec.llm)
    key = fingerprint(spec, name)
    cached = spec.checkpoints.load(seed, key)
    if cached is not None:
        return JobResult(result=cached, usage=UsageSummary(), from_checkpoint=True)
    llm = LLM(spec.llm, cache=LLMCache(spec.llm.cache_path, tag=persona_tag(seed, name)))
    made = make_persona(seed, spec, llm)
    usage = llm.usage_summary()
    result = made.model_copy(update={"usage": usage})
    if not usage.total.transport_failures:  # a persona with unanswered calls is asked again by a rerun
        spec.checkpoints.save(seed, key, result)
    return JobResult(result=result, usage=usage, from_checkpoint=False)


def make_persona(seed: PersonaSeed, spec: RunSpec, llm: LLM) -> PersonaResult:
    """Stages 2-6 of one persona through ``llm``; reads and writes no checkpoint (a Dask worker runs this too)."""
    text = build_persona_text(seed, config=spec.config, llm=llm)
    queries, stats = generate_queries(text.persona, text.timeline, text.sessions, llm=llm, config=spec.config,
                                     inventory=text.inventory)
    return PersonaResult(text=text, queries=queries, query_stats=stats.model_dump(mode="json"))


def reuse_checkpoints(seeds: list[PersonaSeed], spec: RunSpec) -> dict[int, JobResult]:
    """Every persona whose checkpoint matches this run, loaded, by seed index.

    One call for all of them: the flow runs it as a single task, so a rerun does not pay an
    orchestrator task per finished persona (that cost more than loading the checkpoints).
    """
    key = fingerprint(spec, model_name(spec.llm))
    found = {}
    for seed in seeds:
        result = spec.checkpoints.load(seed, key)
        if result is not None:
            found[seed.index] = JobResult(result=result, usage=UsageSummary(), from_checkpoint=True)
    return found


def filler_job(spec: RunSpec) -> tuple[list[SessionWithTurns], UsageSummary]:
    """The dataset's model-written filler pool (cached per call like everything else); none for ShareGPT filler."""
    if spec.config.filler.source == "sharegpt":
        return [], UsageSummary()
    llm = LLM(spec.llm)
    return write_filler_pool(llm=llm, config=spec.config), llm.usage_summary()




def made_already(spec: RunSpec) -> int:
    """How many of the run's personas have a checkpoint that matches it: a rerun makes none of their calls (a file
    that exists is counted; a torn one is made again, as ``reuse_checkpoints`` finds)."""
    from pipeline.s1_personas.sample_personas import sample_personas

    seeds = sample_personas(spec.config.n_personas, run_seed=spec.config.seed, settings=spec.config.personas)
    key = fingerprint(spec, model_name(spec.llm))
    return sum(spec.checkpoints.path(seed, key).is_file() for seed in seeds)
