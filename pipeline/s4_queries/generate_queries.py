"""generate_queries: code plans each query (type, topic, anchor, truth, groundings, evidence, order);
one model call words its question and all its options; gates keep or reject the wording, code writes
it when the model keeps failing, and anything still failing is dropped with its reason."""

from __future__ import annotations

import random
import re
from dataclasses import replace

from pydantic import BaseModel, Field

from pipeline.checks.verdicts import heard
from pipeline.config import query_wording
from pipeline.llm import LLM
from pipeline.rng import derive_rng
from pipeline.s4_queries.facts import Facts
from pipeline.s4_queries.gates import GATES, code_wording, judge_hits, structural_problems, wording_problem
from pipeline.s4_queries.plan import QueryPlan, persona_facts, plan_queries
from pipeline.specs import QUERY
from pipeline.words import topic_label
from schemas.catalog import InventoryItem
from schemas.config import QuerySettings, RunConfig
from schemas.conversation import SessionWithTurns
from schemas.persona import Persona
from schemas.query import Query
from schemas.query_drafts import QueryContext, query_draft
from schemas.timeline import Timeline

_ENUMERATION = re.compile(r"^\(?\d{1,2}[.):]\s*")


class Wording(BaseModel):
    """A question and option texts that passed every gate, with where they came from."""

    question: str
    texts: list[str]
    provenance: dict[str, str]


class Problem(BaseModel):
    """Why a wording was rejected: the gate and a one-line detail."""

    gate: str
    detail: str


