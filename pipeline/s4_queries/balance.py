"""Exchangeability checked on the whole set, before any probe: within each option-set *shape* (what a
reader sees of how the options of one query relate, read from their text alone), every slot of the
shape is the answer about equally often.

A slot is an option's place in its shape: its frame (its first words, stance words masked), its stance
sequence (the enjoy / avoid words in order) and how many of the other options share content words
with it. The builders (``types.py``) design every option set so that each slot can be the answer; how
often it is depends on the histories (how many chains of each direction and length, how many
abstentions), and any excess is a prior that a reader of the options alone can learn: "in this shape
the chain that starts with 'enjoyed' is right". ``balance`` thins every slot of a shape that
is the answer more often than ``1 + slack`` times the least answered one (per option of the slot), each
query kept or dropped by its own seeded draw, which bounds in expectation what a reader of shapes alone
can gain to about ``(1 + slack) / n_options``."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence

from pipeline.words import STOPWORDS
from schemas.ids import stable_id
from schemas.query import Query

_TOKEN = re.compile(r"[a-z0-9']+")
POSITIVE = frozenset("enjoy enjoyed enjoys enjoying like liked likes love loved prefer preferred fond keen".split())
NEGATIVE = frozenset("avoid avoided avoids avoiding dislike disliked dislikes hate hated".split())
STANCE = POSITIVE | NEGATIVE
FRAME_WORDS = 3

Slot = tuple[str, tuple[int, ...], int]


def slots(texts: Sequence[str]) -> list[Slot]:
    """Each option's slot: (frame, stance sequence, how many other options share a content word with it)."""
    words = [_TOKEN.findall(t.lower()) for t in texts]
    content = [{w for w in ws if w not in STOPWORDS and w not in STANCE} for ws in words]
    common = set.intersection(*content) if content else set()
    own = [c - common for c in content]
    out = []
    for i, ws in enumerate(words):
        frame = " ".join("~" if w in STANCE else w for w in ws[:FRAME_WORDS])
        stances = tuple(1 if w in POSITIVE else -1 for w in ws if w in STANCE)
        shared = sum(1 for j in range(len(words)) if j != i and own[i] & own[j])
        out.append((frame, stances, shared))
    return out


def shape(query: Query) -> tuple[str, tuple[Slot, ...]]:
    """The query's shape: its type and the sorted slots of its options."""
    return query.type, tuple(sorted(slots([o.text for o in query.options])))


def answer_slot(query: Query) -> Slot:
    return slots([o.text for o in query.options])[query.correct_index]


def balance(queries: list[Query], *, slack: float, seed: int) -> tuple[list[Query], dict[str, int]]:
    """The queries with every shape's over-answered slots thinned; the dropped count per type."""
    groups: dict[tuple, list[Query]] = defaultdict(list)
    for q in queries:
        groups[shape(q)].append(q)
    dropped: set[str] = set()
    for key, members in groups.items():
        dropped |= _thinned(members, Counter(key[1]), slack, seed)
    kept = [q for q in queries if q.query_id not in dropped]
    return kept, dict(Counter(q.type for q in queries if q.query_id in dropped))


PSEUDO = 2.0  # queries added to every slot's count, so a small shape is judged by what it could be by chance


def _thinned(members: list[Query], multiplicity: Counter, slack: float, seed: int) -> set[str]:
    """Ids to drop: each query of a slot kept with probability ``min(1, target / count)``, where the
    target is ``1 + slack`` times the least answered slot's rate (answers per option of the slot, counted
    with ``PSEUDO``) times the slot's options. Each query's draw is its own (a hash of its id), not a quota:
    cutting every slot to an exact count would make the kept set balanced *as a whole*, and a reader who
    knows the answers of some personas would then find the others' skewed the other way."""
    counts = Counter(answer_slot(q) for q in members)
    rate = min((counts.get(s, 0) + PSEUDO) / m for s, m in multiplicity.items())
    keep = {s: min(1.0, (1 + slack) * rate * multiplicity[s] / c) for s, c in counts.items()}
    return {q.query_id for q in members if _uniform(seed, q.query_id) >= keep[answer_slot(q)]}


def _uniform(seed: int, query_id: str) -> float:
    """A number in [0, 1) fixed by (seed, query id)."""
    return int(stable_id("balance", seed, query_id).rsplit("_", 1)[-1][:12], 16) / 16**12
