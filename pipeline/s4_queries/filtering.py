"""Adversarial filtering before publishing (AFLite, as WinoGrande filters): the option-only probes
(per-option n-grams; relational trees and linear) find the queries they answer confidently in every
cross-validation round; those (the union over the probes) are redrawn (a new distractor draw,
code-written wording) and, if still answered in a type above the per-type limit, dropped, all within a
budget of queries (a query redrawn and then dropped counts once). Publishing fails closed
when any probe's accuracy, overall or of a type, stays above its threshold by more than the
estimate's uncertainty: the lower end of its 95% Wilson interval above the threshold, and for a type
at least ``min_type_queries`` held-out queries; a figure above its threshold that is not certain is
reported (manifest, card), not refused."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, Field

from pipeline.errors import UserError
from pipeline.rng import derive_rng
from pipeline.s4_queries.balance import balance
from pipeline.s4_queries.facts import Facts
from pipeline.s4_queries.gates import code_wording, structural_problems
from pipeline.s4_queries.plan import persona_facts, redraw
from pipeline.s4_queries.probe import Finding, ProbeResult, judge, run_probes
from schemas.config import RunConfig
from schemas.query import Query


class ProbeFailed(UserError):
    """An option-only probe still answers too many queries; nothing was published."""


class FilterReport(BaseModel):
    """The probes before and after filtering, what the filter did per type, and what the gate found."""

    before: list[ProbeResult]
    after: list[ProbeResult]
    redrawn: dict[str, int] = Field(default_factory=dict)
    dropped: dict[str, int] = Field(default_factory=dict)
    balanced: dict[str, int] = Field(default_factory=dict, description="dropped per type to even out the shapes' slots")
    budget: int = 0
    enforced: bool = True
    personas: int = 0
    min_personas: int = 0
    findings: list[Finding] = Field(default_factory=list, description="figures above a threshold after filtering")

    def summary(self) -> dict:
        """The manifest's view: accuracies and counts per probe, without the per-query confidences."""
        strip = {"confident"}
        probes = {b.name: {"before": b.model_dump(exclude=strip), "after": a.model_dump(exclude=strip)}
                  for b, a in zip(self.before, self.after, strict=True)}
        return {"probes": probes, "redrawn": self.redrawn, "dropped": self.dropped, "balanced": self.balanced,
                "budget": self.budget,
                "enforced": self.enforced, "personas": self.personas, "min_personas": self.min_personas,
                "findings": [f.model_dump() for f in self.findings]}


PersonaInput = tuple  # (persona, timeline, sessions, inventory) of one persona


def filter_queries(queries: list[Query], personas: dict[str, PersonaInput], *, config: RunConfig) -> tuple[list[Query], FilterReport]:
    """Probe, redraw and drop within the budget; raise ProbeFailed when a probe stays certainly above
    its threshold (see ``judge``)."""
    s = config.queries.probe
    queries, cut = balance(queries, slack=s.balance_slack, seed=config.seed)
    probe = lambda qs: run_probes(qs, folds=s.folds, rounds=s.rounds, confidence=s.confidence, seed=config.seed)  # noqa: E731
    before = results = probe(queries)
    n_personas = len({q.persona_id for q in queries})
    enforced = before[0].accuracy is not None and n_personas >= s.min_personas
    report = FilterReport(before=before, after=before, budget=int(s.filter_budget * len(queries)), enforced=enforced,
                          balanced=cut, personas=n_personas, min_personas=s.min_personas)
    budget = report.budget if enforced else 0
    touched: set[str] = set()  # the budget counts queries, so a redrawn query still answered may be dropped too
    facts: dict[str, Facts] = {}
    for k in range(s.filter_passes):
        leaks = _within(_targets(results, queries, s.filter_above), touched, budget)
        if not leaks:
            break
        queries = [_redrawn(q, personas, facts, config, k, report) if q.query_id in leaks else q for q in queries]
        touched |= set(leaks)
        results = probe(queries)
    # drops only in types a probe still answers above the per-type limit: dropping every confident hit of a type
    # near chance pushes it below chance, which leaks the answer the other way
    drop = set(_within(_targets(results, queries, s.max_type_accuracy), touched, budget))
    if drop:
        report.dropped = dict(Counter(q.type for q in queries if q.query_id in drop))
        queries = [q for q in queries if q.query_id not in drop]
    if drop or report.redrawn:  # a redraw or a drop may tilt a shape again
        queries, cut = balance(queries, slack=s.balance_slack, seed=config.seed)
        report.balanced = dict(Counter(report.balanced) + Counter(cut))
        results = probe(queries)
    report.after = results
    report.findings = judge(results, max_accuracy=s.max_accuracy, max_type_accuracy=s.max_type_accuracy,
                            min_type_queries=s.min_type_queries)
    refused = [f for f in report.findings if f.refuse]
    if enforced and refused:
        raise ProbeFailed(refusal(refused, report))
    return queries, report


def refusal(refused: list[Finding], report: FilterReport) -> str:
    """The error line: which probe, which type, the figure with its interval, and what to do; the worst
    refused figure first, the others named after it."""
    also = "".join(f"; also {f.probe} on {f.scope} {f.accuracy:.1%}" for f in refused[1:4])
    more = f" and {len(refused) - 4} more" if len(refused) > 4 else ""
    return (f"queries: {refused[0].line()}{also}{more}, after filtering {sum(report.redrawn.values())} redrawn / "
            f"{sum(report.dropped.values())} dropped; nothing published. Run with more personas or a different "
            f"--seed (or raise {refused[0].setting}); `personagen audit` on a published version shows every probe "
            f"per type")


def _within(targets: list[str], touched: set[str], budget: int) -> list[str]:
    """The targets the budget still covers: those already redrawn, then new ones while it lasts."""
    fresh = [t for t in targets if t not in touched][: max(0, budget - len(touched))]
    return [t for t in targets if t in touched] + fresh


def _targets(results: list[ProbeResult], queries: list[Query], above: float) -> list[str]:
    """Every probe's confident hits among the types it answers more often than ``above`` (filtering a type
    already near chance would only push it below chance, which leaks the answer the other way)."""
    leaks: set[str] = set()
    for result in results:
        hot = {t for t, acc in result.by_type.items() if acc > above}
        found = result.leaks()
        leaks |= {q.query_id for q in queries if q.type in hot and q.query_id in found}
    return sorted(leaks)


def _redrawn(query: Query, personas: dict[str, PersonaInput], facts: dict[str, Facts], config: RunConfig,
             attempt: int, report: FilterReport) -> Query:
    """A new draw of ``query`` with code wording, or the query itself when no sound draw exists."""
    if query.persona_id not in facts:
        persona, timeline, sessions, inventory = personas[query.persona_id]
        facts[query.persona_id] = persona_facts(persona, timeline, sessions, config=config, inventory=inventory)
    f = facts[query.persona_id]
    rng = derive_rng(config.seed, query.persona_id, f"redraw:{query.query_id}:{attempt}")
    plan = redraw(f, query, rng)
    wording = code_wording(plan, config.queries.length_tolerance) if plan else None
    if wording is None:
        return query
    fresh = plan.to_query(wording[0], wording[1], {"wording": "code", "redrawn": str(attempt + 1)})
    if structural_problems(fresh, f):
        return query
    report.redrawn[query.type] = report.redrawn.get(query.type, 0) + 1
    return fresh
