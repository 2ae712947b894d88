"""Text stages with the fake backend: every planned beat lands, annotated exactly, in the right session."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from pipeline.catalog import load_taxonomy
from pipeline.checks.topic import reaches
from pipeline.config import load_config
from pipeline.llm import LLM
from pipeline.llm.errors import CallFailed
from pipeline.run.persona_text import build_persona_text
from pipeline.s1_personas.expand_persona import clean_items, profile_problem
from pipeline.s1_personas.sample_personas import persona_from_seed, sample_personas
from pipeline.s3_text.beats import Beat, beat_problem, fallback_exchange, plan_sessions
from pipeline.s3_text.filler import filter_filler, write_filler_pool
from pipeline.s3_text.narrate_events import apply_narrations, effects_of
from pipeline.tokens import count_tokens
from pipeline.words import mentions, topic_label
from schemas.drafts import ProfileDraft, narration_draft
from schemas.ids import parse_version_key
from schemas.llm import LLMSettings


def fake_llm(tmp_path: Path, faults: str = "") -> LLM:
    return LLM(LLMSettings(llm=f"fake?{faults}" if faults else "fake", cache_path=tmp_path / "cache.sqlite",
                           backoff_s=0, backoff_max_s=0))


def check_persona(result, config) -> None:
    """Every invariant the issue names, checked against the plan recomputed from the stored timeline."""
    timeline, persona = result.timeline, result.persona
    by_id = {s.session.session_id: s for s in result.sessions}
    versions = {p.key: p for p in timeline.preferences}
    for plan in plan_sessions(persona, timeline, config=config):
        swt = by_id[plan.session_id]
        annotated = [(t.pref_versions, t.event_ids) for t in swt.turns if t.pref_versions or t.event_ids]
        assert annotated == [(b.pref_versions, b.event_ids) for b in plan.beats]
        assert swt.session.topic == plan.topic and swt.session.period == plan.period
    voiced = set()
    for swt in result.sessions:
        for i, turn in enumerate(swt.turns):
            assert turn.role == ("user" if i % 2 == 0 else "assistant")
            if turn.role == "assistant":
                assert not turn.pref_versions and not turn.event_ids
            for key in turn.pref_versions:
                assert versions[key].valid_at(swt.session.time), (key, swt.session.time)
                voiced.add(key)
        assert swt.session.n_tokens == sum(t.n_tokens for t in swt.turns) > 0
    assert set(versions) <= voiced  # every initial version and every change is voiced somewhere
    told = {eid for s in result.sessions for t in s.turns for eid in t.event_ids}
    taxonomy = load_taxonomy()
    for e in timeline.events:  # every life event is told, unless it belongs to none of the run's topics
        if e.kind == "life_event" and e.event_id not in told:
            effects = taxonomy.event_specs()[e.summary][1].parsed_effects(taxonomy.topic_aliases)
            assert not {x.topic for x in effects} & set(config.topics), e.summary
            assert not any(reaches(e.summary, t) for t in config.topics), e.summary


def test_twenty_personas_default_config_every_beat_lands(tmp_path):
    config = load_config("default", n_personas=20, seed=3)
    llm = fake_llm(tmp_path)
    beats = fallbacks = 0
    for seed in sample_personas(20, run_seed=config.seed, settings=config.personas):
        result = build_persona_text(seed, config=config, llm=llm)
        check_persona(result, config)
        assert len(result.sessions) == len(config.topics) * len(config.periods)
        beats += result.stats.beats
        fallbacks += result.stats.fallback_beats
    assert beats > 20 * 40
    assert fallbacks == 0  # the fake words every beat faithfully


def test_faulty_model_lowers_prose_never_labels(tmp_path):
    config = load_config("smoke", n_personas=2, seed=1)
    llm = fake_llm(tmp_path, "malformed_json=0.3&schema_violation=0.2&truncation=0.1")
    for seed in sample_personas(2, run_seed=config.seed, settings=config.personas):
        result = build_persona_text(seed, config=config, llm=llm)
        check_persona(result, config)
        flagged = [t for s in result.sessions for t in s.turns if t.fallback]
        assert all(t.content for t in flagged)


def test_same_seed_and_cache_give_identical_text(tmp_path):
    config = load_config("smoke", n_personas=1, seed=5)
    (seed,) = sample_personas(1, run_seed=5, settings=config.personas)
    llm = fake_llm(tmp_path)
    first = build_persona_text(seed, config=config, llm=llm)
    again = build_persona_text(seed, config=config, llm=fake_llm(tmp_path))
    assert first == again


def test_filler_pool_never_mentions_a_dataset_item(tmp_path):
    config = load_config("smoke", n_personas=1, seed=2)
    pool = write_filler_pool(llm=fake_llm(tmp_path), config=config)
    assert len(pool) == config.text.filler_pool_size
    assert all(s.session.kind == "filler" and s.session.persona_id is None for s in pool)
    planted = {"kettle", pool[0].turns[0].content.split()[-1].strip(".?")}
    kept, dropped = filter_filler(pool, planted | {"quantum yodelling"})
    assert dropped >= 1
    for swt in kept:
        assert not any(mentions(t.content, item) for t in swt.turns for item in planted)


def test_beat_checks_catch_unfaithful_wording():
    beat = Beat(kind="preference_update", topic="foodRecommendation", item="spicy Sichuan hotpot", stance="dislike",
                reason="My doctor said less salt.", event="was diagnosed", pref_versions=["p@2"], event_ids=["e"])
    ok = "My doctor said less salt, so spicy Sichuan hotpot is off the menu for me now."
    check = dict(unvoiced=["slow-cooked ramen"], max_tokens=80, count=count_tokens)
    assert beat_problem(beat, ok, "Understood, let's find milder dishes.", **check) is None
    assert "does not mention" in beat_problem(beat, "I feel different about food now.", "Okay.", **check)
    assert "restates the old preference" in beat_problem(beat, "I used to love spicy Sichuan hotpot.", "Ok.", **check)
    assert "not voiced" in beat_problem(beat, ok, "You must love slow-cooked ramen then!", **check)
    assert "longer than" in beat_problem(beat, ok + " word" * 200, "Ok.", **check)


def test_fallback_exchange_voices_the_fact_plainly():
    beat = Beat(kind="preference_update", topic="travelPlanning", item="hostel dorm rooms", stance="like",
                reason="I started backpacking with friends", pref_versions=["p@2"])
    user, assistant = fallback_exchange(beat, topic_label(beat.topic))
    assert "hostel dorm rooms" in user and "backpacking" in user and "travel planning" in assistant
    check = dict(unvoiced=[], max_tokens=300, count=count_tokens)
    assert beat_problem(beat, user, assistant, **check) is None


def test_profile_check_and_item_cleaning(tmp_path):
    (seed,) = sample_personas(1, run_seed=9, settings=load_config("smoke").personas)
    persona = persona_from_seed(seed, run_seed=9)
    good = ProfileDraft(name="A B", age=seed.attributes.age, gender_identity=seed.attributes.gender_identity,
                        occupation="x" * 5, location="Oslo, Norway",
                        background="Grew up by the sea and moved to the city for work; spends weekends running "
                                   "along the river and trying new recipes with friends.")
    assert profile_problem(good, persona) is None
    assert "age" in profile_problem(good.model_copy(update={"age": seed.attributes.age + 1}), persona)
    for junk in ("b" * 130, "2020-12-30T15:13:57 Chat History: Sung Zhiyuan said hello to everyone there today."):
        assert profile_problem(good.model_copy(update={"background": junk}), persona) is not None
    taken = {"ramen"}
    raw = ["  Ramen bowls ", "- hot pot!", "hot pot", "", "x " * 40, "tea", "]/*&*/}junk here", "bunny_carnitas x"]
    assert clean_items(raw, taken=taken, limit=5) == ["Ramen bowls", "hot pot", "junk here"]


def test_apply_narrations_changes_text_not_facts(tmp_path):
    config = load_config("smoke", n_personas=1, seed=4)
    llm = fake_llm(tmp_path)
    (seed,) = sample_personas(1, run_seed=4, settings=config.personas)
    result = build_persona_text(seed, config=config, llm=llm)
    timeline = result.timeline
    effects = effects_of(timeline)
    life = next(e for e in timeline.events if e.kind == "life_event" and effects.get(e.event_id))
    k = len(effects[life.event_id])
    versions = effects[life.event_id]
    linked = [f"Reason number {i}: since I {life.summary}, {v.item} is different." for i, v in enumerate(versions)]
    draft = narration_draft(k)(narrative="n" * 70, reasons=linked)
    out = apply_narrations(timeline, {life.event_id: draft}, effects)
    assert out.event(life.event_id).narrative == "n" * 70
    assert [(p.pref_id, p.version, p.stance, p.valid_from) for p in out.preferences] == \
           [(p.pref_id, p.version, p.stance, p.valid_from) for p in timeline.preferences]
    changed = {p.key for p in out.preferences if p.reason and p.reason.startswith("Reason number")}
    assert changed == {v.key for v in versions}
    assert all(parse_version_key(k)[1] >= 1 for k in changed)
    # a reason that names neither the event nor the item leaves code's reason, which states the link
    vague = narration_draft(k)(narrative="n" * 70, reasons=["it just felt right to change my mind"] * k)
    kept = apply_narrations(timeline, {life.event_id: vague}, effects)
    for v in versions:
        reason = next(p.reason for p in kept.preferences if p.key == v.key)
        assert reason == next(p.reason for p in timeline.preferences if p.key == v.key)
        assert v.item in reason


def test_a_reason_must_name_the_event_gist_and_the_item():
    from pipeline.s3_text.narrate_events import reason_states_link
    from schemas.timeline import Event

    event = Event(event_id="e", persona_id="p", time=datetime(2025, 1, 1), period="p0", kind="life_event",
                  summary="was diagnosed with type 2 diabetes")
    item = "dark chocolate truffles"
    assert reason_states_link("Since the diabetes diagnosis I save dark chocolate truffles for rare treats.", event, item)
    assert not reason_states_link("I save dark chocolate truffles for rare treats now.", event, item)
    assert not reason_states_link("Since the diabetes diagnosis I cut back on sweets.", event, item)


@pytest.mark.model
def test_embedded_model_runs_the_text_stages_end_to_end(tmp_path):
    """The real local path, 2 personas x 3 topics: grammars for every output model of the text stages."""
    config = load_config("smoke", n_personas=2, seed=7)
    config = config.model_copy(update={
        "timeline": config.timeline.model_copy(update={
            "initial_prefs_min": 1, "initial_prefs_max": 1, "topic_update_probability": 0.5,
            "routine_per_period": 0.0, "background_events": 0}),
        "text": config.text.model_copy(update={
            "inventory_size": 3, "small_talk_exchanges": 0, "filler_pool_size": 1, "filler_exchanges": 1,
            "attempts": 1}),
    })
    llm = LLM(LLMSettings(llm="local", cache_path=tmp_path / "cache.sqlite", max_tokens=150, reask=0))
    beats = fallbacks = 0
    for seed in sample_personas(2, run_seed=7, settings=config.personas):
        result = build_persona_text(seed, config=config, llm=llm)
        check_persona(result, config)
        beats += result.stats.beats
        fallbacks += result.stats.fallback_beats
    assert write_filler_pool(llm=llm, config=config) is not None
    usage = llm.usage_summary().by_stage
    assert {"expand_persona", "narrate_events", "write_sessions", "filler"} <= set(usage)
    assert all(count.backend_calls > 0 for count in usage.values())
    print(f"embedded model: {beats} beats, {fallbacks} code-written ({fallbacks / max(1, beats):.0%})")


def test_the_turn_mode_writes_each_turn_in_its_own_short_call_and_every_beat_lands(tmp_path):
    """text.writing turn (the embedded model's mode under auto): one call for the user's message, one for the
    reply to it; the fake voices every beat faithfully, so none falls back to code."""
    base = load_config("smoke")
    config = base.model_copy(update={"text": base.text.model_copy(update={"writing": "turn"})})
    llm = fake_llm(tmp_path)
    (seed,) = sample_personas(1, run_seed=config.seed, settings=config.personas)
    result = build_persona_text(seed, config=config, llm=llm)
    beats = result.stats.beats
    specs = [req.output.__name__ for req in llm.backend.requests]
    implicit = sum(b.implicit for p in plan_sessions(result.persona, result.timeline, config=config) for b in p.beats)
    assert beats and result.stats.fallback_beats == 0 and implicit  # an implicit beat's user turn is code's wording
    assert specs.count("UserTurnDraft") == beats - implicit
    assert sum(s.startswith("AssistantTurnDraft") for s in specs) == beats
    assert not any(s.startswith(("ExchangeDraft", "SessionDraft")) for s in specs)
    assert result.stats.origin["user_turn"].model >= beats - implicit
    assert result.stats.origin["implicit_turn"].code == implicit


def test_auto_writes_turns_on_the_embedded_model_and_sessions_elsewhere(tmp_path):
    from types import SimpleNamespace

    from pipeline.config import with_writing, writing_mode

    config = load_config("smoke")
    assert config.text.writing == "auto"
    local = SimpleNamespace(backend=SimpleNamespace(provider="local"))
    assert writing_mode(config, local) == "turn" and writing_mode(config, fake_llm(tmp_path)) == "session"
    assert with_writing(config, local).text.writing == "turn"
    fixed = config.model_copy(update={"text": config.text.model_copy(update={"writing": "exchange"})})
    assert writing_mode(fixed, local) == "exchange"


def test_auto_words_queries_in_code_on_the_embedded_model_and_asks_no_call(tmp_path):
    """queries.wording auto: code on the embedded model (no call spent on a wording its gates always refused),
    the model elsewhere; in code mode the queries are code's by design, not fallbacks."""
    from types import SimpleNamespace

    from pipeline.config import query_wording, with_writing
    from pipeline.s4_queries.generate_queries import generate_queries

    config = load_config("smoke", n_personas=1, seed=7)
    local = SimpleNamespace(backend=SimpleNamespace(provider="local"))
    llm = fake_llm(tmp_path)
    assert config.queries.wording == "auto"
    assert query_wording(config, local) == "code" and query_wording(config, llm) == "model"
    fixed = config.model_copy(update={"queries": config.queries.model_copy(update={"wording": "model"})})
    assert query_wording(fixed, local) == "model"  # a profile that asks for the model's wording gets it
    assert with_writing(config, local).queries.wording == "code"
    assert with_writing(config, llm).queries.wording == "model"
    (seed,) = sample_personas(1, run_seed=config.seed, settings=config.personas)
    text = build_persona_text(seed, config=config, llm=llm)
    code = config.model_copy(update={"queries": config.queries.model_copy(update={"wording": "code"})})
    before = llm.usage_summary().total.calls
    queries, stats = generate_queries(text.persona, text.timeline, text.sessions, llm=llm, config=code)
    assert queries and llm.usage_summary().total.calls == before and stats.llm_calls == 0
    assert stats.wording_fallbacks == 0
    assert all(q.provenance.get("wording") == "code" and "fallback" not in q.provenance for q in queries)
    model, _ = generate_queries(text.persona, text.timeline, text.sessions, llm=llm, config=config)
    assert llm.usage_summary().total.calls > before  # auto on a backend other than the embedded one asks it
    assert [q.options for q in model] and {q.type for q in model} == {q.type for q in queries}


def _turn_config(profile: str):
    base = load_config(profile, n_personas=1, seed=4)
    return base.model_copy(update={"text": base.text.model_copy(update={"writing": "turn"})})


def test_the_turn_mode_keeps_a_passing_user_turn_beside_code_reply_when_every_reply_fails(tmp_path):
    """A reply that never passes does not cost the beat its model-written user turn: the user turn is asked
    once, only the reply is asked again (``text.turn_attempts`` samples), then code replies; the turns'
    fallback flags and the origin counts say which turn is whose (every beat explicit: an implicit one's user
    turn is code's wording, see test_implicit_voicing)."""
    config = _turn_config("smoke")
    config = config.model_copy(update={"text": config.text.model_copy(update={"implicit_share": 0.0})})
    llm = fake_llm(tmp_path)
    real, asked = llm.agenerate, {"user": 0, "reply": 0}

    async def no_replies(spec, context, **kwargs):  # each exchange's turns are asked one call at a time
        out = await real(spec, context, **kwargs)
        reply = spec.name == "write_sessions.turn_assistant"
        asked["reply" if reply else "user"] += spec.name in ("write_sessions.turn_user", "write_sessions.turn_assistant")
        if reply:
            raise CallFailed("no reply")
        return out

    llm.agenerate = no_replies
    (seed,) = sample_personas(1, run_seed=config.seed, settings=config.personas)
    result = build_persona_text(seed, config=config, llm=llm)
    beats = result.stats.beats
    exchanges = sum(len(s.turns) // 2 for s in result.sessions)  # the beats' and any ordinary exchanges
    assert beats and asked == {"user": exchanges, "reply": exchanges * config.text.turn_attempts}
    check_persona(result, config)
    pairs = [(s.turns[k], s.turns[k + 1]) for s in result.sessions for k in range(0, len(s.turns), 2)
             if s.turns[k].pref_versions or s.turns[k].event_ids]
    assert len(pairs) == beats
    assert all(not user.fallback and assistant.fallback for user, assistant in pairs)
    assert all(assistant.content.startswith("Thank you for telling me") for _, assistant in pairs)
    origin = result.stats.origin
    # an ordinary exchange whose reply never passes is written by code whole, its user turn too
    assert (origin["user_turn"].model, origin["user_turn"].code) == (beats, exchanges - beats)
    assert (origin["assistant_turn"].model + origin["assistant_turn"].reasked, origin["assistant_turn"].code) == (0, exchanges)
    assert result.stats.fallback_beats == 0  # the beat's fact is in the model's words


def test_the_turn_mode_writes_ordinary_exchanges_a_turn_at_a_time(tmp_path):
    """On a profile with ordinary exchanges, the turn mode asks them turn by turn too (no JSON session or
    small-talk call), opening with a plain question on the topic, and keeps those whose turns both pass."""
    config = _turn_config("default")
    llm = fake_llm(tmp_path)
    (seed,) = sample_personas(1, run_seed=config.seed, settings=config.personas)
    result = build_persona_text(seed, config=config, llm=llm)
    specs = [req.output.__name__ for req in llm.backend.requests]
    assert not any(s.startswith(("ExchangeDraft", "SessionDraft", "SmallTalkDraft")) for s in specs)
    stats = result.stats
    # an exchange is dropped only where the reply names one of the persona's items (a stance nobody set)
    assert stats.small_talk_kept > stats.beats and stats.small_talk_dropped <= 0.05 * stats.small_talk_kept
    assert set(stats.problems) <= {"ordinary exchange names a preference item"}
    # one user-turn call per beat and per kept exchange, and at most one more per failed try of an ordinary
    # exchange (a failing user turn is asked again; a failing reply only has the reply asked again)
    asked = specs.count("UserTurnDraft") + stats.origin["implicit_turn"].code  # code words an implicit turn
    assert stats.beats + stats.small_talk_kept <= asked <= stats.beats + stats.small_talk_kept + sum(stats.problems.values())
    ordinary = [t for s in result.sessions for t in s.turns if t.role == "user" and not (t.pref_versions or t.event_ids)]
    assert ordinary and all(not t.fallback for t in ordinary)
    assert all(t.content.startswith(("Could I get", "I would like", "I have been reading", "Can you help")) for t in ordinary)
    check_persona(result, config)


def test_the_turn_mode_accepts_shorter_replies_than_it_asks_for():
    from pipeline.s3_text.turn_mode import reply_words

    assert reply_words(load_config("default")) == (30, 250)  # asked 80-250: a 135M model rarely writes 80
    assert reply_words(load_config("smoke")) == (5, 60)  # a floor above the profile's own leaves it alone
