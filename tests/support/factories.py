"""Small synthetic fixtures shaped like the real stages' output: sessions, filler, queries.

Personas and timelines come from the real planner on a tiny config; the text is fake words, but
every annotation (pref_versions, event_ids, evidence) is exact, as the text stages guarantee.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from pydantic import BaseModel

from pipeline.rng import derive_rng
from pipeline.run.plan import build_plan
from pipeline.s2_timeline.periods import period_windows
from schemas.config import Period, RunConfig, TimelineSettings
from schemas.context import AssemblySettings
from schemas.conversation import Session, SessionWithTurns, Turn
from schemas.ids import stable_id
from schemas.persona import Persona
from schemas.query import Evidence, Option, Query
from schemas.timeline import Timeline

WORDS = (
    "the a morning river quiet coffee friend weekend city plan idea small long green window music "
    "garden table walk market evening travel letter book street light summer winter kitchen story "
    "photo chair train ocean forest paper bright simple careful honest local early late warm calm"
).split()
FILLER_TOPICS = ("bike repair", "tax forms", "houseplants", "spreadsheets", "bread baking", "car insurance")


class Bundle(BaseModel):
    """Everything the assembly and dataset stages consume for a small run."""

    config: RunConfig
    personas: list[Persona]
    timelines: list[Timeline]
    sessions: list[SessionWithTurns]
    queries: list[Query]

    def tables(self, contexts: list, placements: list) -> dict[str, list[BaseModel]]:
        """The nine dataset tables, given the assembly's contexts and placements."""
        return {
            "personas": self.personas,
            "preferences": [p for t in self.timelines for p in t.preferences],
            "events": [e for t in self.timelines for e in t.events],
            "event_edges": [e for t in self.timelines for e in t.edges],
            "sessions": [s.session for s in self.sessions],
            "turns": [t for s in self.sessions for t in s.turns],
            "queries": self.queries,
            "contexts": contexts,
            "placements": placements,
        }


def tiny_config(n_personas: int = 2, budgets: tuple[int, ...] = (4000, 8000), **assembly) -> RunConfig:
    """Three topics, two periods, frequent updates: small enough for unit tests."""
    return RunConfig(
        dataset="tiny",
        seed=7,
        n_personas=n_personas,
        topics=["foodRecommendation", "travelPlanning", "bookRecommendation"],
        periods=[Period(name="INIT", offset_days=0), Period(name="MONTH", offset_days=30)],
        timeline=TimelineSettings(initial_prefs_min=2, initial_prefs_max=3, topic_update_probability=0.9),
        assembly=AssemblySettings(budgets=list(budgets), **assembly),
    )


def fake_text(rng: random.Random, n_words: int) -> str:
    """``n_words`` plain words, capitalized and ended like a sentence."""
    words = rng.choices(WORDS, k=max(1, n_words))
    return " ".join(words).capitalize() + "."


def make_bundle(config: RunConfig, *, turns: int = 6, words: tuple[int, int] = (15, 40)) -> Bundle:
    """Plan personas, then write fake sessions and queries for each."""
    plan = build_plan(config)
    sessions, queries = [], []
    for persona, timeline in zip(plan.personas, plan.timelines, strict=True):
        own = make_topic_sessions(persona, timeline, config, turns=turns, words=words)
        sessions.extend(own)
        queries.extend(make_queries(persona, timeline, own, config))
    sessions.extend(make_filler_pool(config.seed, count=60, words=(20, 160)))
    return Bundle(config=config, personas=plan.personas, timelines=plan.timelines, sessions=sessions, queries=queries)


def make_topic_sessions(
    persona: Persona, timeline: Timeline, config: RunConfig, *, turns: int = 6, words: tuple[int, int] = (15, 40)
) -> list[SessionWithTurns]:
    """One session per (topic, period); its first user turns voice every preference version then valid."""
    rng = derive_rng(config.seed, persona.persona_id, "factories")
    out = []
    for window in period_windows(config):
        for k, topic in enumerate(config.topics):
            time = window.at + timedelta(minutes=10 * k + 1)
            sid = stable_id("ses", persona.persona_id, topic, window.name)
            valid = [p for p in timeline.preferences if p.topic == topic and p.valid_at(time)]
            beats = [(f"I {p.stance} {p.item}.", [p.key], [p.caused_by_event_id] if p.caused_by_event_id else [])
                     for p in sorted(valid, key=lambda p: p.pref_id)]
            out.append(_session(sid, persona.persona_id, topic, window.name, time, beats, turns, words, rng))
    return out


