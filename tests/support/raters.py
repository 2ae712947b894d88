"""Planted raters for the audit: fill a copy of an audit sheet with answers whose agreement with the key is
known, so `personagen audit-score` can be checked against the values planted."""

from __future__ import annotations

import csv
import random
from pathlib import Path

from pipeline.dataset import Dataset
from pipeline.reporting.audit_sheet import LETTERS


def fill(sheet: Path, out: Path, ds: Dataset, agree: float, seed: int) -> Path:
    """A rater who picks the key with probability ``agree`` (else another reply at random), says the marked
    answer is right exactly when they picked it, another reply is right otherwise, and answers the other two
    questions at random (10% "gives away", 90% "natural")."""
    rng = random.Random(seed)
    correct = {q.query_id: q.correct_index for q in ds.queries}
    with sheet.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        order = [int(x) for x in row["order"].split()]
        key = order.index(correct[row["query_id"]])
        hit = rng.random() < agree
        pick = key if hit else rng.choice([i for i in range(len(order)) if i != key])
        row.update(choice=LETTERS[pick], key_right="yes" if hit else "no", another_right="no" if hit else "yes",
                   gives_away="yes" if rng.random() < 0.1 else "no", natural="yes" if rng.random() < 0.9 else "no")
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out
