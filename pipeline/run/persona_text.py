"""One persona through the text stages: expand, simulate, narrate, write sessions."""

from __future__ import annotations

from pydantic import BaseModel, Field

from pipeline.llm import LLM
from pipeline.rng import derive_rng
from pipeline.s1_personas.expand_persona import expand_persona
from pipeline.s1_personas.sample_personas import persona_from_seed
from pipeline.s2_timeline.simulate_timeline import simulate_timeline
from pipeline.s3_text.narrate_events import narrate_events
from pipeline.s3_text.write_sessions import SessionStats, write_sessions
from schemas.catalog import InventoryItem
from schemas.config import RunConfig
from schemas.conversation import SessionWithTurns
from schemas.persona import Persona, PersonaSeed
from schemas.timeline import Timeline


class PersonaText(BaseModel):
    """Everything the text stages produce for one persona."""

    persona: Persona
    timeline: Timeline
    sessions: list[SessionWithTurns]
    stats: SessionStats
    inventory: dict[str, list[InventoryItem]] = Field(
        default_factory=dict, description="per-topic candidate items; the never-voiced ones feed abstentions and new ideas")


def build_persona_text(seed: PersonaSeed, *, config: RunConfig, llm: LLM) -> PersonaText:
    """Stages 1-5 for one persona (its seed to its sessions, each stage folder once, in order); deterministic for a given seed, config and cached responses."""
    origin: dict = {}
    persona = persona_from_seed(seed, run_seed=config.seed, split=config.personas.split)
    persona, inventory = expand_persona(persona, config=config, llm=llm, origin=origin)
    rng = derive_rng(config.seed, persona.persona_id, "simulate_timeline")
    timeline = simulate_timeline(persona, inventory, config=config, rng=rng, index=seed.index)
    timeline = narrate_events(persona, timeline, llm=llm, config=config, origin=origin)
    sessions, stats = write_sessions(persona, timeline, llm=llm, config=config)
    stats.origin = {**origin, **stats.origin}
    return PersonaText(persona=persona, timeline=timeline, sessions=sessions, stats=stats, inventory=inventory)
