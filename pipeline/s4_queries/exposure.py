"""What a reader learns from a persona's whole question set and from how each option's parts relate.

The option-only and relational probes read one query at a time. A reader who is handed a persona's
whole exam (as a harness that batches a persona's questions does) sees more: an event or item that
keeps coming back across the persona's questions is likely the persona's own, one shown once is
likely a decoy; a reason that shares words with the item it is said to have changed looks like the
true cause. These features give a probe that reading, from the texts alone (never the groundings):

- **exposure**: an option's *own words* (its words not shared by all options of its query: the slot
  values that set it apart) and how many of the persona's other queries show at least half of them,
  plain, as a share, relative to the query's mean, and whether it is the most or least exposed option;
- **relatedness**: character 4-grams shared between an option's own words and the words every option
  shares (the item a revisit or generalize query is about), and with the user's message, plain and
  relative to the query's mean.

A row depends on the persona's other queries, so nothing here is cached across calls.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from pipeline.words import STOPWORDS, apart, tokens
from schemas.query import Query

FEATURES = ("exposure", "exposure_share", "never_elsewhere", "exposure_vs_mean", "most_exposed", "least_exposed",
            "seen_words", "item_relatedness", "item_relatedness_vs_mean", "most_item_related",
            "message_relatedness", "message_relatedness_vs_mean", "own_words")


def _words(text: str) -> set[str]:
    return {w for w in tokens(text) if w not in STOPWORDS and len(w) > 2}


def _grams(words: set[str], n: int = 4) -> set[str]:
    return {w[i:i + n] for w in words for i in range(max(1, len(w) - n + 1))}


def _overlap(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a) if a else 0.0


def own_words(query: Query) -> tuple[list[set[str]], set[str]]:
    """Each option's words that not every option of its query has (its slot values), and the words all share."""
    return apart([_words(o.text) for o in query.options])


def question_set_rows(queries: Sequence[Query]) -> np.ndarray:
    """One row per (query, option), in query order then option order, of ``FEATURES``."""
    by_persona: dict[str, list[int]] = defaultdict(list)
    for i, q in enumerate(queries):
        by_persona[q.persona_id].append(i)
    texts = [_words(" ".join([q.question, *(o.text for o in q.options)])) for q in queries]
    out: list[np.ndarray] = [np.zeros((0, len(FEATURES)))] * len(queries)
    for members in by_persona.values():
        seen_elsewhere = {i: set().union(*(texts[j] for j in members if j != i)) for i in members}
        for i in members:
            out[i] = _query_rows(queries[i], [texts[j] for j in members if j != i], seen_elsewhere[i])
    return np.vstack(out) if out else np.zeros((0, len(FEATURES)))


def _query_rows(query: Query, others: list[set[str]], elsewhere: set[str]) -> np.ndarray:
    parts, shared = own_words(query)
    item, message = _grams(shared), _grams(_words(query.question))
    exposure = np.array([sum(1 for t in others if p and len(p & t) * 2 >= len(p)) for p in parts], dtype=float)
    item_rel = np.array([_overlap(_grams(p), item) for p in parts])
    message_rel = np.array([_overlap(_grams(p), message) for p in parts])
    n_others = max(1, len(others))
    rows = []
    for k, part in enumerate(parts):
        rows.append([exposure[k], exposure[k] / n_others, float(exposure[k] == 0), exposure[k] - exposure.mean(),
                     float(exposure[k] == exposure.max() and exposure.max() > exposure.min()),
                     float(exposure[k] == exposure.min() and exposure.max() > exposure.min()),
                     _overlap(part, elsewhere), item_rel[k], item_rel[k] - item_rel.mean(),
                     float(item_rel[k] == item_rel.max() and item_rel.max() > item_rel.min()),
                     message_rel[k], message_rel[k] - message_rel.mean(), min(len(part), 20) / 20])
    return np.asarray(rows, dtype=float)
