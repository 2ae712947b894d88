"""The option-only probes: classifiers that see a query's question and options, never the history.

Three probes, each trained on some personas and scored on held-out ones (persona-grouped
cross-validation, ``rounds`` different splits, the same splits for both), each answering a query
with its highest-scoring option:

- **option-only**: logistic regression (log loss, fitted by averaged SGD: a tenth of liblinear's
  time here) over word n-grams of each (question, option) pair (plain and crossed with the query
  type) plus length features. It scores options one at a time.
- **relational**: listwise features of each option's relations to the other options of its query
  (``relational.py``: overlaps, shared clauses, near-duplicates, prefixes, mirrors, odd one out,
  length rank, position), fitted twice: gradient-boosted trees (the type as a categorical feature)
  and a linear model over the features crossed with the type. It sees what the first cannot: an
  answer that follows from how the options relate.
- **question set**: what a reader learns from the persona's whole question set and from how each
  option's parts relate (``exposure.py``: how often an option's own words come back in the persona's
  other questions; its reason or event against the item every option names and the user's message),
  fitted with trees and with a linear model crossed with the type.

Their accuracies show how much the options alone give away, each with a Wilson interval over the
held-out queries; the queries either answers confidently in every round are the candidates the
adversarial filter redraws or drops (AFLite, as WinoGrande filters). One fit per fold over all
queries, never one per item, so the probes stay cheap next to a run.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field
from scipy.sparse import csr_matrix, hstack, vstack
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.linear_model import LogisticRegression, SGDClassifier
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from pipeline.baselines import wilson
from pipeline.s4_queries.exposure import question_set_rows
from pipeline.s4_queries.relational import crossed, relational_matrix
from pipeline.words import keywords
from schemas.query import Query

N_FEATURES = 2**15
_VECTORIZER = HashingVectorizer(ngram_range=(1, 2), n_features=N_FEATURES, alternate_sign=False, norm="l2")
OPTION_ONLY, TREES, LINEAR = "option-only", "relational trees", "relational linear"
QUESTION_SET, QUESTION_SET_LINEAR = "question set", "question set linear"
PROBES = (OPTION_ONLY, TREES, LINEAR, QUESTION_SET, QUESTION_SET_LINEAR)


class ProbeResult(BaseModel):
    """Held-out accuracy overall and per type, and per query how often it was answered confidently."""

    name: str = OPTION_ONLY
    n_queries: int
    folds: int
    rounds: int
    accuracy: float | None = Field(description="held-out share answered right, every round counted; None: too few personas")
    by_type: dict[str, float] = Field(default_factory=dict)
    n_by_type: dict[str, int] = Field(default_factory=dict, description="held-out queries per type (each counted once)")
    confident: dict[str, int] = Field(default_factory=dict, description="query_id -> rounds answered right with confidence")

    def leaks(self) -> set[str]:
        """Queries answered right and confidently in every round."""
        return {q for q, n in self.confident.items() if n >= self.rounds}

    def interval(self, qtype: str | None = None) -> tuple[float, float] | None:
        """95% Wilson interval of the overall accuracy, or of one type's; None when not measured."""
        acc = self.accuracy if qtype is None else self.by_type.get(qtype)
        n = self.n_queries if qtype is None else self.n_by_type.get(qtype, 0)
        return None if acc is None else wilson(acc, n)


class Finding(BaseModel):
    """One probe figure above its threshold: refused (its whole interval is above) or only reported."""

    probe: str
    scope: str = Field(description="'overall' or a query type")
    accuracy: float
    low: float
    high: float
    n: int
    threshold: float
    setting: str
    refuse: bool

    def line(self) -> str:
        what = "all queries" if self.scope == "overall" else f"the {self.scope} queries"
        return (f"the {self.probe} probe answers {self.accuracy:.1%} of {what} without the history "
                f"(95% CI {self.low:.1%}-{self.high:.1%}, n={self.n}), above {self.setting} {self.threshold:.0%}")


