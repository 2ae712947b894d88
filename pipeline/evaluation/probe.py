"""The option-only probe: a classifier that sees a query's question and options, never the history.

Logistic regression (log loss, fitted by averaged SGD: a tenth of liblinear's time here) over word n-grams of each (question, option) pair (plain and crossed with the
query type) plus length features, trained on some personas and scored on held-out ones
(persona-grouped cross-validation, ``rounds`` different splits). Its accuracy shows how much the
options alone give away; the queries it answers confidently in every round are the candidates the
adversarial filter redraws or drops (AFLite, as WinoGrande filters). One fit per fold over all
queries, never one per item, so the probe stays cheap next to a run.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field
from scipy.sparse import csr_matrix, hstack, vstack
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.linear_model import SGDClassifier

from pipeline.baselines import content_words
from schemas.query import Query

N_FEATURES = 2**15
_VECTORIZER = HashingVectorizer(ngram_range=(1, 2), n_features=N_FEATURES, alternate_sign=False, norm="l2")


class ProbeResult(BaseModel):
    """Held-out accuracy overall and per type, and per query how often it was answered confidently."""

    n_queries: int
    folds: int
    rounds: int
    accuracy: float | None = Field(description="held-out share answered right, every round counted; None: too few personas")
    by_type: dict[str, float] = Field(default_factory=dict)
    confident: dict[str, int] = Field(default_factory=dict, description="query_id -> rounds answered right with confidence")

    def leaks(self) -> set[str]:
        """Queries answered right and confidently in every round."""
        return {q for q, n in self.confident.items() if n >= self.rounds}

    def over(self, max_accuracy: float, max_type_accuracy: float) -> str | None:
        """One line naming what is above its threshold, or None."""
        if self.accuracy is not None and self.accuracy > max_accuracy:
            return f"overall {self.accuracy:.1%} > {max_accuracy:.0%}"
        worst = max(self.by_type.items(), key=lambda kv: kv[1], default=None)
        if worst and worst[1] > max_type_accuracy:
            return f"{worst[0]} {worst[1]:.1%} > {max_type_accuracy:.0%}"
        return None


def pair_texts(query) -> list[str]:
    """One text per option: its words, and the same crossed with the query type. The question's own
    words add one constant to every option of a query, so they could not move its answer; the type
    (what the question asks) enters through the crossing and the question's words through the overlap."""
    tag = query.type[:12]
    out = []
    for option in query.options:
        words = option.text.lower()
        crossed = " ".join(f"{tag}_{w}" for w in words.split())
        out.append(f"{words} {crossed}")
    return out


def length_features(query) -> list[list[float]]:
    """Per option: length relative to the query's mean, longest, shortest, words shared with the question."""
    lengths = [len(o.text.split()) for o in query.options]
    mean = sum(lengths) / len(lengths) or 1.0
    asked = content_words(query.question)
    return [[n / mean - 1.0, float(n == max(lengths)), float(n == min(lengths)),
             float(len(asked & content_words(o.text)))] for n, o in zip(lengths, query.options, strict=True)]


def featurize(queries: Sequence[Query]) -> csr_matrix:
    """One row per (query, option), in query order then option order. A query's rows are computed once
    per wording, in one batch for all new wordings (the filter re-probes a set where only the redrawn
    queries changed)."""
    keys = [(q.type, q.question, tuple(o.text for o in q.options)) for q in queries]
    new = [k for k in dict.fromkeys(keys) if k not in _ROWS]
    if new:
        if len(_ROWS) > 200_000:
            _ROWS.clear()
        shapes = [_Shape(type=t, question=question, options=[_Text(text=x) for x in texts]) for t, question, texts in new]
        lengths = np.array([row for q in shapes for row in length_features(q)], dtype=float)
        block = hstack([_VECTORIZER.transform([t for q in shapes for t in pair_texts(q)]), csr_matrix(lengths)]).tocsr()
        at = 0
        for key in new:
            _ROWS[key] = block[at: at + len(key[2])]
            at += len(key[2])
    return vstack([_ROWS[k] for k in keys]).tocsr()


_ROWS: dict[tuple, csr_matrix] = {}  # feature rows per (type, question, option texts): a pure cache


@dataclass(frozen=True)
class _Text:
    text: str


@dataclass(frozen=True)
class _Shape:
    """What the probe reads of a query: its type, question and option texts."""

    type: str
    question: str
    options: list[_Text]


def persona_folds(queries: Sequence[Query], folds: int, rng: random.Random) -> list[int]:
    """Fold of each query: personas dealt round-robin over ``folds`` after a seeded shuffle."""
    personas = sorted({q.persona_id for q in queries})
    rng.shuffle(personas)
    fold_of = {p: i % folds for i, p in enumerate(personas)}
    return [fold_of[q.persona_id] for q in queries]


def run_probe(queries: Sequence[Query], *, folds: int = 5, rounds: int = 2, confidence: float = 0.5,
              seed: int = 0) -> ProbeResult:
    """Grouped cross-validation of the option-only classifier, ``rounds`` times over different splits."""
    n_personas = len({q.persona_id for q in queries})
    folds = min(folds, n_personas)
    if folds < 2 or not queries:
        return ProbeResult(n_queries=len(queries), folds=folds, rounds=rounds, accuracy=None)
    x = featurize(queries)
    labels = np.array([int(i == q.correct_index) for q in queries for i in range(len(q.options))])
    starts = np.cumsum([0] + [len(q.options) for q in queries])
    rng = random.Random(seed)
    hits, seen = defaultdict(int), defaultdict(int)
    confident: dict[str, int] = {q.query_id: 0 for q in queries}
    for _ in range(rounds):
        fold_of = persona_folds(queries, folds, rng)
        for fold in range(folds):
            _score_fold(queries, x, labels, starts, fold_of, fold, confidence, hits, seen, confident)
    by_type = {t: hits[t] / seen[t] for t in sorted(seen) if t != "all"}
    return ProbeResult(n_queries=len(queries), folds=folds, rounds=rounds, accuracy=hits["all"] / seen["all"],
                       by_type=by_type, confident=confident)


def _score_fold(queries, x, labels, starts, fold_of, fold, confidence, hits, seen, confident) -> None:
    """Fit on every other fold, answer this fold's queries by the highest-scoring option."""
    test = [i for i, f in enumerate(fold_of) if f == fold]
    train_rows = np.concatenate([np.arange(starts[i], starts[i + 1]) for i, f in enumerate(fold_of) if f != fold])
    if not test or len(set(labels[train_rows])) < 2:
        return
    model = SGDClassifier(loss="log_loss", alpha=1e-5, class_weight="balanced", average=True, random_state=0)
    model.fit(x[train_rows], labels[train_rows])
    scores = model.decision_function(x[np.concatenate([np.arange(starts[i], starts[i + 1]) for i in test])])
    at = 0
    for i in test:
        q = queries[i]
        s = scores[at: at + len(q.options)]
        at += len(q.options)
        p = np.exp(s - s.max())
        p /= p.sum()
        right = int(np.argmax(s)) == q.correct_index
        for key in ("all", q.type):
            hits[key] += right
            seen[key] += 1
        if right and p[q.correct_index] >= confidence:
            confident[q.query_id] += 1
