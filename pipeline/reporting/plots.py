"""The report's plots: matplotlib Figures built directly (the Agg canvas, no pyplot state), returned as PNG bytes."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta

import matplotlib.dates as mdates
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from pipeline.evaluation.summary import EvalSummary
from schemas.query import Query
from schemas.timeline import Event, EventEdge, PreferenceVersion

RELATION_COLORS = {"causes": "#d62728", "supersedes": "#1f77b4"}
STANCE_COLORS = {"like": "#2ca02c", "dislike": "#9467bd"}
KIND_MARKERS = {"life_event": ("D", "#ff7f0e"), "preference_update": ("o", "#d62728"), "routine": ("s", "#7f7f7f")}
LIFE_LANE = "life events"


def png(fig: Figure) -> bytes:
    """The figure rendered as PNG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def bar_chart(title: str, counts: dict[str, float], *, xlabel: str = "count", percent: bool = False,
              reference: float | None = None) -> bytes:
    """Horizontal bars, one per key, in the given order, with value labels."""
    fig = Figure(figsize=(7, 0.45 * len(counts) + 1.4))
    ax = fig.subplots()
    labels, values = list(counts), list(counts.values())
    ax.barh(range(len(values)), values, color="#4c72b0")
    ax.set_yticks(range(len(values)), labels)
    ax.invert_yaxis()
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:.1%}" if percent else f" {v:g}", va="center", fontsize=8)
    if reference is not None:
        ax.axvline(reference, color="#c44e52", linestyle="--", label=f"chance {reference:.0%}")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlim(0, max([*values, reference or 0, 1e-9]) * 1.18)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    return png(fig)


def histogram(title: str, values: Sequence[float], *, xlabel: str, bins: int = 20) -> bytes:
    """A histogram of `values` (an empty note when there are none)."""
    fig = Figure(figsize=(7, 3.2))
    ax = fig.subplots()
    if values:
        ax.hist(values, bins=bins, color="#55a868", edgecolor="white")
    else:
        ax.text(0.5, 0.5, "no data", ha="center", transform=ax.transAxes)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("placements")
    return png(fig)


def option_length_by_role(queries: Sequence[Query]) -> bytes:
    """Box plots of option length (characters) per option role: a leaky benchmark makes `correct` stand out."""
    lengths: dict[str, list[int]] = {}
    for q in queries:
        for o in q.options:
            lengths.setdefault(o.role, []).append(len(o.text))
    roles = sorted(lengths, key=lambda r: (r != "correct", r))
    fig = Figure(figsize=(8, 0.4 * len(roles) + 1.6))
    ax = fig.subplots()
    if roles:
        ax.boxplot([lengths[r] for r in roles], orientation="horizontal", widths=0.6)
        ax.set_yticks(range(1, len(roles) + 1), [f"{r} (n={len(lengths[r])})" for r in roles])
        ax.invert_yaxis()
    ax.set_title("Option length balance per role")
    ax.set_xlabel("characters")
    return png(fig)


def correct_positions(queries: Sequence[Query]) -> bytes:
    """How often the correct option sits at (a), (b), (c), (d)."""
    counts = Counter(q.correct_index for q in queries)
    width = max([len(q.options) for q in queries], default=4)
    fig = Figure(figsize=(5, 3))
    ax = fig.subplots()
    ax.bar([f"({chr(97 + i)})" for i in range(width)], [counts.get(i, 0) for i in range(width)], color="#8172b2")
    if queries:
        ax.axhline(len(queries) / width, color="#c44e52", linestyle="--", label="uniform")
        ax.legend(fontsize=8)
    ax.set_title("Position of the correct option")
    ax.set_ylabel("queries")
    return png(fig)


