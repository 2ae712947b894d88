"""No-context baselines that expose leaky options: pick the longest option, or the one that shares
the most content words with the question. A sound benchmark keeps both near chance (25%).

Ties count fractionally (a tie between k options including the correct one scores 1/k), i.e. the
expected accuracy of breaking ties at random.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from pipeline.words import keywords
from schemas.query import Query


def expected_hit(scores: Sequence[float], correct: int) -> float:
    """1/k when the correct option is among the k options with the top score, else 0."""
    best = max(scores)
    winners = [i for i, s in enumerate(scores) if s == best]
    return 1 / len(winners) if correct in winners else 0.0


def _accuracy(queries: Sequence[Query], score: Callable[[Query], list[float]]) -> float:
    if not queries:
        return 0.0
    return sum(expected_hit(score(q), q.correct_index) for q in queries) / len(queries)


def longest_option_accuracy(queries: Sequence[Query]) -> float:
    """Accuracy of always answering with the longest option (in characters)."""
    return _accuracy(queries, lambda q: [len(o.text) for o in q.options])


def lexical_overlap_accuracy(queries: Sequence[Query]) -> float:
    """Accuracy of answering with the option sharing the most content words with the question."""

    def score(q: Query) -> list[float]:
        words = keywords(q.question)
        return [len(words & keywords(o.text)) for o in q.options]

    return _accuracy(queries, score)


def chance_accuracy(queries: Sequence[Query]) -> float:
    """Expected accuracy of a uniform random guess."""
    return sum(1 / len(q.options) for q in queries) / len(queries) if queries else 0.0


def baseline_report(queries: Sequence[Query]) -> dict[str, float]:
    """Random-guess, longest-option and lexical-overlap accuracy, the figures the dataset card shows."""
    return {
        "random guess": chance_accuracy(queries),
        "longest option": longest_option_accuracy(queries),
        "lexical overlap": lexical_overlap_accuracy(queries),
    }


def wilson(p: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval (95% by default) of an accuracy ``p`` measured on ``n`` queries."""
    if n <= 0:
        return 0.0, 1.0
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))
