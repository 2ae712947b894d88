"""generate_queries with the real embedded model: its wording is kept only when it passes every gate;
otherwise code writes it or the query is dropped with its reason. Labels are never the model's."""

from __future__ import annotations

import pytest

from pipeline.config import load_config
from pipeline.llm import LLM
from pipeline.rng import derive_rng
from pipeline.run.persona_text import build_persona_text
from pipeline.s1_personas.sample_personas import sample_personas
from pipeline.s4_queries.gates import structural_problems, wording_problem
from pipeline.s4_queries.generate_queries import generate_queries
from pipeline.s4_queries.plan import persona_facts, plan_queries
from schemas.llm import LLMSettings


@pytest.mark.model
def test_embedded_model_queries_pass_the_gates_or_are_dropped_with_a_reason(tmp_path):
    config = load_config("smoke", n_personas=1, seed=7, topics=["foodRecommendation", "travelPlanning"])
    config = config.model_copy(update={"queries": config.queries.model_copy(  # asked for (auto would not ask it)
        update={"per_type": 1, "attempts": 1, "wording": "model"})})
    fake = LLM(LLMSettings(llm="fake", cache_path=tmp_path / "fake.sqlite"))
    (seed,) = sample_personas(1, run_seed=config.seed, settings=config.personas)
    text = build_persona_text(seed, config=config, llm=fake)  # the text stages are tested elsewhere
    llm = LLM(LLMSettings(llm="local", cache_path=tmp_path / "local.sqlite", max_tokens=320, temperature=0.2))
    queries, stats = generate_queries(text.persona, text.timeline, text.sessions, llm=llm, config=config)
    assert stats.planned >= 5 and stats.llm_calls == stats.planned
    assert llm.usage_summary().by_stage["generate_queries"].backend_calls >= stats.planned
    assert stats.kept == len(queries) and stats.kept + len(stats.dropped) == stats.planned
    assert all(":" in reason for reason in stats.dropped.values())
    facts = persona_facts(text.persona, text.timeline, text.sessions, config=config)
    plans = {p.query_id: p for p in plan_queries(facts, settings=config.queries,
                                                 rng=derive_rng(config.seed, text.persona.persona_id, "generate_queries"))}
    for q in queries:
        assert structural_problems(q, facts) == []
        texts = [o.text for o in q.options]
        assert wording_problem(plans[q.query_id], q.question, texts, config.queries.length_tolerance) is None
        assert q.provenance["wording"] in ("model", "code")
    print(f"\nembedded model: {stats.kept}/{stats.planned} kept, {stats.wording_fallbacks} code-worded, "
          f"gate failures {stats.gate_failures}, drops {stats.drops}")