def judge(results: Sequence[ProbeResult], *, max_accuracy: float, max_type_accuracy: float,
          min_type_queries: int) -> list[Finding]:
    """Every figure above its threshold, worst first. One refuses when the lower end of its 95% interval
    is above the threshold (the leak is certain, not noise of a small sample) and, for a type, when the
    type has at least ``min_type_queries`` held-out queries; any other is reported, never refused."""
    out = []
    for r in results:
        if r.accuracy is None:
            continue
        scopes = [("overall", r.accuracy, r.n_queries, max_accuracy, "queries.probe.max_accuracy", 1)]
        scopes += [(t, a, r.n_by_type.get(t, 0), max_type_accuracy, "queries.probe.max_type_accuracy", min_type_queries)
                   for t, a in r.by_type.items()]
        for scope, acc, n, threshold, setting, least in scopes:
            if acc <= threshold:
                continue
            low, high = wilson(acc, n)
            out.append(Finding(probe=r.name, scope=scope, accuracy=acc, low=low, high=high, n=n, threshold=threshold,
                               setting=setting, refuse=low > threshold and n >= least))
    return sorted(out, key=lambda f: (not f.refuse, -(f.low - f.threshold)))


def pair_texts(query) -> list[str]:
    """One text per option: its words, and the same crossed with the query type. The question's own
    words add one constant to every option of a query, so they could not move its answer; the type
    (what the question asks) enters through the crossing and the question's words through the overlap."""
    tag = query.type[:12]
    out = []
    for option in query.options:
        words = option.text.lower()
        crossed_words = " ".join(f"{tag}_{w}" for w in words.split())
        out.append(f"{words} {crossed_words}")
    return out


def length_features(query) -> list[list[float]]:
    """Per option: length relative to the query's mean, longest, shortest, words shared with the question."""
    lengths = [len(o.text.split()) for o in query.options]
    mean = sum(lengths) / len(lengths) or 1.0
    asked = keywords(query.question)
    return [[n / mean - 1.0, float(n == max(lengths)), float(n == min(lengths)),
             float(len(asked & keywords(o.text)))] for n, o in zip(lengths, query.options, strict=True)]


def _key(q) -> tuple:
    return (q.type, q.question, tuple(o.text for o in q.options))


def featurize(queries: Sequence[Query]) -> csr_matrix:
    """One row per (query, option), in query order then option order. A query's rows are computed once
    per wording, in one batch for all new wordings (the filter re-probes a set where only the redrawn
    queries changed)."""
    keys = [_key(q) for q in queries]
    new = [k for k in dict.fromkeys(keys) if k not in _ROWS]
    if new:
        if len(_ROWS) > 200_000:
            _ROWS.clear()
            new = list(dict.fromkeys(keys))
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


Scorer = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]  # (train rows, labels, test rows) -> scores


def _linear(x, epochs: int | None = None) -> Scorer:
    """Averaged SGD logistic regression; ``epochs``: a fixed number of passes instead of until converged."""
    def score(train, labels, test):
        fixed = {"max_iter": epochs, "tol": None, "alpha": 1e-4} if epochs else {"alpha": 1e-5}
        model = SGDClassifier(loss="log_loss", class_weight="balanced", average=True, random_state=0, **fixed)
        model.fit(x[train], labels[train])
        return model.decision_function(x[test])
    return score


def _logistic(x) -> Scorer:
    """Logistic regression fitted to convergence (lbfgs) on features scaled to unit variance: few dense
    features (exposure counts beside shares) need both, where SGD's few passes stop short."""
    def score(train, labels, test):
        scale = StandardScaler(with_mean=False).fit(x[train])
        model = LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced")
        with threadpool_limits(1):
            model.fit(scale.transform(x[train]), labels[train])
            return model.decision_function(scale.transform(x[test]))
    return score


def _trees(x: np.ndarray, seed: int) -> Scorer:
    """Gradient-boosted trees, the last column (the query type) categorical; one thread (on a busy
    machine OpenMP's default team is slower than one thread by 3-10x for fits this small)."""
    def score(train, labels, test):
        model = HistGradientBoostingClassifier(max_iter=30, learning_rate=0.2, max_leaf_nodes=15, min_samples_leaf=20,
                                               l2_regularization=1.0, max_bins=32, categorical_features=[x.shape[1] - 1],
                                               early_stopping=False, class_weight="balanced", random_state=seed)
        with threadpool_limits(1):
            model.fit(x[train], labels[train])
            return model.decision_function(x[test])
    return score


def run_probe(queries: Sequence[Query], *, folds: int = 5, rounds: int = 2, confidence: float = 0.5,
              seed: int = 0) -> ProbeResult:
    """Grouped cross-validation of the per-option n-gram classifier, ``rounds`` times over different splits."""
    return run_probes(queries, folds=folds, rounds=rounds, confidence=confidence, seed=seed, which=(OPTION_ONLY,))[0]


