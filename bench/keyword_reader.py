"""A label-free keyword reader: how far a lookup of item names and stance words over the history gets.

It never sees a label (no preferences, no annotations, no roles): per query it reads the persona's user turns up
to the question, and per option the latest user turn that shares the option's distinctive words (what sets it
apart from the other options) and says a stance; an option whose stance agrees with that turn's scores, one that
contradicts it loses, more shared words break ties. Accuracy per voicing of the evidence shows whether the
implicit turns hide the preference from such a lookup while the explicit ones keep it in plain sight.

    .venv/bin/python bench/keyword_reader.py DATASET_VERSION_DIR
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.checks.stance import expressed  # noqa: E402
from pipeline.words import apart, stems  # noqa: E402


def user_history(ds) -> dict[str, list[tuple[object, str, int, str]]]:
    """persona id -> its user turns in time order: (session time, session id, turn index, text)."""
    sessions = {s.session_id: s for s in ds.sessions if s.persona_id}
    out: dict[str, list] = defaultdict(list)
    for t in ds.turns:
        s = sessions.get(t.session_id)
        if s is not None and t.role == "user":
            out[s.persona_id].append((s.time, s.session_id, t.turn_index, t.content))
    for turns in out.values():
        turns.sort(key=lambda r: (r[0], r[1], r[2]))
    return out


def before(turns, query) -> list[str]:
    """The user turns a reader of ``query`` has: up to its anchor turn, or all of them at the end of history."""
    if query.anchor_session_id is None:
        return [t for time, _, _, t in turns if time <= query.as_of]
    out = []
    for time, sid, index, text in turns:
        if sid == query.anchor_session_id and index >= query.anchor_turn_index or time > query.as_of:
            break
        out.append(text)
    return out


RARE = 5.5  # words rarer than this (Zipf) are what a lookup matches ("would", "them" are not)
_SEQUENCE = re.compile(r"\b(lov\w*|enjoy\w*|lik(?:e|ed|es)|fond|dislik\w*|avoid\w*|hat(?:e|ed)|steer\w* around)\b")


def sequence(text: str) -> list[str]:
    """The stances a text names, in order, repeats merged ("first disliked ..., now you love" -> dislike, like)."""
    out: list[str] = []
    for m in _SEQUENCE.finditer(text.lower()):
        stance = "dislike" if m.group(1).startswith(("dislik", "avoid", "hat", "steer")) else "like"
        if not out or out[-1] != stance:
            out.append(stance)
    return out


def answer(query, history: list[str]) -> int:
    """The option the lookup picks (the first of equals)."""
    distinct, common = apart([stems(o.text, rarer_than=RARE) for o in query.options])
    read = [(stems(t, rarer_than=RARE), expressed(t), t) for t in history]
    if query.type.startswith("track"):  # the item's stances in the order the user said them
        said = [x for words, s, _ in read if common and len(words & common) * 3 >= len(common) * 2 for x in s]
        told = [x for i, x in enumerate(said) if not i or said[i - 1] != x]
        seqs = [sequence(o.text) for o in query.options]
        return max(range(len(seqs)), key=lambda i: (seqs[i] == told, bool(told) and seqs[i][-len(told):] == told, -i))
    if query.type.startswith("revisit"):  # the reason told beside the item's latest stance, or "the same throughout"
        latest = next(((w, s) for w, s, _ in reversed(read) if s and common and len(w & common) * 2 >= len(common)),
                      None)
        if latest is not None:
            return max(range(len(query.options)), key=lambda i: (
                (3 if expressed(query.options[i].text) & latest[1] else -3 if expressed(query.options[i].text) else 0)
                + len(distinct[i] & latest[0]) / max(len(distinct[i]), 1), -i))
    scores = []
    for option, own in zip(query.options, distinct, strict=True):
        stance = expressed(option.text)
        score = 0.0
        for words, said, _ in reversed(read):
            shared = len(own & words)
            if shared >= min(2, len(own)) and own:
                near = shared / len(own) + (1.0 if common and len(words & common) * 3 >= len(common) * 2 else 0.0)
                if said and stance:
                    score = max(score, (3.0 if stance & said else -3.0) + near)
                    break
                score = max(score, near)
        scores.append(-score if query.type.startswith("suggest") else score)
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def accuracy(path: str) -> dict[str, dict[str, tuple[int, int]]]:
    """voicing -> query type (and "all") -> (right, asked)."""
    from pipeline.dataset import load

    ds = load(path, ["sessions", "turns", "queries"])
    history = user_history(ds)
    out: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for q in ds.queries:
        right = answer(q, before(history[q.persona_id], q)) == q.correct_index
        for key in (q.type, "all"):
            cell = out[q.voicing or "none"][key]
            cell[0] += right
            cell[1] += 1
    return {v: {k: tuple(c) for k, c in cells.items()} for v, cells in out.items()}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    table = accuracy(argv[0])
    types = sorted({k for cells in table.values() for k in cells} - {"all"}) + ["all"]
    print("| type | " + " | ".join(table) + " |")
    print("|---|" + "---:|" * len(table))
    for t in types:
        cells = [table[v].get(t) for v in table]
        print(f"| {t} | " + " | ".join(f"{r / n:.2f} ({n})" if c else "" for c in cells for r, n in [c or (0, 1)]) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
