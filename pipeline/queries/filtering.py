"""Adversarial filtering before publishing (AFLite, as WinoGrande filters): the option-only probe
finds the queries it answers confidently in every cross-validation round; those are redrawn (a new
distractor draw, code-written wording) and, if still answered, dropped, all within a budget. When the
probe's accuracy stays above its threshold, publishing fails closed."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, Field

from pipeline.errors import UserError
from pipeline.evaluation.probe import ProbeResult, run_probe
from pipeline.queries.facts import Facts
from pipeline.queries.gates import code_wording, structural_problems
from pipeline.queries.plan import persona_facts, redraw
from pipeline.rng import derive_rng
from schemas.config import RunConfig
from schemas.query import Query


class ProbeFailed(UserError):
    """The option-only probe still answers too many queries; nothing was published."""


class FilterReport(BaseModel):
    """The probe before and after filtering, and what the filter did per type."""

    before: ProbeResult
    after: ProbeResult
    redrawn: dict[str, int] = Field(default_factory=dict)
    dropped: dict[str, int] = Field(default_factory=dict)
    budget: int = 0
    enforced: bool = True

    def summary(self) -> dict:
        """The manifest's view: accuracies and counts, without the per-query confidences."""
        strip = {"confident"}
        return {"before": self.before.model_dump(exclude=strip), "after": self.after.model_dump(exclude=strip),
                "redrawn": self.redrawn, "dropped": self.dropped, "budget": self.budget, "enforced": self.enforced}


PersonaInput = tuple  # (persona, timeline, sessions, inventory) of one persona


def filter_queries(queries: list[Query], personas: dict[str, PersonaInput], *, config: RunConfig) -> tuple[list[Query], FilterReport]:
    """Probe, redraw and drop within the budget; raise ProbeFailed when the probe stays above threshold."""
    s = config.queries.probe
    probe = lambda qs: run_probe(qs, folds=s.folds, rounds=s.rounds, confidence=s.confidence, seed=config.seed)  # noqa: E731
    before = result = probe(queries)
    enforced = result.accuracy is not None and len({q.persona_id for q in queries}) >= s.min_personas
    report = FilterReport(before=before, after=before, budget=int(s.filter_budget * len(queries)), enforced=enforced)
    left = report.budget if enforced else 0
    facts: dict[str, Facts] = {}
    for k in range(s.filter_passes):
        leaks = _targets(result, queries, s.filter_above)[:left]
        if not leaks:
            break
        queries = [_redrawn(q, personas, facts, config, k, report) if q.query_id in leaks else q for q in queries]
        left -= len(leaks)
        result = probe(queries)
    drop = set(_targets(result, queries, s.filter_above)[:left])
    if drop:
        report.dropped = dict(Counter(q.type for q in queries if q.query_id in drop))
        queries = [q for q in queries if q.query_id not in drop]
        result = probe(queries)
    report.after = result
    if enforced and (over := result.over(s.max_accuracy, s.max_type_accuracy)):
        raise ProbeFailed(f"queries: the option-only probe answers {over} without the history after filtering "
                          f"{sum(report.redrawn.values())} redrawn / {sum(report.dropped.values())} dropped "
                          f"(queries.probe.max_accuracy); nothing published")
    return queries, report


def _targets(result: ProbeResult, queries: list[Query], above: float) -> list[str]:
    """The probe's confident hits among the types it answers more often than ``above`` (filtering a type
    already near chance would only push it below chance, which leaks the answer the other way)."""
    hot = {t for t, acc in result.by_type.items() if acc > above}
    leaks = result.leaks()
    return sorted(q.query_id for q in queries if q.type in hot and q.query_id in leaks)


def _redrawn(query: Query, personas: dict[str, PersonaInput], facts: dict[str, Facts], config: RunConfig,
             attempt: int, report: FilterReport) -> Query:
    """A new draw of ``query`` with code wording, or the query itself when no sound draw exists."""
    if query.persona_id not in facts:
        persona, timeline, sessions, inventory = personas[query.persona_id]
        facts[query.persona_id] = persona_facts(persona, timeline, sessions, config=config, inventory=inventory)
    f = facts[query.persona_id]
    rng = derive_rng(config.seed, query.persona_id, f"redraw:{query.query_id}:{attempt}")
    plan = redraw(f, query, rng)
    wording = code_wording(plan, config.queries.length_tolerance, rng) if plan else None
    if wording is None:
        return query
    fresh = plan.to_query(wording[0], wording[1], {"wording": "code", "redrawn": str(attempt + 1)})
    if structural_problems(fresh, f):
        return query
    report.redrawn[query.type] = report.redrawn.get(query.type, 0) + 1
    return fresh