class QueryStats(BaseModel):
    """What happened to every planned query: kept per type/topic, gate failures, fallbacks, drops, calls."""

    planned: int = 0
    kept: int = 0
    by_type: dict[str, int] = Field(default_factory=dict)
    by_topic: dict[str, int] = Field(default_factory=dict)
    gate_failures: dict[str, int] = Field(default_factory=dict, description="failed checks, every attempt counted")
    drops: dict[str, int] = Field(default_factory=dict, description="gate -> queries dropped by it")
    dropped: dict[str, str] = Field(default_factory=dict, description="query_id -> recorded reason")
    regenerated: int = 0
    wording_fallbacks: int = 0
    llm_calls: int = 0
    judge_calls: int = 0

    def count(self, table: str, key: str) -> None:
        """Add one to ``table[key]``."""
        counts = getattr(self, table)
        counts[key] = counts.get(key, 0) + 1

    def merge(self, other: QueryStats) -> None:
        """Accumulate another persona's stats into this one."""
        for name in ("planned", "kept", "regenerated", "wording_fallbacks", "llm_calls", "judge_calls"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("by_type", "by_topic", "gate_failures", "drops"):
            mine = getattr(self, name)
            for key, value in getattr(other, name).items():
                mine[key] = mine.get(key, 0) + value
        self.dropped.update(other.dropped)


def generate_queries(persona: Persona, timeline: Timeline, sessions: list[SessionWithTurns], *, llm: LLM,
                     config: RunConfig, judge: LLM | None = None,
                     inventory: dict[str, list[InventoryItem]] | None = None) -> tuple[list[Query], QueryStats]:
    """The persona's gated queries and what it took to get them; deterministic for a seed and cache."""
    settings = config.queries.model_copy(update={"wording": query_wording(config, llm)})  # auto: by the backend
    rng = derive_rng(config.seed, persona.persona_id, "generate_queries")
    facts = persona_facts(persona, timeline, sessions, config=config, inventory=inventory)
    plans = plan_queries(facts, settings=settings, rng=rng)
    stats = QueryStats(planned=len(plans))
    sound = [p for p in plans if _structurally_sound(p, facts, stats)]
    worded = {} if settings.wording == "code" else \
        _model_wordings(persona, sound, llm=llm, judge=judge, settings=settings, stats=stats, rng=rng)
    kept = []
    voicings = {(swt.session.session_id, t.turn_index): t.voicing for swt in sessions for t in swt.turns if t.voicing}
    for plan in sound:
        wording = worded.get(plan.query_id)
        if not isinstance(wording, Wording):
            wording = _code_wording(plan, wording, judge, settings, stats, rng)
        if wording is None:
            continue
        query = plan.to_query(wording.question, wording.texts, wording.provenance)
        query.voicing = evidence_voicing(query, voicings)
        if problems := structural_problems(query, facts):
            _drop(stats, plan, "structural", problems[0])
            continue
        kept.append(query)
        stats.kept += 1
        stats.count("by_type", query.type)
        stats.count("by_topic", query.topic)
    return kept, stats


def evidence_voicing(query: Query, voicings: dict[tuple[str, int], str]) -> str | None:
    """How the query's evidence voiced its preference: implicit when any evidence turn shows it without naming it,
    explicit when they all say it, None when none voices a preference (an abstention, a life event)."""
    found = {voicings.get((ev.session_id, ev.turn_index)) for ev in query.evidence} - {None}
    return "implicit" if "implicit" in found else "explicit" if found else None


def _structurally_sound(plan: QueryPlan, facts: Facts, stats: QueryStats) -> bool:
    """Validate the plan's labels before spending a model call on its wording."""
    problems = structural_problems(plan.to_query(plan.ask, [o.text for o in plan.options], {}), facts)
    if problems:
        _drop(stats, plan, "structural", problems[0])
    return not problems


def _drop(stats: QueryStats, plan: QueryPlan, gate: str, detail: str) -> None:
    stats.count("drops", gate)
    stats.dropped[plan.query_id] = f"{gate}: {detail}"


def query_context(persona: Persona, plan: QueryPlan) -> QueryContext:
    """What the model sees: the ask and every option's plain wording in final order, never the roles."""
    words = max(len(o.text.split()) for o in plan.options) + 3
    return QueryContext(name=persona.name, profile=persona.profile, style=persona.style, topic=topic_label(plan.topic),
                        ask=plan.ask, replies=[o.text for o in plan.options], words=words)


def _model_wordings(persona: Persona, plans: list[QueryPlan], *, llm: LLM, judge: LLM | None,
                    settings: QuerySettings, stats: QueryStats, rng: random.Random) -> dict[str, Wording | Problem]:
    """Per query, a model wording that passes every gate or the last problem, after up to ``attempts``
    tries per query (batched per try)."""
    spec = replace(QUERY, output=query_draft(settings.n_options))
    out: dict[str, Wording | Problem] = {}
    for attempt in range(settings.attempts):
        pending = [p for p in plans if not isinstance(out.get(p.query_id), Wording)]
        if not pending:
            break
        stats.regenerated += len(pending) if attempt else 0
        stats.llm_calls += len(pending)
        drafts = llm.generate_each(spec, [query_context(persona, p) for p in pending], sample_index=attempt)
        for plan, draft in zip(pending, drafts, strict=True):
            if draft is None:
                out[plan.query_id] = Problem(gate="model_call", detail="the model call failed")
                stats.count("gate_failures", "model_call")
                continue
            question, texts = _clean(draft.question), [_ENUMERATION.sub("", _clean(t)) for t in draft.options]
            provenance = {"wording": "model", "model": llm.name, "template": llm.fingerprint(QUERY)[:16],
                          "attempt": str(attempt + 1)}
            problem = _gates(plan, question, texts, provenance, judge, settings, stats, rng)
            heard(draft, f"{problem.gate}: {problem.detail}" if problem else None)
            out[plan.query_id] = problem or Wording(question=question, texts=texts, provenance=provenance)
    return out


def _gates(plan: QueryPlan, question: str, texts: list[str], provenance: dict[str, str], judge: LLM | None,
           settings: QuerySettings, stats: QueryStats, rng: random.Random) -> Problem | None:
    """Wording gates, then the optional no-context judge; each failure is counted under its gate."""
    found = wording_problem(plan, question, texts, settings.length_tolerance)
    problem = Problem(gate=found[0], detail=found[1]) if found else None
    if problem is None and judge is not None:
        stats.judge_calls += settings.judge_shuffles
        hits = judge_hits(plan.to_query(question, texts, {}), judge, settings, rng)
        if hits is None or hits > settings.judge_limit():
            problem = Problem(gate="judge", detail=f"the no-context judge was right {hits} of {settings.judge_shuffles} times")
        else:
            provenance["judge"] = f"{judge.name} {hits}/{settings.judge_shuffles}"
    if problem is not None:
        stats.count("gate_failures", problem.gate)
    return problem


def _code_wording(plan: QueryPlan, last: Problem | None, judge: LLM | None, settings: QuerySettings,
                  stats: QueryStats, rng: random.Random) -> Wording | None:
    """Code-written wording from the groundings (flagged in provenance), or a drop with its reason."""
    wording = code_wording(plan, settings.length_tolerance)
    if wording is None:
        problem = Problem(gate=last.gate if last else "length", detail="code wording failed the gates too")
        stats.count("gate_failures", problem.gate)
    else:
        fallback = settings.wording != "code"  # code words it after the model's wording failed, or by design
        provenance = {"wording": "code", **({"fallback": "true", "model_problem": last.gate if last else "none"}
                                            if fallback else {})}
        problem = _gates(plan, wording[0], wording[1], provenance, judge, settings, stats, rng)
    if problem is not None:
        _drop(stats, plan, problem.gate, problem.detail)
        return None
    stats.wording_fallbacks += provenance.get("fallback") == "true"
    return Wording(question=wording[0], texts=wording[1], provenance=provenance)


def _clean(text: str) -> str:
    return " ".join(text.split())


def gate_report(stats: QueryStats) -> dict[str, float]:
    """Drop rate per gate over planned queries, plus the overall fallback rate and calls per kept query."""
    planned = max(1, stats.planned)
    gates = [*GATES, *sorted(set(stats.drops) - set(GATES))]
    out = {f"drop rate ({gate})": stats.drops.get(gate, 0) / planned for gate in gates}
    out["wording fallback rate"] = stats.wording_fallbacks / max(1, stats.kept)
    out["LLM calls per kept query"] = stats.llm_calls / max(1, stats.kept)
    return out

