"""Listwise relational features: what each option is *to the other options of its query*, never its words.

The per-option probe (``probe.py``) scores options one at a time, so an option set whose answer follows
from how the options relate (the one pair sharing a reason clause, the chain whose prefix and mirror
are both present, the odd one out) looks clean to it. These features describe each option by its
relations to the others: token overlaps (max / min / mean Jaccard, plain and with the stance words
masked), how many others share a clause or a content bigram with it, near-duplicates, token prefixes,
subsets and supersets, stance-sequence prefixes and mirrors (same content, flipped stance words),
odd one out on frame / stance / length, length rank and position. A query's rows depend on nothing
else, so they are computed once per wording and cached.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from scipy.sparse import csr_matrix, hstack

from pipeline.words import STOPWORDS

_TOKEN = re.compile(r"[a-z0-9']+")
_CLAUSE = re.compile(r"[,.;:!?]+|\b(?:because|since|after|then|but|so|while|though)\b")
# stance words (a negation such as "not" or "no shift" is not one: it would read every "has not
# changed" or "no shift at all" as a stance of its own)
POSITIVE = frozenset("enjoy enjoyed enjoys enjoying like liked likes love loved loves prefer preferred "
                     "prefers fan fond toward towards keen".split())
NEGATIVE = frozenset("avoid avoided avoids avoiding dislike disliked dislikes hate hated hates away".split())
STANCE = POSITIVE | NEGATIVE
SAME_CONTENT = 0.6  # masked Jaccard at or above which two options talk about the same thing
NEAR_DUPLICATE = 0.8
MAX_POSITION = 8


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def polarity(words: Sequence[str]) -> tuple[int, ...]:
    """The ordered stance words of an option as +1 / -1."""
    return tuple(1 if w in POSITIVE else -1 for w in words if w in STANCE)


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def _clauses(text: str, masked: bool) -> set[str]:
    out = set()
    for part in _CLAUSE.split(text.lower()):
        words = [("_" if masked and w in STANCE else w) for w in tokens(part or "")]
        if len(words) >= 2:
            out.add(" ".join(words))
    return out


def _bigrams(words: Sequence[str]) -> set[tuple[str, str]]:
    content = [w for w in words if w not in STOPWORDS and w not in STANCE]
    return set(zip(content, content[1:], strict=False))


def _one_hot(k: int, width: int) -> list[float]:
    return [float(min(k, width - 1) == i) for i in range(width)]


def _is_prefix(a: Sequence, b: Sequence) -> bool:
    """``a`` is a proper, non-empty prefix of ``b``."""
    return 0 < len(a) < len(b) and tuple(b[: len(a)]) == tuple(a)


def _share(values: list, i: int) -> int:
    return sum(1 for j, v in enumerate(values) if j != i and v == values[i])


def named_rows(question: str, texts: Sequence[str]) -> list[dict[str, float]]:
    """One named feature row per option of one query (see the module docstring)."""
    n = len(texts)
    words = [tokens(t) for t in texts]
    plain = [set(w) for w in words]
    masked = [{("_" if x in STANCE else x) for x in w} for w in words]
    content = [{x for x in w if x not in STANCE} for w in words]
    pols = [polarity(w) for w in words]
    clauses = [_clauses(t, False) for t in texts]
    mclauses = [_clauses(t, True) for t in texts]
    bigrams = [_bigrams(w) for w in words]
    frames = [tuple(w[:3]) for w in words]
    lengths = [len(w) for w in words]
    mean_len = sum(lengths) / n or 1.0
    rank = [(sum(x < n_i for x in lengths) + (lengths.count(n_i) - 1) / 2) / max(n - 1, 1) for n_i in lengths]  # ties share
    asked = set(tokens(question)) - STOPWORDS
    firsts = [p[0] if p else 0 for p in pols]
    lasts = [p[-1] if p else 0 for p in pols]
    counts = [len(p) for p in pols]
    common = set.intersection(*plain) if plain else set()  # the query's shared template words
    distinct = [p - common for p in plain]
    distinct_content = [c - common for c in content]
    clause_groups = sum(1 for i in range(n) if any(clauses[i] & clauses[j] for j in range(n) if j != i)) / n
    rows = []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        rest = max(n - 1, 1)
        jac = [_jaccard(plain[i], plain[j]) for j in others] or [0.0]
        mjac = [_jaccard(masked[i], masked[j]) for j in others] or [0.0]
        same = [j for j in others if _jaccard(content[i], content[j]) >= SAME_CONTENT]
        near = sum(1 for x in jac if x >= NEAR_DUPLICATE)
        f = {"jaccard_max": max(jac), "jaccard_min": min(jac), "jaccard_mean": sum(jac) / len(jac),
             "masked_jaccard_max": max(mjac), "masked_jaccard_min": min(mjac), "masked_jaccard_mean": sum(mjac) / len(mjac),
             "near_duplicate": float(near > 0), "near_duplicates": near / rest}
        for name, sets in (("clause", clauses), ("masked_clause", mclauses), ("bigram", bigrams)):
            k = sum(1 for j in others if sets[i] & sets[j])  # shares a clause / content bigram with exactly k others
            f |= {f"{name}_shared_with_{m}": v for m, v in enumerate(_one_hot(k, 4))}
        for name, sets in (("clause", clauses), ("masked_clause", mclauses)):
            per = [sum(1 for j in others if c in sets[j]) for c in sets[i]] or [0]  # others holding each clause
            f |= {f"{name}_least_shared_{m}": v for m, v in enumerate(_one_hot(min(per), 4))}
            f |= {f"{name}_most_shared_{m}": v for m, v in enumerate(_one_hot(max(per), 4))}
        for name, sets in (("distinct", distinct), ("distinct_content", distinct_content)):
            dj = [_jaccard(sets[i], sets[j]) if sets[i] or sets[j] else 0.0 for j in others] or [0.0]
            f |= {f"{name}_jaccard_max": max(dj), f"{name}_jaccard_mean": sum(dj) / len(dj),
                  f"{name}_overlaps": sum(1 for j in others if sets[i] & sets[j]) / rest}
        f |= {
            "token_prefix_of_other": float(any(_is_prefix(words[i], words[j]) for j in others)),
            "has_token_prefix": float(any(_is_prefix(words[j], words[i]) for j in others)),
            "subset_of_other": float(any(plain[i] < plain[j] for j in others)),
            "superset_of_other": float(any(plain[i] > plain[j] for j in others)),
            "stance_prefix_of_other": float(any(_is_prefix(pols[i], pols[j]) for j in same)),
            "has_stance_prefix": float(any(_is_prefix(pols[j], pols[i]) for j in same)),
            "mirror": float(any(len(pols[j]) == len(pols[i]) > 0 and all(a == -b for a, b in zip(pols[i], pols[j], strict=True))
                                for j in same)),  # same content, every stance word flipped
            "same_stances": float(any(pols[j] == pols[i] for j in same)),
            "same_content": len(same) / rest,
        }
        frame_k, first_k, last_k = _share(frames, i), _share(firsts, i), _share(lasts, i)
        count_k, len_k = _share(counts, i), _share(lengths, i)
        f |= {"frame_shared": frame_k / rest, "frame_unique": float(frame_k == 0),
              "frame_odd_one_out": float(frame_k == 0 and len({frames[j] for j in others}) == 1),
              "first_stance_shared": first_k / rest, "first_stance_unique": float(first_k == 0),
              "last_stance_shared": last_k / rest, "last_stance_unique": float(last_k == 0),
              "stance_count_shared": count_k / rest, "stance_count_unique": float(count_k == 0),
              "first_stance": float(firsts[i]), "last_stance": float(lasts[i]), "stance_count": min(counts[i], 4) / 4}
        for name, ends in (("first", firsts), ("last", lasts)):  # agreement with options framed otherwise
            unlike = [j for j in others if frames[j] != frames[i] and ends[j]]
            f[f"{name}_stance_agrees_other_frames"] = (sum(ends[j] == ends[i] for j in unlike) / len(unlike)
                                                       if unlike and ends[i] else 0.5)
        f |= {"length_relative": lengths[i] / mean_len - 1.0, "length_rank": rank[i],
              "longest": float(lengths[i] == max(lengths)), "shortest": float(lengths[i] == min(lengths)),
              "length_unique": float(len_k == 0)}
        f |= {"question_overlap": len(asked & plain[i]) / max(len(asked), 1), "shares_question_word": float(bool(asked & plain[i]))}
        f |= {f"position_{m}": v for m, v in enumerate(_one_hot(i, MAX_POSITION))}
        # the query as a whole, for the trees to condition on (the same on every row of a query)
        f |= {"query_clause_sharing": clause_groups, "query_frames": len(set(frames)) / n,
              "query_names_question_words": float(any(asked & p for p in plain)),
              "question_length": min(len(tokens(question)), 30) / 30}
        rows.append(f)
    return rows


def query_rows(question: str, texts: Sequence[str]) -> list[list[float]]:
    """One feature row per option of one query, in the order of ``FEATURES``."""
    return [list(f.values()) for f in named_rows(question, texts)]


FEATURES = list(named_rows("a b", ["x y", "x z"])[0])


def relational_matrix(keys: Sequence[tuple]) -> np.ndarray:
    """Rows for ``(type, question, option texts)`` keys, in order, from the cache where computed before."""
    new = [k for k in dict.fromkeys(keys) if k not in _ROWS]
    if len(_ROWS) + len(new) > 200_000:
        _ROWS.clear()
        new = list(dict.fromkeys(keys))
    for key in new:
        _ROWS[key] = np.asarray(query_rows(key[1], key[2]), dtype=np.float32)
    return np.vstack([_ROWS[k] for k in keys]) if keys else np.zeros((0, len(FEATURES)), dtype=np.float32)


_ROWS: dict[tuple, np.ndarray] = {}  # a pure cache


def crossed(x: np.ndarray, type_codes: np.ndarray, n_types: int) -> csr_matrix:
    """The features plain and crossed with the query type (one block per type, sparse), for a linear model."""
    rows = np.arange(len(x))
    onehot = csr_matrix((np.ones(len(x)), (rows, type_codes)), shape=(len(x), n_types))
    blocks = [csr_matrix(x)] + [csr_matrix(x * (type_codes == t)[:, None]) for t in range(n_types)]
    return hstack([*blocks, onehot]).tocsr()
