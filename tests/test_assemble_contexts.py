"""Assembly: budgets filled within tolerance, causal order, placements before their evidence."""

from __future__ import annotations

import pytest

from pipeline import tokens as tokens_module
from pipeline.dataset.export_longmemeval import lme_date
from pipeline.s5_assembly import filling as filling_module
from pipeline.s5_assembly import fit
from pipeline.s5_assembly.assemble_contexts import assemble_all
from pipeline.s5_assembly.budget import AssemblyError, context_messages, slot_dates
from pipeline.tokens import MESSAGE_OVERHEAD, count_tokens, message_tokens, message_tokens_many
from schemas.context import AssemblySettings
from schemas.query import Evidence
from tests.support.factories import make_bundle, make_filler_pool, tiny_config
from tests.support.harness import lme_history


@pytest.fixture(scope="module")
def bundle():
    return make_bundle(tiny_config(n_personas=3))


@pytest.fixture(scope="module")
def assembly(bundle):
    return assemble_all(bundle.personas, bundle.sessions, bundle.queries,
                        settings=bundle.config.assembly, run_seed=bundle.config.seed)


def _sessions(assembly):
    return {s.session.session_id: s for s in assembly.sessions}


def full_entry(context, by_id) -> dict:
    """A LongMemEval entry holding the whole context (every row's haystack is a prefix of it)."""
    dates = slot_dates(context.session_ids, {sid: by_id[sid].session for sid in context.session_ids})
    return {"haystack_dates": [lme_date(d) for d in dates],
            "haystack_sessions": [[{"role": t.role, "content": t.content} for t in by_id[sid].turns]
                                  for sid in context.session_ids]}


def test_message_tokens_is_content_plus_overhead():
    assert message_tokens("I like slow-cooked ramen.") == count_tokens("I like slow-cooked ramen.") + MESSAGE_OVERHEAD


@pytest.mark.parametrize("profile", ["once", "per_session"])
@pytest.mark.parametrize("budgets", [(3000, 5000), (9000, 14000)])
def test_every_context_fills_its_budget_within_two_percent(bundle, profile, budgets):
    sessions = bundle.sessions + make_filler_pool(99, count=120)
    settings = AssemblySettings(budgets=list(budgets), profile=profile)
    result = assemble_all(bundle.personas, sessions, bundle.queries, settings=settings, run_seed=3)
    personas = {p.persona_id: p for p in bundle.personas}
    by_id = _sessions(result)
    assert len(result.contexts) == len(bundle.personas) * len(budgets)
    for c in result.contexts:
        messages = context_messages(c, personas[c.persona_id], by_id)
        assert sum(message_tokens(m.content) for m in messages) == c.n_tokens
        lme_exact = count_tokens(lme_history(full_entry(c, by_id)))
        ask = max(fit.pm_ask_tokens(q.question, [o.text for o in q.options]) for q in bundle.queries
                  if q.persona_id == c.persona_id)
        assert c.n_tokens <= fit.pm_history_cap(c.budget_tokens, ask)
        assert lme_exact <= fit.lme_history_cap(c.budget_tokens)
        estimate = sum(fit.lme_session_tokens_many([by_id[s].turns for s in c.session_ids]))
        assert lme_exact <= estimate
        assert c.budget_tokens * 0.98 <= fit.fill_tokens(c.budget_tokens, c.n_tokens, estimate, ask) <= c.budget_tokens
        assert c.filler_tokens == sum(by_id[s].session.n_tokens for s in c.session_ids if by_id[s].session.kind == "filler")


def test_topic_causal_order_and_time_are_never_violated(bundle, assembly):
    rank = {p.name: i for i, p in enumerate(bundle.config.periods)}
    by_id = _sessions(assembly)
    for c in assembly.contexts:
        own = [by_id[s].session for s in c.session_ids if by_id[s].session.kind == "topic"]
        assert own, c.context_id
        assert [s.time for s in own] == sorted(s.time for s in own)
        for topic in {s.topic for s in own}:
            ranks = [rank[s.period] for s in own if s.topic == topic]
            assert ranks == sorted(ranks)


def test_every_placement_has_its_evidence_before_the_question(bundle, assembly):
    personas = {p.persona_id: p for p in bundle.personas}
    queries = {q.query_id: q for q in bundle.queries}
    contexts = {c.context_id: c for c in assembly.contexts}
    by_id = _sessions(assembly)
    assert len(assembly.placements) == 2 * len(bundle.queries)
    for p in assembly.placements:
        c, q = contexts[p.context_id], queries[p.query_id]
        messages = context_messages(c, personas[c.persona_id], by_id)
        assert sum(message_tokens(m.content) for m in messages[: p.end_index]) == p.context_tokens
        evidence_text = by_id[q.evidence[0].session_id].turns[q.evidence[0].turn_index].content
        positions = [i for i, m in enumerate(messages) if m.content == evidence_text]
        assert positions and max(positions) < p.end_index
        assert p.distance_tokens >= 0 and p.distance_sessions >= 0 and 0 <= p.evidence_position < 1
        if q.anchor_session_id is None:
            assert p.end_index == len(messages)
        else:
            assert messages[p.end_index].content == by_id[q.anchor_session_id].turns[q.anchor_turn_index].content


