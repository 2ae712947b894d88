"""The run's statistics for the manifest and the card: usage over every job, the stance check over the
published turns, and per model-written field who wrote the text."""

from __future__ import annotations

from pipeline.checks.quality import Origin, count
from pipeline.checks.stance import stance_problem
from pipeline.cues import implicit_problem
from pipeline.run.checkpoint import PersonaResult
from pipeline.run.jobs import JobResult
from pipeline.s3_text.filler import (
    filler_sources,
)
from schemas.conversation import SessionWithTurns
from schemas.llm import UsageSummary


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


def stance_counts(results: list[PersonaResult]) -> dict[str, int]:
    """The stance check over the run: beats whose model turn it rejected (then regenerated or replaced by
    code), and, over the published user turns voicing a version, how many it still finds contradicting (the
    explicit ones) or naming their item or a stance word (the implicit ones)."""
    rejected = sum(n for r in results for k, n in r.text.stats.problems.items() if "stance" in k)
    versions = {p.key: p for r in results for p in r.text.timeline.preferences}
    voiced = [(t, versions[t.pref_versions[-1]]) for r in results for s in r.text.sessions for t in s.turns
              if t.role == "user" and t.pref_versions and t.pref_versions[-1] in versions]
    said = [(t, v) for t, v in voiced if t.voicing != "implicit"]
    shown = [(t, v) for t, v in voiced if t.voicing == "implicit"]
    return {"beats": sum(r.text.stats.beats for r in results), "rejected_by_stance": rejected,
            "regenerated": sum(r.text.stats.regenerated for r in results),
            "replaced_by_code": sum(r.text.stats.fallback_beats for r in results),
            "voicing_turns": len(said),
            "voicing_turns_failing": sum(stance_problem(t.content, v.item, v.stance) is not None for t, v in said),
            "implicit_turns": len(shown),  # failing: naming their item or saying a stance
            "implicit_turns_failing": sum(implicit_problem(t.content, None, v.item, "") is not None for t, v in shown)}


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
