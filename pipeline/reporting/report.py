"""`personagen report`: a self-contained report.html (PNG plots embedded) plus the PNG files, written to
``<version>/report/`` through pipeline.dataset; the same summary becomes a Prefect artifact inside a flow."""

from __future__ import annotations

import base64
import html
import json
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ValidationError

from pipeline.dataset import Dataset, load, write_report
from pipeline.dataset.files import check_report
from pipeline.dataset.reading import verify
from pipeline.errors import UserError
from pipeline.evaluation.summary import (
    EvalSummary,
    SuiteSummary,
    artifact_key,
    baselines,
    budget_label,
    publish_artifact,
    render_markdown,
    render_suite,
)
from pipeline.reporting import plots as plots

TABLES = ["personas", "preferences", "events", "event_edges", "queries", "contexts", "placements"]


class Plot(BaseModel):
    """One rendered plot: file name, caption and PNG bytes."""

    name: str
    title: str
    png: bytes


class ReportWritten(BaseModel):
    """The files a report wrote."""

    html: Path
    images: list[Path]
    summary: str


Evals = list[EvalSummary | SuiteSummary]


def read_evals(version: Path) -> Evals:
    """The summaries of the eval runs and suites stored next to a version (none when it has not been evaluated)."""
    out: Evals = []
    for path in sorted((version / "evals").glob("[!.]*/summary.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            kind = SuiteSummary if isinstance(data, dict) and data.get("kind") == "suite" else EvalSummary
            out.append(kind.model_validate(data))
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}: not an eval summary ({exc.msg} at line {exc.lineno})") from None
        except ValidationError as exc:
            raise UserError(f"{path}: not an eval summary ({exc.errors()[0]['msg']})") from None
    return out


def runs_of(evals: Evals) -> list[EvalSummary]:
    """Every single-mode run: the eval runs, and each mode of each suite (named `suite/mode`)."""
    return [r for s in evals for r in (s.runs.values() if isinstance(s, SuiteSummary) else [s])]


def reader_baselines(evals: Evals) -> dict[str, float]:
    """The model-free retrieval reader's overall accuracy in each suite (it depends on the placements asked)."""
    return {f"retrieval reader ({s.run}, n={s.n_items})": s.references["retrieval_reader"][0].accuracy
            for s in evals if isinstance(s, SuiteSummary)}


def focus_persona(ds: Dataset) -> str:
    """The persona with the richest causal graph (most edges, then events; ties by id)."""
    owner = {e.event_id: e.persona_id for e in ds.events}
    edges = Counter(owner.get(edge.child_event_id) for edge in ds.event_edges)
    events = Counter(e.persona_id for e in ds.events)
    if not ds.personas:
        raise UserError(f"{ds.path}: the dataset has no personas")
    return min((p.persona_id for p in ds.personas), key=lambda pid: (-edges[pid], -events[pid], pid))


def make_plots(ds: Dataset, evals: Evals) -> list[Plot]:
    """Every plot of the report, in display order."""
    budgets = {c.context_id: c.budget_tokens for c in ds.contexts}
    per_budget = Counter(budgets[p.context_id] for p in ds.placements)
    out = [
        Plot(name="queries_per_type.png", title="Queries per type",
             png=plots.bar_chart("Queries per type", _sorted(Counter(q.type for q in ds.queries)))),
        Plot(name="queries_per_topic.png", title="Queries per topic",
             png=plots.bar_chart("Queries per topic", _sorted(Counter(q.topic for q in ds.queries)))),
        Plot(name="placements_per_budget.png", title="Placed queries per context budget",
             png=plots.bar_chart("Placed queries per budget",
                                 {budget_label(b): per_budget[b] for b in sorted(per_budget)})),
        Plot(name="context_tokens.png", title="Context tokens at the question",
             png=plots.histogram("Context tokens before the question", [p.context_tokens for p in ds.placements],
                                 xlabel="tokens")),
        Plot(name="evidence_distance.png", title="Evidence distance",
             png=plots.histogram("Distance from the evidence to the question",
                                 [p.distance_tokens for p in ds.placements], xlabel="tokens")),
        Plot(name="option_length_by_role.png", title="Option length per role",
             png=plots.option_length_by_role(ds.queries)),
        Plot(name="correct_position.png", title="Correct-option position", png=plots.correct_positions(ds.queries)),
        Plot(name="baselines.png", title="Model-free baselines",
             png=plots.bar_chart("Model-free baseline accuracy", baselines(ds.queries), xlabel="accuracy",
                                 percent=True, reference=0.25)),
    ]
    if evals:
        out.append(Plot(name="eval_results.png", title="Eval results",
                        png=plots.eval_results(runs_of(evals), baselines(ds.queries) | reader_baselines(evals))))
    return out + [_timeline_plot(ds)]


def _sorted(counts: Counter) -> dict[str, int]:
    return {k: counts[k] for k in sorted(counts)}


def _timeline_plot(ds: Dataset) -> Plot:
    pid = focus_persona(ds)
    name = next(p.name for p in ds.personas if p.persona_id == pid)
    events = [e for e in ds.events if e.persona_id == pid]
    ids = {e.event_id for e in events}
    edges = [e for e in ds.event_edges if e.child_event_id in ids]
    prefs = [p for p in ds.preferences if p.persona_id == pid]
    title = f"Timeline of {name} ({pid}): {len(events)} events, {len(edges)} edges, {len(prefs)} preference versions"
    return Plot(name="persona_timeline.png", title=title, png=plots.timeline_graph(title, events, edges, prefs))


def summary_markdown(ds: Dataset, evals: Evals) -> str:
    """Counts, model-free baselines and eval results as markdown (the Prefect artifact)."""
    m = ds.manifest
    lines = [f"# Report: {m.dataset} {m.version}", "", "| table | rows |", "|---|---:|"]
    lines += [f"| {name} | {count:,} |" for name, count in m.counts.items()]
    lines += ["", "| baseline (no model) | accuracy |", "|---|---:|"]
    lines += [f"| {name} | {value:.1%} |" for name, value in (baselines(ds.queries) | reader_baselines(evals)).items()]
    if evals:
        lines += ["", "| eval run | model | mode | answers | n | accuracy | 95% CI | skipped | failed |",
                  "|---|---|---|---|---:|---:|---|---:|---:|"]
        lines += [f"| {s.run} | {s.llm} | {s.mode} | {s.answer} | {s.overall.n} | {s.overall.accuracy:.1%} | "
                  f"[{s.overall.ci_low:.1%}, {s.overall.ci_high:.1%}] | {s.n_skipped} | {s.n_failed} |"
                  for s in runs_of(evals)]
    return "\n".join(lines) + "\n"


def render_html(title: str, summary: str, plots_: list[Plot], evals: Evals) -> str:
    """A self-contained HTML page: the summary, each plot inline as a data URI, each eval's table."""
    figures = "\n".join(
        f'<figure><img alt="{html.escape(p.title)}" src="data:image/png;base64,'
        f'{base64.b64encode(p.png).decode()}"><figcaption>{html.escape(p.title)} ({p.name})</figcaption></figure>'
        for p in plots_)
    runs = "\n".join(f"<h3>{html.escape(s.run)}</h3><pre>{html.escape(_markdown(s))}</pre>" for s in evals)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1><h2>Summary</h2>"
            f"<pre>{html.escape(summary)}</pre><h2>Plots</h2>{figures}"
            f"{'<h2>Eval runs</h2>' + runs if evals else ''}</body></html>\n")


