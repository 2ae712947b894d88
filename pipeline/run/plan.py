"""Plan a run without any model: seed personas and simulate their timelines, with statistics."""

from __future__ import annotations

from collections import Counter

import networkx as nx
from pydantic import BaseModel

from pipeline.catalog import catalog_inventory
from pipeline.rng import derive_rng
from pipeline.s1_personas.sample_personas import persona_from_seed, sample_personas
from pipeline.s2_timeline.simulate_timeline import simulate_timeline
from schemas.config import RunConfig
from schemas.persona import Persona
from schemas.timeline import Timeline


class Plan(BaseModel):
    personas: list[Persona]
    timelines: list[Timeline]


def build_plan(config: RunConfig) -> Plan:
    """Personas from their seeds and the catalog inventory, each with its simulated timeline."""
    seeds = sample_personas(config.n_personas, run_seed=config.seed, settings=config.personas)
    inventory = catalog_inventory(config.topics)
    personas, timelines = [], []
    for seed in seeds:
        persona = persona_from_seed(seed, run_seed=config.seed, split=config.personas.split)
        rng = derive_rng(config.seed, persona.persona_id, "simulate_timeline")
        personas.append(persona)
        timelines.append(simulate_timeline(persona, inventory, config=config, rng=rng, index=seed.index))
    return Plan(personas=personas, timelines=timelines)


def _life_cause(by_id: dict, update_id: str) -> str:
    """The summary of the life event behind a preference update."""
    cause = by_id[update_id].cause_event_id
    return by_id[cause].summary if cause in by_id else ""


def change_pairs(timelines: list[Timeline]) -> Counter[tuple[str, str, str]]:
    """(life event, item, new stance) -> how many personas live that change."""
    pairs: Counter[tuple[str, str, str]] = Counter()
    for t in timelines:
        by_id = {e.event_id: e for e in t.events}
        pairs.update({(_life_cause(by_id, v.caused_by_event_id), v.item, v.stance)
                      for v in t.preferences if v.caused_by_event_id})
    return pairs


def plan_stats(timelines: list[Timeline], topics: list[str]) -> dict:
    """Counts that show the timelines exercise what the benchmark needs (updates, cross-topic, chains)."""
    kinds: Counter[str] = Counter()
    updates_per_topic: Counter[str] = Counter({t: 0 for t in topics})
    chain_lengths: Counter[int] = Counter()
    life, changing, cross, depth = 0, 0, 0, 0
    for t in timelines:
        kinds.update(e.kind for e in t.events)
        by_id = {e.event_id: e for e in t.events}
        for e in t.events:
            if e.kind == "preference_update" and e.topic:
                updates_per_topic[e.topic] += 1
        children: dict[str, set[str]] = {}
        for edge in t.edges:
            child = by_id[edge.child_event_id]
            if edge.relation == "causes" and child.kind == "preference_update":
                children.setdefault(edge.parent_event_id, set()).add(child.topic or "")
        for e in t.events:
            if e.kind == "life_event":
                life += 1
                changing += bool(children.get(e.event_id))
                cross += len(children.get(e.event_id, ())) >= 2
        chain_lengths.update(len(c) for c in t.chains().values())
        depth = max(depth, nx.dag_longest_path_length(t.graph()) + 1 if t.events else 0)
    pairs = change_pairs(timelines)
    return {
        "personas": len(timelines),
        "events": dict(kinds),
        "life_events": life,
        "changing_life_events": changing,
        "cross_topic_life_events": cross,
        "cross_topic_fraction": round(cross / changing, 4) if changing else 0.0,  # of those that change a preference
        "preference_versions": sum(len(t.preferences) for t in timelines),
        "updates_per_topic": dict(updates_per_topic),
        "chain_lengths": dict(sorted(chain_lengths.items())),
        "max_chain_length": max(chain_lengths, default=0),
        "max_causal_depth": depth,
        # how many personas the most frequent (life event -> change) pair reaches, and that share of the run
        "top_pair": (max(pairs.items(), key=lambda kv: (kv[1], kv[0]))) if pairs else (("", "", ""), 0),
        "top_pair_share": round(max(pairs.values(), default=0) / len(timelines), 4) if timelines else 0.0,
    }
