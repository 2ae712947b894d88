"""`personagen audit-sheet`: a stratified sample of a version's queries as a rater's form: ``sheet.csv`` (one
row per item, the answers to fill in) and a static HTML page per item (the evidence turns, the message, the four
replies in a fresh order, the key and the evidence turns behind a fold) with an index. A rater copies the CSV, fills it in and hands it
to `personagen audit-score`.

The sample is stratified by type and voicing (who wrote the evidence turns: the model, code after the model
failed, or no turn for an abstention), allocated in proportion with at least one item per stratum where ``n``
allows; each item is then shown in one of the budgets it is placed in, spreading the sample over budgets."""

from __future__ import annotations

import csv
import io
import random
from collections import Counter, defaultdict
from dataclasses import dataclass

import jinja2

from pipeline.dataset import Dataset
from pipeline.reporting.review import TEMPLATES
from schemas.conversation import Turn
from schemas.query import Query

LETTERS = "ABCDEFGH"
# The form's questions, in the CSV's order after `choice`: column -> what the rater answers (yes or no).
FORM = {
    "key_right": "Open the fold: is the marked answer right, given the history shown?",
    "another_right": "Is another reply also right?",
    "gives_away": "Could someone pick the marked answer from the message and replies alone, without the history?",
    "natural": "Do the message and the replies read like people?",
}
COLUMNS = ["item", "query_id", "order", "budget", "choice", *FORM, "comment"]
CONTEXT_TURNS = 4  # other voiced turns of the query's topic shown besides its evidence


@dataclass
class Item:
    """One sampled query as the rater sees it: its replies shown in ``order`` (dataset option indices)."""

    number: int
    query: Query
    order: list[int]
    budget: int | None
    stratum: tuple[str, str]

    @property
    def page(self) -> str:
        return f"item-{self.number:03d}.html"

    @property
    def key(self) -> str:
        return LETTERS[self.order.index(self.query.correct_index)]


def voicing(query: Query, turns: dict[tuple[str, int], Turn]) -> str:
    """Who wrote the query's evidence: "model", "code" (a fallback turn), or "none" (no evidence turn)."""
    found = [turns[(e.session_id, e.turn_index)] for e in query.evidence if (e.session_id, e.turn_index) in turns]
    if not found:
        return "none"
    return "code" if any(t.fallback for t in found) else "model"


def allocate(sizes: dict, n: int) -> dict:
    """``n`` items over strata in proportion to their sizes (largest remainder), at least one per stratum when
    ``n`` covers them all, never more than a stratum holds."""
    total = sum(sizes.values())
    n = min(n, total)
    floor = 1 if n >= len(sizes) else 0
    share = {k: max(floor, min(s, n * s // total)) for k, s in sizes.items()}
    rest = sorted(sizes, key=lambda k: (-(n * sizes[k] / total - n * sizes[k] // total), str(k)))
    while sum(share.values()) < n:
        grown = False
        for k in rest:
            if sum(share.values()) < n and share[k] < sizes[k]:
                share[k] += 1
                grown = True
        if not grown:
            break
    while sum(share.values()) > n:  # the floor of one per stratum overshot: trim the largest
        biggest = max(share, key=lambda k: (share[k], str(k)))
        share[biggest] -= 1
    return share


def draw(ds: Dataset, n: int, seed: int = 0) -> list[Item]:
    """The stratified sample of ``n`` queries (all of them when the version has fewer), in a seeded order."""
    rng = random.Random(f"audit-sheet:{seed}")
    turns = {(t.session_id, t.turn_index): t for t in ds.turns}
    strata: dict[tuple[str, str], list[Query]] = defaultdict(list)
    for q in sorted(ds.queries, key=lambda q: q.query_id):
        strata[(q.type, voicing(q, turns))].append(q)
    share = allocate({k: len(v) for k, v in strata.items()}, n)
    picked = [(k, q) for k in sorted(strata) for q in rng.sample(strata[k], share[k])]
    rng.shuffle(picked)
    budgets = _budgets(ds)
    used: Counter = Counter()
    items = []
    for number, (stratum, q) in enumerate(picked, start=1):
        options = sorted(budgets.get(q.query_id, []))
        budget = min(options, key=lambda b: (used[b], b)) if options else None
        used[budget] += 1
        order = list(range(len(q.options)))
        rng.shuffle(order)
        items.append(Item(number=number, query=q, order=order, budget=budget, stratum=stratum))
    return items


def _budgets(ds: Dataset) -> dict[str, list[int]]:
    budget = {c.context_id: c.budget_tokens for c in ds.contexts}
    found: dict[str, list[int]] = defaultdict(list)
    for p in ds.placements:
        found[p.query_id].append(budget[p.context_id])
    return found


def sheet_csv(items: list[Item]) -> bytes:
    """The rater's CSV: what identifies each item, then empty answer columns."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for item in items:
        writer.writerow([item.number, item.query.query_id, " ".join(str(i) for i in item.order),
                         "" if item.budget is None else item.budget] + [""] * (len(COLUMNS) - 4))
    return out.getvalue().encode()


def _shown_turns(ds: Dataset, q: Query) -> list[tuple[object, Turn, bool]]:
    """The evidence turns (marked, but named only behind the key's fold) and up to CONTEXT_TURNS other voiced turns of the topic before ``as_of``, in
    time order: (session, turn, is evidence)."""
    evidence = {(e.session_id, e.turn_index) for e in q.evidence}
    sessions = ds._lookup("session")
    shown = []
    for s in sessions.values():
        if s.session.persona_id != q.persona_id or s.session.topic != q.topic or s.session.time > q.as_of:
            continue
        for t in s.turns:
            if (t.session_id, t.turn_index) in evidence or t.pref_versions:
                shown.append((s.session, t, (t.session_id, t.turn_index) in evidence))
    marked = [x for x in shown if x[2]]
    others = [x for x in shown if not x[2]][-CONTEXT_TURNS:]
    return sorted(marked + others, key=lambda x: (x[0].time, x[0].session_id, x[1].turn_index))


def render_sheet(ds: Dataset, items: list[Item]) -> dict[str, bytes]:
    """The sheet's files: ``sheet.csv``, ``index.html`` (how to fill it, the items) and a page per item."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["day"] = lambda t: t.strftime("%Y-%m-%d") if t is not None else "-"
    persona = ds._lookup("persona")
    title = f"{ds.manifest.dataset} {ds.manifest.version}"
    files = {"sheet.csv": sheet_csv(items),
             "index.html": env.get_template("audit_index.html.j2").render(
                 title=title, items=items, form=FORM, columns=COLUMNS, letters=LETTERS,
                 strata=sorted(Counter(i.stratum for i in items).items()),
                 budgets=sorted(Counter(i.budget for i in items if i.budget).items())).encode()}
    page = env.get_template("audit_item.html.j2")
    for k, item in enumerate(items):
        turns = _shown_turns(ds, item.query)
        files[item.page] = page.render(
            title=title, item=item, persona=persona[item.query.persona_id], turns=turns,
            evidence=[str(i) for i, (_, _, marked) in enumerate(turns, start=1) if marked],
            options=[(LETTERS[i], item.query.options[o].text) for i, o in enumerate(item.order)], form=FORM,
            previous=items[k - 1].page if k else None, next=items[k + 1].page if k + 1 < len(items) else None).encode()
    return files