def eval_results(summaries: Sequence[EvalSummary], baselines: dict[str, float]) -> bytes:
    """Overall accuracy of every eval run with its 95% CI, next to the model-free baselines."""
    runs = sorted(summaries, key=lambda s: s.run)
    fig = Figure(figsize=(8, 0.5 * (len(runs) + len(baselines)) + 1.6))
    ax = fig.subplots()
    labels = [f"{s.run} (n={s.overall.n})" for s in runs] + [f"baseline: {b}" for b in baselines]
    values = [s.overall.accuracy for s in runs] + list(baselines.values())
    low = [s.overall.accuracy - s.overall.ci_low for s in runs] + [0] * len(baselines)
    high = [s.overall.ci_high - s.overall.accuracy for s in runs] + [0] * len(baselines)
    colors = ["#4c72b0"] * len(runs) + ["#bbbbbb"] * len(baselines)
    ax.barh(range(len(values)), values, xerr=[low, high], color=colors, capsize=3)
    ax.set_yticks(range(len(values)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(lambda x, _: f"{x:.0%}")
    ax.set_title("Eval accuracy (95% bootstrap CI over personas) and baselines")
    return png(fig)


def _lanes(preferences: Sequence[PreferenceVersion]) -> dict[str, int]:
    """Row per preference (grouped by topic), below a top row for cross-topic life events."""
    rows = {LIFE_LANE: 0}
    for pref_id in sorted({p.pref_id for p in preferences},
                          key=lambda pid: next((p.topic, p.item) for p in preferences if p.pref_id == pid)):
        rows[pref_id] = len(rows)
    return rows


def _event_row(event: Event, rows: dict[str, int]) -> int:
    """An event sits on the row of the (last) preference it touches, else on the life-event row."""
    for ref in reversed(event.pref_refs):
        pref_id = ref.split("@")[0]
        if pref_id in rows:
            return rows[pref_id]
    return rows[LIFE_LANE]


def timeline_graph(title: str, events: Sequence[Event], edges: Sequence[EventEdge],
                   preferences: Sequence[PreferenceVersion]) -> bytes:
    """One persona's dated causal graph: version bars per preference, events as nodes, coloured edges."""
    rows = _lanes(preferences)
    times = [e.time for e in events] + [p.valid_from for p in preferences]
    end = max(times, default=datetime(2025, 1, 1)) + timedelta(days=20)
    fig = Figure(figsize=(12, 0.42 * len(rows) + 2.2))
    ax = fig.subplots()
    _draw_versions(ax, preferences, rows, end)
    where = {e.event_id: (mdates.date2num(e.time), _event_row(e, rows)) for e in events}
    for edge in edges:
        if edge.parent_event_id in where and edge.child_event_id in where:
            ax.annotate("", xy=where[edge.child_event_id], xytext=where[edge.parent_event_id],
                        arrowprops={"arrowstyle": "-|>", "color": RELATION_COLORS[edge.relation], "lw": 1.2,
                                    "connectionstyle": "arc3,rad=0.15", "shrinkA": 4, "shrinkB": 4})
    for kind, (marker, color) in KIND_MARKERS.items():
        points = [where[e.event_id] for e in events if e.kind == kind]
        if points:
            ax.scatter([p[0] for p in points], [p[1] for p in points], marker=marker, color=color, s=36, zorder=3,
                       edgecolor="black", linewidth=0.5)
    _decorate(ax, fig, rows, preferences, title)
    return png(fig)


def _draw_versions(ax, preferences: Sequence[PreferenceVersion], rows: dict[str, int], end: datetime) -> None:
    for p in preferences:
        start = mdates.date2num(p.valid_from)
        stop = mdates.date2num(p.valid_to or end)
        ax.barh(rows[p.pref_id], stop - start, left=start, height=0.55, color=STANCE_COLORS[p.stance], alpha=0.35,
                edgecolor=STANCE_COLORS[p.stance])
        ax.text(start, rows[p.pref_id] - 0.32, f" v{p.version} {p.stance}", fontsize=6, va="bottom")


def _decorate(ax, fig: Figure, rows: dict[str, int], preferences: Sequence[PreferenceVersion], title: str) -> None:
    names = {p.pref_id: f"{p.topic}: {p.item}" for p in preferences}
    ax.set_yticks(list(rows.values()), [names.get(k, k) for k in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.4, -0.7)
    ax.xaxis.set_major_locator(mdates.AutoDateLocator())
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))
    fig.autofmt_xdate()
    ax.grid(axis="x", alpha=0.3)
    handles = [Line2D([], [], color=c, lw=2, label=f"edge: {r}") for r, c in RELATION_COLORS.items()]
    handles += [Patch(color=c, alpha=0.4, label=f"version: {s}") for s, c in STANCE_COLORS.items()]
    handles += [Line2D([], [], marker=m, color=c, linestyle="", label=k.replace("_", " "))
                for k, (m, c) in KIND_MARKERS.items()]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7)
    ax.set_title(title)
