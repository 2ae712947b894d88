"""`personagen audit-score`: read filled audit sheets (one CSV per rater, as `personagen audit-sheet` wrote them),
check every cell, and report per question the rate of "yes" with its 95% Wilson interval, the raters' agreement
(Cohen's kappa from scikit-learn for two raters; for more, the mean of every pair's Cohen's kappa, Light's kappa)
with a 95% bootstrap interval over items, and the estimated ceiling: the share of items whose marked answer the
raters judge right."""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import combinations
from pathlib import Path

from pipeline.baselines import wilson
from pipeline.dataset import Dataset
from pipeline.dataset.card_audit import QUESTIONS as LABELS
from pipeline.errors import UserError
from pipeline.reporting.audit_sheet import COLUMNS, FORM, LETTERS

YES, NO = {"yes", "y", "1", "true"}, {"no", "n", "0", "false"}
QUESTIONS = tuple(LABELS)  # the rater's own choice against the key, then the form's yes/no questions
BOOTSTRAP = 1000


class SheetError(UserError):
    """A filled sheet that cannot be read: the message names the file, its line and the column."""


@dataclass
class Sheet:
    """One rater's answers: per query id, each question's answer (True/False) where the rater gave one, and the
    reply chosen (``choice``: the dataset's option index)."""

    rater: str
    path: Path
    answers: dict[str, dict[str, bool | int]] = field(default_factory=dict)


def read_sheet(path: Path, ds: Dataset) -> Sheet:
    """One filled sheet, every cell checked against the dataset (a SheetError names the first bad cell)."""
    queries = {q.query_id: q for q in ds.queries}
    sheet = Sheet(rater=path.stem, path=path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in COLUMNS[:5] + list(FORM) if c not in (reader.fieldnames or [])]
            if missing:
                raise SheetError(f"{path} line 1: missing column(s) {', '.join(missing)} (expected the header "
                                 "`personagen audit-sheet` wrote)")
            for row in reader:
                _row(path, reader.line_num, row, queries, sheet)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise SheetError(f"{path}: unreadable ({getattr(exc, 'strerror', None) or exc})") from None
    if not sheet.answers:
        raise SheetError(f"{path}: no item is answered (fill in choice or the yes/no columns)")
    return sheet


def _row(path: Path, line: int, row: dict, queries: dict, sheet: Sheet) -> None:
    where = f"{path} line {line}"
    qid = (row.get("query_id") or "").strip()
    query = queries.get(qid)
    if query is None:
        raise SheetError(f"{where}: query_id: {qid!r} is not a query of this dataset version")
    if qid in sheet.answers:
        raise SheetError(f"{where}: query_id: {qid} appears twice")
    try:
        order = [int(x) for x in (row.get("order") or "").split()]
    except ValueError:
        order = []
    if sorted(order) != list(range(len(query.options))):
        raise SheetError(f"{where}: order: {row.get('order')!r} is not the sheet's order of the "
                         f"{len(query.options)} replies (leave it as written)")
    answers: dict[str, bool | int] = {}
    choice = (row.get("choice") or "").strip().upper()
    if choice:
        letters = LETTERS[:len(order)]
        if len(choice) != 1 or choice not in letters:
            raise SheetError(f"{where}: choice: expected one of {', '.join(letters)}, found {row['choice']!r}")
        answers["choice"] = order[letters.index(choice)]  # the reply chosen, as the dataset's option index
        answers["choice_agrees_with_key"] = answers["choice"] == query.correct_index
    for column in FORM:
        value = (row.get(column) or "").strip().casefold()
        if value in YES or value in NO:
            answers[column] = value in YES
        elif value:
            raise SheetError(f"{where}: {column}: expected yes or no, found {row[column]!r}")
    if answers:
        sheet.answers[qid] = answers