def test_a_query_whose_evidence_follows_its_anchor_is_counted_not_placed(bundle):
    anchored = next(q for q in bundle.queries if q.anchor_session_id)
    later = [s for s in bundle.sessions if s.session.persona_id == anchored.persona_id
             and s.session.session_id == anchored.anchor_session_id][0]
    bad = anchored.model_copy(update={
        "query_id": "qry_bad",
        "evidence": [Evidence(session_id=later.session.session_id, turn_index=anchored.anchor_turn_index + 1)],
    })
    result = assemble_all(bundle.personas, bundle.sessions, [bad], settings=bundle.config.assembly, run_seed=7)
    assert result.placements == []
    assert result.unplaced == {"evidence_not_before_anchor": len(bundle.config.assembly.budgets)}


def test_ordering_modes_put_the_long_gap_around_the_focal_topics_final_session(bundle):
    settings = AssemblySettings(budgets=[8000], gap_fraction=0.6)
    for ordering in ("focal_gap", "end_gap"):
        result = assemble_all(bundle.personas, bundle.sessions, bundle.queries,
                              settings=settings.model_copy(update={"orderings": [ordering]}), run_seed=7)
        by_id = _sessions(result)
        for c in result.contexts:
            kinds = [by_id[s].session for s in c.session_ids]
            final = max(i for i, s in enumerate(kinds) if s.kind == "topic" and s.topic == c.focal_topic)
            step = -1 if ordering == "focal_gap" else 1
            i, gap = final + step, 0
            while 0 <= i < len(kinds) and kinds[i].kind == "filler":
                gap, i = gap + kinds[i].n_tokens, i + step
            assert c.ordering == ordering
            assert gap >= 0.6 * c.filler_tokens - max(s.n_tokens for s in kinds)


def test_same_seed_same_contexts_other_seed_other_filler(bundle, assembly):
    again = assemble_all(bundle.personas, bundle.sessions, bundle.queries,
                         settings=bundle.config.assembly, run_seed=bundle.config.seed)
    other = assemble_all(bundle.personas, bundle.sessions, bundle.queries,
                         settings=bundle.config.assembly, run_seed=bundle.config.seed + 1)
    assert again.contexts == assembly.contexts and again.placements == assembly.placements
    assert [c.session_ids for c in other.contexts] != [c.session_ids for c in assembly.contexts]


def test_each_session_is_counted_once_not_per_context(monkeypatch):
    fresh = make_bundle(tiny_config(n_personas=2))
    counted: list[str] = []
    real_one, real_many = tokens_module.count_tokens, tokens_module.message_tokens_many
    monkeypatch.setattr(tokens_module, "count_tokens", lambda text: counted.append(text) or real_one(text))
    monkeypatch.setattr(tokens_module, "message_tokens_many", lambda texts: counted.extend(texts) or real_many(texts))
    settings = AssemblySettings(budgets=[3000, 5000, 8000])
    assemble_all(fresh.personas, fresh.sessions, fresh.queries, settings=settings, run_seed=7)
    n_turns = sum(len(s.turns) for s in fresh.sessions)
    assert len(counted) == n_turns + len(fresh.personas)


def test_batch_counting_matches_the_message_rule():
    texts = ["plain words", "<|endoftext|> is just text here", "emoji 🙂 and accents: café", " ", "a\n\nb"]
    assert message_tokens_many(texts) == [message_tokens(t) for t in texts]


def test_a_filler_pool_too_small_for_the_budget_is_a_clear_error(bundle):
    few = [s for s in bundle.sessions if s.session.kind == "topic"] + make_filler_pool(1, count=3)
    with pytest.raises(AssemblyError, match="filler pool: 3 sessions"):
        assemble_all(bundle.personas, few, bundle.queries, settings=bundle.config.assembly, run_seed=7)


def test_a_budget_too_small_for_any_topic_is_a_clear_error(bundle):
    with pytest.raises(AssemblyError, match="cannot hold any whole topic"):
        assemble_all(bundle.personas, bundle.sessions, bundle.queries,
                     settings=AssemblySettings(budgets=[1500], max_persona_fraction=0.1), run_seed=7)



def test_a_filler_pick_over_one_cap_is_asked_again_with_less_room_until_it_fits(monkeypatch):
    """A pick that fills LongMemEval's JSON history exactly but runs over the message-rule cap is asked again
    with its room lowered by the excess (asking with the same room and seed would pick the same again)."""
    import random
    from types import SimpleNamespace

    heavy = [SimpleNamespace(session_id=f"h{i}", n_tokens=300) for i in range(4)]  # chat-heavy
    light = [SimpleNamespace(session_id=f"l{i}", n_tokens=100) for i in range(12)]
    pool = SimpleNamespace(sessions=heavy + light, lme_tokens={**{s.session_id: 150 for s in heavy},
                                                               **{s.session_id: 110 for s in light}})
    rooms = []

    def pick(pool_, room, rng, cost):
        rooms.append(room)
        order = heavy + light if len(rooms) == 1 else light  # the first pick overflows the chat cap
        picked, used = [], 0
        for s in order:
            if used + cost(s) <= room:
                picked.append(s)
                used += cost(s)
        return picked

    monkeypatch.setattr(filling_module, "_pick_filler", pick)
    budget, ask = 1500, 100
    fillers, _, fill = filling_module._fitting_filler(pool, budget, 0, 0, 0, ask, lambda: random.Random(3),
                                                       full=budget * 0.95)
    by_id = {s.session_id: s for s in pool.sessions}
    chat, lme = sum(by_id[f].n_tokens for f in fillers), sum(pool.lme_tokens[f] for f in fillers)
    assert rooms[0] == fit.lme_history_cap(budget) and rooms[1] < rooms[0]
    assert fit.fits(budget, chat, lme, ask) and fill == fit.fill_tokens(budget, chat, lme, ask)
