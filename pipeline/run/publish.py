"""The run's end: refuse to publish when too many personas failed or calls went unanswered, filter the queries
through the option-only probes, assemble every context, and publish one immutable version."""

from __future__ import annotations

from pathlib import Path

from pipeline.dataset import publish
from pipeline.llm.cache import STORE_FAILURES
from pipeline.run.card_stats import stance_counts, text_origin
from pipeline.run.checkpoint import Checkpoints, FilteredQueries, PersonaResult
from pipeline.run.spec import RunFailed, RunSpec, fingerprint, model_name, template_fingerprints
from pipeline.s4_queries.filtering import filter_queries
from pipeline.s5_assembly.assemble_contexts import assemble_all
from schemas.config import RunConfig
from schemas.conversation import SessionWithTurns
from schemas.ids import digest
from schemas.llm import UsageSummary
from schemas.manifest import Failure, PublishInfo


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
    stored = STORE_FAILURES.get(str(spec.llm.cache_path))
    if stored is not None:  # the answers came, the cache could not keep them: not the server's fault
        raise RunFailed(f"{total.transport_failures} of {total.calls} model calls could not be stored: {stored} "
                        f"({where}); nothing published")
    cause = ("no cached reply (--cache-only)" if spec.llm.cache_only
             else "the server did not answer (transport failures or server errors)")
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