def score(sheets: list[Sheet], seed: int = 0) -> dict:
    """The audit's figures (the manifest's ``stats.audit``, less ``of``)."""
    raters = [s.rater for s in sheets]
    if len(set(raters)) != len(raters):
        raise SheetError(f"two sheets share the rater name {next(r for r in raters if raters.count(r) > 1)!r} "
                         "(each rater's file name must differ)")
    items = sorted({qid for s in sheets for qid in s.answers})
    questions = {}
    for question in QUESTIONS:
        votes = [s.answers[q][question] for s in sheets for q in items if question in s.answers.get(q, {})]
        if not votes:
            continue
        rate = sum(votes) / len(votes)
        low, high = wilson(rate, len(votes))
        questions[question] = {"rate": rate, "low": low, "high": high, "answered": len(votes),
                               **_agreement(sheets, question, seed)}
    judged = [[s.answers[q]["key_right"] for s in sheets if "key_right" in s.answers.get(q, {})] for q in items]
    judged = [v for v in judged if v]
    if not judged:  # no rater opened the fold: their own choice stands for whether the key is right
        judged = [[s.answers[q]["choice_agrees_with_key"] for s in sheets
                   if "choice_agrees_with_key" in s.answers.get(q, {})] for q in items]
        judged = [v for v in judged if v]
    right = sum(1.0 if sum(v) * 2 > len(v) else 0.5 if sum(v) * 2 == len(v) else 0.0 for v in judged)
    ceiling = right / len(judged) if judged else 0.0
    low, high = wilson(ceiling, len(judged))
    return {
        "scored_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "sheets": [s.path.name for s in sheets], "raters": len(sheets), "items": len(items),
        "agreement": ("Cohen's kappa (scikit-learn)" if len(sheets) == 2 else
                      "Light's kappa, the mean of every pair's Cohen's kappa (scikit-learn)" if len(sheets) > 2 else
                      "not measured (one rater)"),
        "questions": questions,
        "ceiling": {"rate": ceiling, "low": low, "high": high, "items": len(judged)},
        "per_rater": {s.rater: {"items": len(s.answers), **{q: _rate(s, q) for q in ("choice_agrees_with_key", "key_right")}}
                      for s in sheets},
    }


def _rate(sheet: Sheet, question: str) -> dict | None:
    """One rater's rate of "yes" to ``question`` with its 95% Wilson interval, or None if never answered."""
    votes = [a[question] for a in sheet.answers.values() if question in a]
    if not votes:
        return None
    rate = sum(votes) / len(votes)
    low, high = wilson(rate, len(votes))
    return {"rate": rate, "low": low, "high": high, "answered": len(votes)}


def _agreement(sheets: list[Sheet], question: str, seed: int) -> dict:
    """Kappa of ``question`` over the items both raters of a pair answered, with a bootstrap interval; for the
    choice, agreement on which reply each rater chose (not only on whether it was the key)."""
    question = "choice" if question == "choice_agrees_with_key" else question
    pairs = []
    for a, b in combinations(sheets, 2):
        both = sorted(q for q in a.answers if question in a.answers[q] and question in b.answers.get(q, {}))
        if both:
            pairs.append([(a.answers[q][question], b.answers[q][question]) for q in both])
    if not pairs:
        return {"kappa": None}
    kappa = _mean_kappa(pairs)
    rng = random.Random(f"audit-score:{seed}:{question}")
    draws = sorted(_mean_kappa([[p[rng.randrange(len(p))] for _ in p] for p in pairs]) for _ in range(BOOTSTRAP))
    return {"kappa": kappa, "kappa_low": draws[int(0.025 * BOOTSTRAP)], "kappa_high": draws[int(0.975 * BOOTSTRAP) - 1],
            "kappa_items": max(len(p) for p in pairs)}


def _mean_kappa(pairs: list[list[tuple[bool, bool]]]) -> float:
    from sklearn.metrics import cohen_kappa_score

    values = []
    for pair in pairs:
        a, b = [x for x, _ in pair], [y for _, y in pair]
        if len(set(a) | set(b)) < 2:
            values.append(1.0)  # one label throughout, from both raters: they agree on every item
        else:
            values.append(float(cohen_kappa_score(a, b)))
    return sum(values) / len(values)


def read_sheets(paths: list[Path], ds: Dataset) -> list[Sheet]:
    """Every sheet, in the order given; the first bad cell of any of them is a SheetError."""
    return [read_sheet(p, ds) for p in paths]
