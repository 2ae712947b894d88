"""What a reader learns from a persona's whole question set (an option shown across its questions) and from how
an option's parts relate (a reason that shares words with the item), the gate's note when a run is too small to
check, and the gate that keeps a reworded reply on its item and stance."""

from __future__ import annotations

import random
from datetime import datetime

from pipeline.config import load_config
from pipeline.dataset.card import _built, unenforced
from pipeline.s4_queries.exposure import FEATURES, question_set_rows
from pipeline.s4_queries.filtering import filter_queries
from pipeline.s4_queries.options import carries_problem
from pipeline.s4_queries.probe import OPTION_ONLY, QUESTION_SET, run_probes
from schemas.query import Evidence, Option, Query

VOCAB = [f"{a}{b}{c}" for a in "bdfgklmnprstvz" for b in ("ara", "elo", "imu", "ond", "usk") for c in "aeiou"]


def _query(p: int, k: int, texts: list[str], correct: int, qtype: str = "recall_user_shared_facts") -> Query:
    options = [Option(text=t, role="correct" if i == correct else "generic", grounding=["x"]) for i, t in enumerate(texts)]
    return Query(query_id=f"q{p}_{k}", persona_id=f"p{p}", type=qtype, topic="t", as_of=datetime(2025, 1, 1),
                 question="My sister asked what I have been up to lately, any thoughts?", options=options,
                 correct_index=correct, evidence=[Evidence(session_id="s", turn_index=0)])


def exposed_sets(n_personas: int, per: int, *, leak: bool, seed: int = 0) -> list[Query]:
    """Options "You told me about W1 W2." of words fresh per persona. Leaking: the correct option's words are
    one of the persona's three own events, which come back across its questions, and every distractor's are
    shown once; balanced: every option is drawn alike from words shown three times each."""
    rng = random.Random(seed)
    out = []
    for p in range(n_personas):
        words = rng.sample(VOCAB, 2 * (3 + 4 * per))
        pairs = [" ".join(words[i:i + 2]) for i in range(0, len(words), 2)]
        lived, fresh = pairs[:3], pairs[3:]
        for k in range(per):
            correct = rng.randrange(4)
            if leak:
                texts = [fresh.pop() for _ in range(4)]
                texts[correct] = rng.choice(lived)
            else:
                texts = rng.sample(lived + pairs[3:6], 4)
            out.append(_query(p, k, [f"You told me about {t}." for t in texts], correct))
    return out


def test_the_question_set_probe_reads_what_comes_back_across_a_persona_questions():
    leaky = run_probes(exposed_sets(30, 8, leak=True), folds=5, rounds=1, which=(OPTION_ONLY, QUESTION_SET))
    assert leaky[1].accuracy > 0.8  # every option's words are new to the per-option probe, so it cannot see this
    assert leaky[0].accuracy < 0.45
    balanced = run_probes(exposed_sets(30, 8, leak=False), folds=5, rounds=1, which=(QUESTION_SET,))
    assert 0.1 < balanced[0].accuracy < 0.4


def test_exposure_and_relatedness_features_of_one_persona():
    rng = random.Random(1)
    item = "smoked fish"
    texts = [f"Your view of {item} changed after you {r}." for r in
             ("fished every weekend", "moved to a dry town", "lost a bet", "sold a car")]
    shown = [_query(0, 0, texts, 0, "revisit_reasons_behind_preference_updates"),
             _query(0, 1, ["You told me you moved to a dry town.", "a", "b", "c"], rng.randrange(4))]
    rows = question_set_rows(shown)[:4]
    col = {name: rows[:, i] for i, name in enumerate(FEATURES)}
    assert list(col["exposure"]) == [0, 1, 0, 0]  # "moved to a dry town" is shown in the other question
    assert col["most_item_related"][0] == 1  # "fished" shares its letters with "fish"
    assert question_set_rows([_query(0, 0, texts, 0)])[:, 0].tolist() == [0, 0, 0, 0]  # alone, nothing comes back


def test_a_run_below_the_gates_minimum_says_so_in_one_line():
    config = load_config("default", n_personas=4)
    queries = exposed_sets(4, 6, leak=False)
    kept, report = filter_queries(queries, {}, config=config)
    line = unenforced(report.summary())
    assert not report.enforced and kept == queries
    assert line == ("the probes' gate was not enforced: 4 personas, below queries.probe.min_personas (10); their "
                    "figures are reported on the card, not checked")
    assert unenforced({"enforced": True}) is None and unenforced(None) is None


def test_the_card_counts_model_and_code_worded_queries_per_type():
    queries = exposed_sets(2, 3, leak=False)
    provenance = [{"wording": "model", "situation": "a"}, {"wording": "code", "situation": "b"},
                  {"wording": "code", "fallback": "true", "situation": "a"},
                  {"wording": "code", "redrawn": "1"}, {"wording": "model"}, {"wording": "code"}]
    queries = [q.model_copy(update={"provenance": p}) for q, p in zip(queries, provenance, strict=True)]
    table = _built(queries)
    assert "| type | queries | model | code | code (fallback) | redrawn | distinct messages |" in table
    assert "| recall_user_shared_facts | 6 | 2 | 2 | 1 | 1 | 1 |" in table  # one message asked six times


CODE = ["I would go for oat milk lattes again; they are ones you enjoy.",
        "I would skip oat milk lattes and get a flat white, since you avoid them.",
        "I would go for matcha tea again; it is one you enjoy.",
        "I would skip matcha tea and get a chai, since you avoid it."]


def test_code_wording_carries_itself_and_a_faithful_rewording_passes():
    assert carries_problem(CODE, CODE) is None
    reworded = ["Oat milk lattes again, then: you enjoy those.",
                "Maybe a flat white rather than oat milk lattes, which you avoid.",
                "How about matcha tea? You enjoy it.",
                "A chai instead of matcha tea, which you avoid."]
    assert carries_problem(CODE, reworded) is None


def test_a_reply_that_loses_its_item_swaps_it_or_turns_its_stance_is_rejected():
    lost = ["You might enjoy something warm.", *CODE[1:]]
    assert carries_problem(CODE, lost).startswith("reply 1 lost what it is about")
    swapped = [CODE[0], CODE[1], "Oat milk lattes again, you enjoy lattes with oat milk.", CODE[3]]
    assert carries_problem(CODE, swapped) == "reply 3 speaks of option 1's item"
    turned = ["I would skip oat milk lattes again; they are ones you avoid.", *CODE[1:]]
    assert carries_problem(CODE, turned) == "reply 1 turned its stance around"
