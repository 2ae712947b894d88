"""Option-set shapes read from the text alone, and the balance that keeps every slot of a shape about
equally often the answer (pipeline/s4_queries/balance.py); the sources that keep an item's wording from
telling the answer (the inventory's catalog share, decoys of the focal item's source)."""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from datetime import datetime

from pipeline.s4_queries.balance import answer_slot, balance, shape, slots
from pipeline.s4_queries.chains import chain_text
from schemas.query import Evidence, Option, Query

TRACK = "track_full_preference_evolution"
FIRST = "This is the first I am hearing of {} from you."


def _query(p: int, k: int, texts: list[str], correct: int, qtype: str = TRACK) -> Query:
    options = [Option(text=t, role="correct" if i == correct else "generic", grounding=["x"]) for i, t in enumerate(texts)]
    return Query(query_id=f"q{p}_{k}", persona_id=f"p{p}", type=qtype, topic="t", as_of=datetime(2025, 1, 1),
                 question="How have my feelings developed over time?", options=options, correct_index=correct,
                 evidence=[Evidence(session_id="s", turn_index=0)])


def _track(p: int, k: int, item: str, answer: int, rng: random.Random) -> Query:
    """{All along A, A->B, B->A, first I hear}, the answer at slot ``answer`` of that list, options shuffled."""
    texts = [chain_text(item, ["like"]), chain_text(item, ["like", "dislike"]), chain_text(item, ["dislike", "like"]),
             FIRST.format(item)]
    order = list(range(4))
    rng.shuffle(order)
    return _query(p, k, [texts[i] for i in order], order.index(answer))


def test_slots_read_frame_stances_and_sharing_with_the_item_masked():
    a = slots([chain_text("spicy hotpot", ["like", "dislike"]), chain_text("spicy hotpot", ["dislike", "like"]),
               chain_text("spicy hotpot", ["like"]), FIRST.format("spicy hotpot")])
    b = slots([chain_text("jazz records", ["like", "dislike"]), chain_text("jazz records", ["dislike", "like"]),
               chain_text("jazz records", ["like"]), FIRST.format("jazz records")])
    assert a == b  # the item is in every option: it is not part of any slot
    assert a[0][1] == (1, -1) and a[1][1] == (-1, 1) and a[2][1] == (1,) and a[3][1] == ()
    assert len({s[0] for s in a}) == 3  # "at first you", "all along you", "this is the"
    pairs = slots(["Since you enjoy tea, I would recommend more tea.", "Since you avoid tea, I would recommend mate instead.",
                   "Since you enjoy jam, I would recommend more jam.", "Since you avoid jam, I would recommend figs instead."])
    assert len({s for s in pairs}) == 2 and len({s[2] for s in pairs}) == 1  # two stances, all related alike


def _slot_rates(queries: list[Query]) -> dict[tuple, float]:
    counts = Counter((shape(q), answer_slot(q)) for q in queries)
    return {key: n / Counter(shape(q) for q in queries)[key[0]] for key, n in counts.items()}


def test_balance_thins_a_planted_slot_prior_and_keeps_an_exchangeable_set():
    rng = random.Random(3)
    planted = [_track(p, k, f"item {p} {k}", rng.choices(range(4), weights=[1, 3, 1, 1])[0], rng)
               for p in range(100) for k in range(4)]
    kept, dropped = balance(planted, slack=0.2, seed=7)
    rates = Counter(answer_slot(q)[1] for q in kept)
    assert dropped == {TRACK: len(planted) - len(kept)} and len(kept) < len(planted)
    assert max(rates.values()) / min(rates.values()) < 1.45, rates  # was about 3 to 1
    fair = [_track(p, k, f"item {p} {k}", rng.randrange(4), rng) for p in range(100) for k in range(4)]
    kept, _ = balance(fair, slack=0.2, seed=7)
    assert len(kept) > 0.9 * len(fair)


def test_balance_is_seeded_and_draws_each_query_on_its_own():
    rng = random.Random(5)
    queries = [_track(p, k, f"thing {p}", rng.choices(range(4), weights=[1, 4, 1, 1])[0], rng)
               for p in range(60) for k in range(3)]
    assert balance(queries, slack=0.2, seed=7) == balance(list(queries), slack=0.2, seed=7)
    kept = {q.query_id for q in balance(queries, slack=0.2, seed=7)[0]}
    assert kept != {q.query_id for q in balance(queries, slack=0.2, seed=8)[0]}
    # no quota: the kept answers of the over-answered slot are not cut to one exact number per fold
    per_fold = defaultdict(Counter)
    for q in queries:
        if q.query_id in kept:
            per_fold[int(q.persona_id[1:]) % 5][answer_slot(q)[1]] += 1
    assert len({c[(1, -1)] for c in per_fold.values()}) > 1


def test_a_shape_reader_gains_little_after_balance():
    """A reader of shapes alone (trained on other personas: the slot most often right in its shape) reads
    a planted prior before the balance and close to chance after it."""
    rng = random.Random(11)
    queries = [_track(p, k, f"item {p} {k}", rng.choices(range(4), weights=[1, 3, 2, 1])[0], rng)
               for p in range(150) for k in range(4)]

    def reader(qs: list[Query]) -> float:
        right = 0
        for fold in range(5):
            train = Counter((shape(q), answer_slot(q)) for q in qs if int(q.persona_id[1:]) % 5 != fold)
            for q in (q for q in qs if int(q.persona_id[1:]) % 5 == fold):
                texts = [o.text for o in q.options]
                guess = max(range(4), key=lambda i: (train[(shape(q), slots(texts)[i])], -i))
                right += guess == q.correct_index
        return right / len(qs)

    before, after = reader(queries), reader(balance(queries, slack=0.2, seed=7)[0])
    assert before > 0.4, before  # about 0.46
    assert after < 0.25 + 2 * math.sqrt(0.25 * 0.75 / len(queries)), after  # about 0.23