def _session(sid, persona_id, topic, period, time, beats, turns, words, rng) -> SessionWithTurns:
    n_turns = max(turns, 2 * len(beats) + 2)
    rows = []
    for i in range(n_turns):
        role = "user" if i % 2 == 0 else "assistant"
        beat = beats[i // 2] if role == "user" and i // 2 < len(beats) else ("", [], [])
        content = (beat[0] + " " + fake_text(rng, rng.randint(*words))).strip()
        rows.append(Turn(session_id=sid, turn_index=i, role=role, content=content,
                         pref_versions=beat[1], event_ids=beat[2]))
    session = Session(session_id=sid, persona_id=persona_id, topic=topic, period=period, time=time,
                      kind="filler" if persona_id is None else "topic", n_turns=n_turns, n_tokens=0)
    return SessionWithTurns(session=session, turns=rows)


def make_filler_pool(seed: int, *, count: int, words: tuple[int, int] = (20, 160), turns: int = 4) -> list[SessionWithTurns]:
    """Persona-neutral sessions of varied length (short ones let contexts land close to the budget)."""
    rng = derive_rng(seed, "filler", "factories")
    out = []
    for i in range(count):
        topic = FILLER_TOPICS[i % len(FILLER_TOPICS)]
        sid = stable_id("fil", seed, i)
        n = turns if i % 3 else 2
        out.append(_session(sid, None, topic, None, datetime(2025, 1, 1), [], n, words, rng))
    return out


def make_queries(persona: Persona, timeline: Timeline, sessions: list[SessionWithTurns], config: RunConfig) -> list[Query]:
    """Per topic: an end-of-history query and one anchored in the topic's last session, both
    grounded in the turns that voiced the versions valid at their time."""
    rng = derive_rng(config.seed, persona.persona_id, "factory_queries")
    out = []
    for topic in config.topics:
        topic_sessions = sorted((s for s in sessions if s.session.topic == topic), key=lambda s: s.session.time)
        last = topic_sessions[-1]
        earlier = [t for s in topic_sessions[:-1] for t in s.turns if t.pref_versions]
        if not earlier:
            continue
        anchor_turn = last.turns[-2].turn_index
        for kind, anchor in (("end", None), ("anchor", (last.session.session_id, anchor_turn))):
            evidence_turn = earlier[-1] if kind == "anchor" else _last_voiced(topic_sessions)
            out.append(_query(persona, topic, kind, anchor, evidence_turn, last.session.time, rng))
    return out


def _last_voiced(topic_sessions: list[SessionWithTurns]) -> Turn:
    return [t for s in topic_sessions for t in s.turns if t.pref_versions][-1]


def _query(persona, topic, kind, anchor, evidence: Turn, as_of, rng) -> Query:
    key = evidence.pref_versions[0]
    texts = [
        ("correct", f"You told me about {evidence.content[:40]}"),
        ("outdated_preference", f"You used to feel differently about {topic} things"),
        ("generic", f"Many people enjoy a mix of {topic} ideas"),
        ("forgetful", f"I do not recall you mentioning {topic} before"),
    ]
    rng.shuffle(texts)
    options = [Option(text=t, role=r, grounding=[key] if r == "correct" else []) for r, t in texts]
    return Query(
        query_id=stable_id("qry", persona.persona_id, topic, kind),
        persona_id=persona.persona_id,
        type="acknowledge_latest_preferences",
        topic=topic,
        as_of=as_of + timedelta(hours=1) if anchor is None else as_of,
        anchor_session_id=anchor[0] if anchor else None,
        anchor_turn_index=anchor[1] if anchor else None,
        question=f"What do you remember about my {topic} taste?",
        options=options,
        correct_index=[o.role for o in options].index("correct"),
        evidence=[Evidence(session_id=evidence.session_id, turn_index=evidence.turn_index)],
    )
