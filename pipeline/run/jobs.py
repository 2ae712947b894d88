"""Run-level orchestration without Prefect: per-persona jobs, the filler pool, assembly and publishing.

flows/ wraps these functions in Prefect tasks; everything here is plain, testable Python.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from pipeline.checks.quality import Origin, count
from pipeline.checks.stance import stance_problem
from pipeline.dataset import publish
from pipeline.errors import UserError
from pipeline.llm import LLM
from pipeline.llm.cache import LLMCache
from pipeline.llm.factory import backend_name, resolve_backend_string
from pipeline.prompting import PromptEnv
from pipeline.run.checkpoint import Checkpoints, FilteredQueries, PersonaResult, run_fingerprint
from pipeline.run.estimate import OUTPUT_TOKENS
from pipeline.run.persona_text import build_persona_text
from pipeline.s3_text.filler import (
    filler_need,
    filler_sources,
    filter_filler,
    sharegpt_filler,
    write_filler_pool,
)
from pipeline.s4_queries.filtering import filter_queries
from pipeline.s4_queries.generate_queries import generate_queries
from pipeline.s5_assembly.assemble_contexts import assemble_all
from pipeline.specs import ALL_SPECS
from schemas.config import RunConfig
from schemas.conversation import SessionWithTurns
from schemas.ids import digest
from schemas.llm import LLMSettings, UsageSummary
from schemas.manifest import Failure, PublishInfo
from schemas.persona import PersonaSeed


class RunFailed(UserError):
    """Too many personas failed; nothing was published."""


class RunSpec(BaseModel):
    """Everything a job needs, picklable so Dask workers can receive it."""

    model_config = ConfigDict(extra="forbid")

    config: RunConfig
    llm: LLMSettings
    outputs: Path = Path("outputs")
    keep: int | None = None
    max_failure_fraction: float = Field(default=0.05, ge=0.0, le=1.0)

    @property
    def checkpoints(self) -> Checkpoints:
        return Checkpoints(self.llm.cache_path.parent / "personas")


DASK_WORKERS = 4  # worker processes when --runner dask is not given --workers (each loads its own embedded model)


def default_workers(settings: LLMSettings, runner: str = "thread") -> int:
    """Personas processed at once when the user names no number: as many as the backend takes calls in
    flight (``max_concurrency``), so the embedded model's batch and a server's concurrency are filled (a
    persona's stages mostly wait on each other: about one call in flight each); with Dask, ``DASK_WORKERS``
    processes."""
    return DASK_WORKERS if runner == "dask" else settings.max_concurrency


def model_name(settings: LLMSettings) -> str:
    """``provider:model`` of the backend the settings select, without building it, opening a cache or loading it."""
    return backend_name(resolve_backend_string(settings), settings)


def template_fingerprints() -> dict[str, str]:
    """Fingerprint of every registered template; recomputed only when a file under prompts/ changed."""
    env = PromptEnv()
    stamp = tuple(sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in env.root.rglob("*.jinja")))
    return dict(_fingerprints(str(env.root), stamp))


@lru_cache(maxsize=8)
def _fingerprints(root: str, stamp: tuple) -> tuple[tuple[str, str], ...]:
    env = PromptEnv(Path(root))
    return tuple((spec.template, env.fingerprint(spec.template)) for spec in ALL_SPECS.values())


def fingerprint(spec: RunSpec, llm_name: str) -> str:
    s = spec.llm
    llm_key = {"llm": llm_name, "temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens,
               "seed": s.seed, "reask": s.reask}
    return run_fingerprint(spec.config, llm_key=llm_key, templates=template_fingerprints())


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


FILLER_BATCH_MAX = 64  # most filler calls one top-up round asks for


def top_up_size(shortfall: int, kept: list[SessionWithTurns], config: RunConfig) -> int:
    """Filler calls for one top-up round: the shortfall over the mean kept session, a quarter more for
    calls that fail or name a dataset item; at least 1, at most ``FILLER_BATCH_MAX``."""
    sizes = [s.session.n_tokens for s in kept]
    # before any session is kept, the plan's typical exchange size (pipeline.run.estimate) is the guess
    per_session = sum(sizes) / len(sizes) if sizes else OUTPUT_TOKENS["small_talk"] * config.text.filler_exchanges
    return max(1, min(FILLER_BATCH_MAX, math.ceil(1.25 * shortfall / max(per_session, 1.0))))


def complete_filler(spec: RunSpec, pool: list[SessionWithTurns], items: set[str],
                    own_tokens: list[int]) -> tuple[list[SessionWithTurns], int, UsageSummary]:
    """Drop filler that names any dataset item, then add sessions until the pool can fill the largest budget.

    Filler session i is the same whatever the pool size, so a grown pool is as reproducible as the first one.
    Each round asks for about as many sessions as the shortfall needs (not a fixed batch): on the embedded
    model a filler call takes seconds, and a round of calls nobody needs held up the whole run.
    """
    need = filler_need(spec.config, own_tokens)
    if spec.config.filler.source == "sharegpt":
        return (*sharegpt_filler(spec.config, items, need), UsageSummary())
    llm = LLM(spec.llm)
    kept, dropped = filter_filler(pool, items)
    start = max([spec.config.text.filler_pool_size] + [int(s.session.provenance["index"]) + 1 for s in pool])
    while (shortfall := need - sum(s.session.n_tokens for s in kept)) > 0:
        count = top_up_size(shortfall, kept, spec.config)
        fresh = write_filler_pool(llm=llm, config=spec.config, start=start, count=count)
        start += count
        if not fresh:
            break  # the model fails every filler call; assembly will say the pool is too small
        more, more_dropped = filter_filler(fresh, items)
        kept, dropped = kept + more, dropped + more_dropped
    return kept, dropped, llm.usage_summary()


def filler_inputs(results: list[PersonaResult]) -> tuple[set[str], list[int]]:
    """What the filler top-up needs from the personas: every item (filler may name none) and each one's own tokens."""
    items = {p.item for r in results for p in r.text.timeline.preferences}
    own = [sum(s.session.n_tokens for s in r.text.sessions) for r in results]
    return items, own


def run_summary(jobs: list[JobResult], filler: list[SessionWithTurns], filler_dropped: int,
                filler_usage: list[UsageSummary]) -> tuple[UsageSummary, dict]:
    """The run's usage over every persona job (in persona order) and filler call, and the manifest's statistics."""
    usage = UsageSummary()
    for part in [job.usage for job in jobs] + filler_usage:
        usage.merge(part)
    reused = UsageSummary()  # the calls that made the personas this run took from their checkpoints
    for job in jobs:
        if job.from_checkpoint:
            reused.merge(job.result.usage)
    stats = {"personas_from_checkpoint": sum(j.from_checkpoint for j in jobs),
             "checkpoint_usage": reused.total.model_dump(mode="json"),
             "filler_sessions": len(filler), "filler_dropped": filler_dropped, **filler_sources(filler),
             "query_stats": [j.result.query_stats for j in jobs]}
    return usage, stats


def check_failures(spec: RunSpec, n: int, failures: list[Failure]) -> None:
    """Refuse to publish when more than the allowed fraction of personas failed."""
    if n and len(failures) / n > spec.max_failure_fraction:
        first = failures[0]
        indices = sorted(f.persona_index for f in failures if f.persona_index is not None)
        shown = ", ".join(map(str, indices[:10])) + (f" and {len(indices) - 10} more" if len(indices) > 10 else "")
        raise RunFailed(f"{len(failures)} of {n} personas failed (allowed {spec.max_failure_fraction:.0%}); "
                        f"nothing published; failed: personas {shown}; first: persona {first.persona_index}: "
                        f"{first.reason}")


def check_unanswered(spec: RunSpec, usage: UsageSummary) -> None:
    """Fail closed (RunFailed, nothing published) when more than ``llm.max_failed_share`` of the run's calls
    got no answer (transport failures, server errors, cache-only misses): code-written text would stand in
    for them, and the run would look like a success."""
    total = usage.total
    if not total.transport_failures or total.transport_failures <= spec.llm.max_failed_share * total.calls:
        return
    stages = sorted(((c.transport_failures, s) for s, c in usage.by_stage.items() if c.transport_failures),
                    reverse=True)
    where = ", ".join(f"{s} {n}" for n, s in stages[:4])
    cause = ("no cached reply (--cache-only)" if spec.llm.cache_only
             else "the server did not answer (transport failures or server errors) or a reply could not be stored")
    raise RunFailed(f"{total.transport_failures} of {total.calls} model calls got no answer: {cause} ({where}; "
                    f"allowed {spec.llm.max_failed_share:.0%}, llm.max_failed_share); nothing published; every "
                    "answered call is cached: rerun the same command to resume")


def probe_and_filter(results: list[PersonaResult], config: RunConfig, *, store: Checkpoints | None = None,
                     key: str | None = None) -> tuple[list, dict]:
    """Every persona's queries through the option-only probe and the adversarial filter (fails closed),
    with the probe's report for the manifest; the queries unchanged when the probe is off. With a store,
    the outcome is kept under ``key`` (the run's fingerprint and personas), so a rerun does not refit."""
    queries = [q for r in results for q in r.queries]
    if not config.queries.probe.enabled:
        return queries, {}
    if store is not None and key and (done := store.load_filtered(key)) is not None:
        return done.queries, done.report
    personas = {r.text.persona.persona_id: (r.text.persona, r.text.timeline, r.text.sessions, r.text.inventory)
                for r in results}
    kept, report = filter_queries(queries, personas, config=config)
    stats = {"probe": report.summary()}
    if store is not None and key:
        store.save_filtered(key, FilteredQueries(queries=kept, report=stats))
    return kept, stats


def stance_counts(results: list[PersonaResult]) -> dict[str, int]:
    """The stance check over the run: beats whose model turn it rejected (then regenerated or replaced by
    code), and, over the published user turns voicing a version, how many it still finds contradicting."""
    rejected = sum(n for r in results for k, n in r.text.stats.problems.items() if "stance" in k)
    versions = {p.key: p for r in results for p in r.text.timeline.preferences}
    voiced = [(t, versions[t.pref_versions[-1]]) for r in results for s in r.text.sessions for t in s.turns
              if t.role == "user" and t.pref_versions and t.pref_versions[-1] in versions]
    failing = sum(stance_problem(t.content, v.item, v.stance) is not None for t, v in voiced)
    return {"beats": sum(r.text.stats.beats for r in results), "rejected_by_stance": rejected,
            "regenerated": sum(r.text.stats.regenerated for r in results),
            "replaced_by_code": sum(r.text.stats.fallback_beats for r in results),
            "voicing_turns": len(voiced), "voicing_turns_failing": failing}


def text_origin(results: list[PersonaResult], queries: list) -> dict[str, dict[str, int]]:
    """Per model-written field, how many texts the model wrote and were accepted at once, accepted when asked
    again, or were written by code (the card's "Where the text comes from")."""
    total: dict[str, Origin] = {}
    for r in results:
        for name, o in r.text.stats.origin.items():
            count(total, name, model=o.model, reasked=o.reasked, code=o.code)
    for q in queries:
        how = q.provenance.get("wording", "code")
        kind = "code" if how != "model" else "model" if q.provenance.get("attempt", "1") == "1" else "reasked"
        count(total, "question", **{kind: 1})
        count(total, "option", **{kind: len(q.options)})
    return {name: o.model_dump() for name, o in sorted(total.items())}


def publish_run(spec: RunSpec, results: list[PersonaResult], kept_filler: list[SessionWithTurns], *,
                usage: UsageSummary, failures: list[Failure], models: list[str], extra_stats: dict) -> Path:
    """Assemble every context over the (checked) filler pool, validate and publish one immutable version;
    nothing when too many calls went unanswered (`check_unanswered`)."""
    check_unanswered(spec, usage)
    config = spec.config
    sessions = [s for r in results for s in r.text.sessions] + kept_filler
    key = digest(fingerprint(spec, model_name(spec.llm)), [r.text.persona.persona_id for r in results], length=24)
    queries, probe_stats = probe_and_filter(results, config, store=spec.checkpoints, key=key)
    personas = [r.text.persona for r in results]
    assembly = assemble_all(personas, sessions, queries, settings=config.assembly, run_seed=config.seed)
    placed = {p.query_id for p in assembly.placements}
    tables = {
        "personas": personas,
        "preferences": [p for r in results for p in r.text.timeline.preferences],
        "events": [e for r in results for e in r.text.timeline.events],
        "event_edges": [e for r in results for e in r.text.timeline.edges],
        "sessions": [s.session for s in assembly.sessions],
        "turns": [t for s in assembly.sessions for t in s.turns],
        "queries": [q for q in queries if q.query_id in placed],
        "contexts": assembly.contexts,
        "placements": assembly.placements,
    }
    stats = {**extra_stats, **probe_stats, "stance_checks": stance_counts(results),
             "text_origin": text_origin(results, tables["queries"]), "assembly_unplaced": assembly.unplaced,
             "queries_unplaced": len(queries) - len(tables["queries"])}
    info = PublishInfo(config=config, template_fingerprints=template_fingerprints(), models=models,
                       usage=usage.model_dump(mode="json"), failures=failures, stats=stats)
    return publish(spec.outputs, tables, info, keep=spec.keep)