def _markdown(summary: EvalSummary | SuiteSummary) -> str:
    return render_suite(summary) if isinstance(summary, SuiteSummary) else render_markdown(summary)


_CSS = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "figure{margin:1.5em 0}img{max-width:100%;border:1px solid #ddd}"
        "figcaption{color:#555;font-size:.9em}pre{background:#f6f6f6;padding:.8em;overflow-x:auto}")


def build_report(version: Path | str) -> ReportWritten:
    """Plot a dataset version (and its eval runs) and write ``<version>/report/``."""
    ds = load(version, tables=TABLES)
    verify(ds.path, ds.manifest)  # every file, those the report does not read included, as inspect and export do
    check_report(ds.path)  # a read-only version: one line before any plot is drawn
    evals = read_evals(ds.path)
    rendered = make_plots(ds, evals)
    summary = summary_markdown(ds, evals)
    page = render_html(f"{ds.manifest.dataset} {ds.manifest.version}", summary, rendered, evals)
    files = {p.name: p.png for p in rendered} | {"report.html": page.encode(), "summary.md": summary.encode()}
    target = write_report(ds.path, files)
    publish_artifact(artifact_key("report", ds.manifest.dataset, ds.manifest.version), summary,
                     f"dataset report {ds.manifest.dataset} {ds.manifest.version}")
    return ReportWritten(html=target / "report.html", images=[target / p.name for p in rendered], summary=summary)
