"""BM25 retrieval for the eval's `rag` mode and the model-free retrieval reader (rank-bm25's BM25Okapi, the
library LongMemEval's retrieval uses).

Both read only the history before the question. `rag` retrieves for the question text alone (never the
options, the key or the evidence); the reader, which answers the multiple choice itself, also matches the
options' text, never which one is right. Terms are lowercase alphanumeric words minus stopwords
(pipeline.words.STOPWORDS).
"""

from __future__ import annotations

from collections.abc import Sequence

from rank_bm25 import BM25Okapi

from pipeline.baselines import expected_hit
from pipeline.words import keywords, terms


def scores(query: list[str], docs: Sequence[list[str]]) -> list[float]:
    """BM25 (Okapi, rank-bm25's defaults) of each document for the query, over the corpus ``docs``."""
    if not docs or not query or not any(docs):
        return [0.0] * len(docs)
    return [float(s) for s in BM25Okapi(list(docs)).get_scores(query)]


def top_k(query: list[str], docs: Sequence[list[str]], k: int) -> list[int]:
    """Indices of the ``k`` best documents, best first; equal scores go to the later (more recent) one."""
    ranked = scores(query, docs)
    return sorted(range(len(docs)), key=lambda i: (-ranked[i], -i))[:k]


def reader_score(question: str, options: Sequence[str], correct: int, user_turns: Sequence[list[str]]) -> float:
    """The model-free retrieval reader on one multiple-choice question: BM25 over the user turns before it
    (their `terms`) for the question and its options (as any reader, it reads the options, never which one
    is right), the best-matching turn (the most recent among equals), then the option sharing the most
    content words with that turn; ties split evenly like the other baselines, and no user turn is chance."""
    if not user_turns:
        return 1 / len(options)
    query = terms(" ".join([question, *options]))
    turn = set(user_turns[top_k(query, user_turns, 1)[0]])
    return expected_hit([len(turn & keywords(o)) for o in options], correct)
