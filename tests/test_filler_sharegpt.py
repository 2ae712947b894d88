"""ShareGPT filler (streaming parse of a truncated file, clean conversations, seeded, conflict-free),
dates in the history, and PersonaMem-shaped sessions under the fake backend's length targets."""

from __future__ import annotations

import io
import json
from statistics import median

from pipeline.s3_text.filler import filler_sources, sharegpt_filler
from pipeline.s3_text.sharegpt import clean_conversation, iter_records
from pipeline.s5_assembly.assemble_contexts import assemble_all
from pipeline.s5_assembly.budget import context_messages, date_text
from schemas.config import RunConfig
from schemas.context import AssemblySettings
from tests.support.factories import make_bundle, make_filler_pool, tiny_config

BOUNDS = {"min_exchanges": 1, "max_exchanges": 3, "max_turn_chars": 50}


def _record(i: int, roles=("human", "gpt")) -> dict:
    return {"id": f"c{i}", "conversations": [{"from": r, "value": f"turn {j} of {i}"} for j, r in enumerate(roles)]}


def test_stream_stops_cleanly_at_the_first_incomplete_record():
    text = json.dumps([_record(i) for i in range(5)])
    cut = text[: text.index('"c4"') + 10]  # the fifth record is cut off, as in the wheel's file
    for chunk in (7, 64, 1 << 20):
        assert [r["id"] for r in iter_records(io.StringIO(cut), chunk_chars=chunk)] == ["c0", "c1", "c2", "c3"]
    assert len(list(iter_records(io.StringIO(text), chunk_chars=5))) == 5


def test_only_clean_alternations_within_bounds_are_kept():
    assert clean_conversation(_record(1), **BOUNDS).exchanges == (("turn 0 of 1", "turn 1 of 1"),)
    assert clean_conversation(_record(2, ("gpt", "human")), **BOUNDS) is None
    assert clean_conversation(_record(3, ("human", "gpt", "human")), **BOUNDS) is None
    assert clean_conversation(_record(4, ("human", "system")), **BOUNDS) is None
    assert clean_conversation(_record(5, ("human", "gpt") * 4), **BOUNDS) is None
    long = {"id": "x", "conversations": [{"from": "human", "value": "y" * 51}, {"from": "gpt", "value": "ok"}]}
    assert clean_conversation(long, **BOUNDS) is None


def test_sharegpt_filler_is_seeded_conflict_free_and_recorded():
    config = RunConfig(seed=3)
    first, _ = sharegpt_filler(config, set(), 20_000)
    items = {first[0].session.topic, " ".join(first[1].turns[0].content.split()[:6])}
    kept, dropped = sharegpt_filler(config, items, 20_000)
    again, _ = sharegpt_filler(config, items, 20_000)
    assert [s.session.session_id for s in kept] == [s.session.session_id for s in again]
    assert sum(s.session.n_tokens for s in kept) >= 20_000 and dropped >= 1
    assert first[1].session.session_id not in {s.session.session_id for s in kept}
    assert all(s.session.kind == "filler" and s.session.time is None for s in kept)
    recorded = filler_sources(kept)
    assert recorded["filler_source"] == "sharegpt" and "OpenAI" in recorded["filler_terms"]
    assert len(recorded["filler_conversation_ids"]) == len(kept)
    other, _ = sharegpt_filler(RunConfig(seed=4), items, 20_000)
    assert [s.session.session_id for s in other] != [s.session.session_id for s in kept]


def test_each_session_opens_with_its_date_and_filler_takes_its_slot_date():
    bundle = make_bundle(tiny_config(n_personas=1))
    sessions = bundle.sessions + make_filler_pool(5, count=60)
    result = assemble_all(bundle.personas, sessions, bundle.queries, settings=bundle.config.assembly, run_seed=1)
    by_id = {s.session.session_id: s for s in result.sessions}
    for c in result.contexts:
        messages = context_messages(c, bundle.personas[0], by_id)
        dates = [m.content for m in messages if m.role == "system" and m.content.startswith("Conversation date")]
        assert len(dates) == len(c.session_ids) and dates == sorted(dates)
        own = [by_id[s].session for s in c.session_ids if by_id[s].session.kind == "topic"]
        assert date_text(own[0].time) in dates
    off = bundle.config.assembly.model_copy(update={"session_dates": False})
    plain = assemble_all(bundle.personas, sessions, bundle.queries, settings=off, run_seed=1)
    messages = context_messages(plain.contexts[0], bundle.personas[0], by_id)
    assert not any(m.content.startswith("Conversation date") for m in messages)


def test_default_sessions_meet_the_profile_length_targets(tmp_path):
    from pipeline.config import load_config
    from pipeline.llm import LLM
    from pipeline.run.persona_text import build_persona_text
    from pipeline.s1_personas.sample_personas import sample_personas
    from schemas.llm import LLMSettings

    config = load_config("default", n_personas=1)
    llm = LLM(LLMSettings(llm="fake", cache_path=tmp_path / "c.sqlite"))
    seed = sample_personas(1, run_seed=config.seed, settings=config.personas)[0]
    text = build_persona_text(seed, config=config, llm=llm)
    assert median(s.session.n_turns for s in text.sessions) >= 10
    words = [len(t.content.split()) for s in text.sessions for t in s.turns if t.role == "assistant" and not t.fallback]
    lo, hi = config.text.assistant_words_min, config.text.assistant_words_max
    assert words and all(lo <= w <= hi for w in words)
    assert AssemblySettings().max_persona_fraction == 1.0
