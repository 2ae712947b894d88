"""`personagen inspect`: counts, budgets and token histograms of a dataset version, in the terminal."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel
from rich.console import Group
from rich.table import Table

from pipeline.dataset import Dataset

BAR = 40
TABLES_NEEDED = ["queries", "sessions", "contexts", "placements"]


class Histogram(BaseModel):
    title: str
    edges: list[float]
    counts: list[int]


class BudgetRow(BaseModel):
    budget_tokens: int
    contexts: int
    min_fill: float
    max_fill: float
    filler_share: float
    placements: int


class InspectSummary(BaseModel):
    """Everything `inspect` prints, as data (tests and other tools read it)."""

    dataset: str
    version: str
    counts: dict[str, int]
    types: dict[str, int]
    unplaced: dict[str, int]
    budgets: list[BudgetRow]
    histograms: list[Histogram]


def histogram(title: str, values: list[float], bins: int = 10) -> Histogram:
    """Equal-width bins over [min, max] of ``values``."""
    if not values:
        return Histogram(title=title, edges=[0.0, 0.0], counts=[0])
    lo, hi = min(values), max(values)
    width = (hi - lo) / bins or 1.0
    counts = [0] * bins
    for v in values:
        counts[min(int((v - lo) / width), bins - 1)] += 1
    return Histogram(title=title, edges=[lo + i * width for i in range(bins + 1)], counts=counts)


def summarize(ds: Dataset) -> InspectSummary:
    """Counts per table and type, fill per budget, and histograms of session sizes and distances."""
    by_context = Counter(p.context_id for p in ds.placements)
    budgets = []
    for budget in sorted({c.budget_tokens for c in ds.contexts}):
        cs = [c for c in ds.contexts if c.budget_tokens == budget]
        fills = [c.n_tokens / budget for c in cs]
        budgets.append(BudgetRow(
            budget_tokens=budget, contexts=len(cs), min_fill=min(fills), max_fill=max(fills),
            filler_share=sum(c.filler_tokens for c in cs) / max(1, sum(c.n_tokens for c in cs)),
            placements=sum(by_context[c.context_id] for c in cs),
        ))
    budget_of = {c.context_id: c.budget_tokens for c in ds.contexts}
    hists = [
        histogram("persona session tokens", [s.n_tokens for s in ds.sessions if s.kind == "topic"]),
        histogram("filler session tokens", [s.n_tokens for s in ds.sessions if s.kind == "filler"]),
    ]
    for row in budgets:
        distances = [p.distance_tokens for p in ds.placements if budget_of[p.context_id] == row.budget_tokens]
        hists.append(histogram(f"distance to evidence (tokens) at {row.budget_tokens}", distances))
    return InspectSummary(
        dataset=ds.manifest.dataset,
        version=ds.manifest.version,
        counts=ds.manifest.counts,
        types=dict(sorted(Counter(q.type for q in ds.queries).items())),
        unplaced=ds.manifest.stats.get("assembly_unplaced", {}),
        budgets=budgets,
        histograms=hists,
    )


def render(summary: InspectSummary) -> Group:
    """Rich tables for the terminal."""
    counts = Table(title=f"{summary.dataset} {summary.version}")
    counts.add_column("table")
    counts.add_column("rows", justify="right")
    for name, n in summary.counts.items():
        counts.add_row(name, f"{n:,}")
    for name, n in summary.types.items():
        counts.add_row(f"queries: {name}", f"{n:,}")
    for reason, n in summary.unplaced.items():
        counts.add_row(f"not placed: {reason}", f"{n:,}")
    budgets = Table(title="budgets")
    for col in ("budget", "contexts", "fill (min-max)", "filler share", "placements"):
        budgets.add_column(col, justify="right")
    for b in summary.budgets:
        budgets.add_row(f"{b.budget_tokens:,}", str(b.contexts), f"{b.min_fill:.1%}-{b.max_fill:.1%}",
                        f"{b.filler_share:.1%}", f"{b.placements:,}")
    return Group(counts, budgets, *(_bars(h) for h in summary.histograms))


def _bars(h: Histogram) -> Table:
    table = Table(title=h.title, show_header=False, box=None)
    table.add_column("bin", justify="right")
    table.add_column("bar")
    table.add_column("n", justify="right")
    top = max(h.counts) or 1
    for i, n in enumerate(h.counts):
        table.add_row(f"{h.edges[i]:,.0f}-{h.edges[i + 1]:,.0f}", "█" * round(BAR * n / top), str(n))
    return table