def run_probes(queries: Sequence[Query], *, folds: int = 5, rounds: int = 2, confidence: float = 0.5, seed: int = 0,
               which: Sequence[str] = PROBES) -> list[ProbeResult]:
    """The probes named in ``which``, over the same persona splits, one result each (in that order)."""
    n_personas = len({q.persona_id for q in queries})
    folds = min(folds, n_personas)
    if folds < 2 or not queries:
        return [ProbeResult(name=w, n_queries=len(queries), folds=folds, rounds=rounds, accuracy=None) for w in which]
    scorers = _scorers(queries, which, seed)
    labels = np.array([int(i == q.correct_index) for q in queries for i in range(len(q.options))])
    starts = np.cumsum([0] + [len(q.options) for q in queries])
    rng = random.Random(seed)
    tallies = {w: _Tally(queries) for w in which}
    for _ in range(rounds):
        fold_of = persona_folds(queries, folds, rng)
        for fold in range(folds):
            test = [i for i, f in enumerate(fold_of) if f == fold]
            train = np.concatenate([np.arange(starts[i], starts[i + 1]) for i, f in enumerate(fold_of) if f != fold])
            if not test or len(set(labels[train])) < 2:
                continue
            rows = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in test])
            for w in which:
                tallies[w].add(queries, test, scorers[w](train, labels, rows), confidence)
    return [tallies[w].result(w, folds, rounds) for w in which]


def _scorers(queries: Sequence[Query], which: Sequence[str], seed: int) -> dict[str, Scorer]:
    out: dict[str, Scorer] = {}
    if OPTION_ONLY in which:
        out[OPTION_ONLY] = _linear(featurize(queries))
    if not {TREES, LINEAR, QUESTION_SET, QUESTION_SET_LINEAR} & set(which):
        return out
    rel = relational_matrix([_key(q) for q in queries])
    types = sorted({q.type for q in queries})
    codes = np.repeat([types.index(q.type) for q in queries], [len(q.options) for q in queries])
    coded = codes[:, None].astype(np.float32)
    if TREES in which or LINEAR in which:
        out[TREES] = _trees(np.hstack([rel, coded]), seed)
        out[LINEAR] = _linear(crossed(rel, codes, len(types)), epochs=10)
    if QUESTION_SET in which or QUESTION_SET_LINEAR in which:
        # with the relational features: a reader who sees the whole set also sees how each query's options relate
        rows = np.hstack([question_set_rows(queries).astype(np.float32), rel])
        out[QUESTION_SET] = _trees(np.hstack([rows, coded]), seed)
        out[QUESTION_SET_LINEAR] = _logistic(crossed(rows, codes, len(types)))
    return out


class _Tally:
    """Hits per scope and confident rounds per query of one probe."""

    def __init__(self, queries: Sequence[Query]) -> None:
        self.hits: dict[str, int] = defaultdict(int)
        self.seen: dict[str, int] = defaultdict(int)
        self.confident = {q.query_id: 0 for q in queries}
        self.n_by_type: dict[str, int] = defaultdict(int)
        for q in queries:
            self.n_by_type[q.type] += 1

    def add(self, queries: Sequence[Query], test: list[int], scores: np.ndarray, confidence: float) -> None:
        """Answer each test query by its highest-scoring option."""
        at = 0
        for i in test:
            q = queries[i]
            s = scores[at: at + len(q.options)]
            at += len(q.options)
            p = np.exp(s - s.max())
            p /= p.sum()
            right = int(np.argmax(s)) == q.correct_index
            for key in ("all", q.type):
                self.hits[key] += right
                self.seen[key] += 1
            if right and p[q.correct_index] >= confidence:
                self.confident[q.query_id] += 1

    def result(self, name: str, folds: int, rounds: int) -> ProbeResult:
        by_type = {t: self.hits[t] / self.seen[t] for t in sorted(self.seen) if t != "all"}
        return ProbeResult(name=name, n_queries=sum(self.n_by_type.values()), folds=folds, rounds=rounds,
                           accuracy=self.hits["all"] / self.seen["all"] if self.seen["all"] else None,
                           by_type=by_type, n_by_type={t: self.n_by_type[t] for t in by_type}, confident=self.confident)
