"""`personagen report`: report.html (HTML tables, PNG plots embedded), the PNG files and a page per persona, written to
``<version>/report/`` through pipeline.dataset; the same summary becomes a Prefect artifact inside a flow."""

from __future__ import annotations

import base64
import html
import json
import re
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
from pipeline.reporting.review import page_name, render_review


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


# A count is drawn as a bar chart only when its largest bar reaches MIN_BAR, a distribution as a histogram only over
# MIN_POINTS values, a per-query picture over MIN_QUERIES queries: a small run's counts are a table, not bars of 1 and 2.
MIN_BAR, MIN_POINTS, MIN_QUERIES = 10, 30, 40


class Figures(BaseModel):
    """What the report shows of a dataset: plots where the run is big enough to draw, small tables elsewhere."""

    plots: list[Plot]
    tables: list[tuple[str, list[str], list[list[str]]]]  # (title, header, rows)


def make_plots(ds: Dataset, evals: Evals) -> Figures:
    """Every plot of the report in display order, each count too small to draw given as a table instead."""
    budgets = {c.context_id: c.budget_tokens for c in ds.contexts}
    per_budget = Counter(budgets[p.context_id] for p in ds.placements)
    out, tables = [], []
    counts = [("queries_per_type.png", "Queries per type", _sorted(Counter(q.type for q in ds.queries))),
              ("queries_per_topic.png", "Queries per topic", _sorted(Counter(q.topic for q in ds.queries))),
              ("placements_per_budget.png", "Placed queries per context budget",
               {budget_label(b): per_budget[b] for b in sorted(per_budget)})]
    for name, title, values in counts:
        if max(values.values(), default=0) >= MIN_BAR:
            out.append(Plot(name=name, title=title, png=plots.bar_chart(title, values)))
        else:
            tables.append((title, ["", "count"], [[k, f"{v:,}"] for k, v in values.items()]))
    spreads = [("context_tokens.png", "Context tokens at the question", [p.context_tokens for p in ds.placements]),
               ("evidence_distance.png", "Distance from the evidence to the question",
                [p.distance_tokens for p in ds.placements])]
    for name, title, values in spreads:
        if len(values) >= MIN_POINTS:
            out.append(Plot(name=name, title=title, png=plots.histogram(title, values, xlabel="tokens")))
        elif values:
            ordered = sorted(values)
            tables.append((title + " (tokens)", ["placements", "least", "median", "most"],
                           [[f"{len(values):,}", f"{ordered[0]:,}", f"{ordered[len(ordered) // 2]:,}", f"{ordered[-1]:,}"]]))
    if len(ds.queries) >= MIN_QUERIES:
        out += [Plot(name="option_length_by_role.png", title="Option length per role",
                     png=plots.option_length_by_role(ds.queries)),
                Plot(name="correct_position.png", title="Correct-option position", png=plots.correct_positions(ds.queries))]
    out.append(Plot(name="baselines.png", title="Model-free baselines",
                    png=plots.bar_chart("Model-free baseline accuracy", baselines(ds.queries), xlabel="accuracy",
                                        percent=True, reference=0.25)))
    if evals:
        out.append(Plot(name="eval_results.png", title="Eval results",
                        png=plots.eval_results(runs_of(evals), baselines(ds.queries) | reader_baselines(evals))))
    return Figures(plots=[*out, _timeline_plot(ds)], tables=tables)


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


def render_html(title: str, ds: Dataset, figures: Figures, evals: Evals, personas: list[tuple[str, str, str]]) -> str:
    """One HTML page (no script, plots inline) of real tables: counts, baselines, every eval run with its intervals, small counts,
    the plots inline as data URIs, and a link to each persona's page (``personas``: id, name, page)."""
    m = ds.manifest
    parts = [_table("Tables", ["table", "rows"], [[name, f"{count:,}"] for name, count in m.counts.items()]),
             _table("Model-free baselines", ["baseline (no model)", "accuracy"],
                    [[name, f"{value:.1%}"] for name, value in (baselines(ds.queries) | reader_baselines(evals)).items()])]
    if evals:
        parts.append(_table("Eval runs", ["run", "model", "mode", "answers", "n", "accuracy", "95% CI", "skipped", "failed"],
                            [[s.run, s.llm, s.mode, s.answer, f"{s.overall.n:,}", f"{s.overall.accuracy:.1%}",
                              _ci(s.overall), f"{s.n_skipped:,}", f"{s.n_failed:,}"] for s in runs_of(evals)]))
    parts += [_table(t, header, rows) for t, header, rows in figures.tables]
    images = "\n".join(
        f'<figure><img alt="{html.escape(p.title)}" src="data:image/png;base64,'
        f'{base64.b64encode(p.png).decode()}"><figcaption>{html.escape(p.title)} ({p.name})</figcaption></figure>'
        for p in figures.plots)
    runs = "\n".join(f"<section>{markdown_html(_markdown(s))}</section>" for s in evals)
    links = "".join(f'<li><a href="{html.escape(page)}">{html.escape(name)}</a> <span class="dim">{html.escape(pid)}</span></li>'
                    for pid, name, page in personas)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1><h2>Summary</h2>{''.join(parts)}"
            f"<h2>Plots</h2>{images}{'<h2>Eval runs</h2>' + runs if evals else ''}"
            f"<h2>Personas</h2><p><a href='index.html'>All personas</a>, a page each: timeline, sessions and "
            f"questions.</p><ul class='personas'>{links}</ul></body></html>\n")


def _markdown(summary: EvalSummary | SuiteSummary) -> str:
    return render_suite(summary) if isinstance(summary, SuiteSummary) else render_markdown(summary)


def _table(title: str, header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td{_NUMBER.match(c) and ' class=n' or ''}>{html.escape(c)}</td>" for c in row)
                   + "</tr>" for row in rows)
    return f"<table><caption>{html.escape(title)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _ci(a) -> str:
    return f"[{a.ci_low:.1%}, {a.ci_high:.1%}]"


def markdown_html(text: str) -> str:
    """An eval's markdown (headings, paragraphs, bullets, pipe tables) as HTML: real tables, not a scroll box."""
    out: list[str] = []
    rows: list[list[str]] = []

    def flush() -> None:
        if rows:
            head, *body = rows
            out.append(_table("", head, body).replace("<caption></caption>", ""))
            rows.clear()

    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):  # not the |---|---:| rule
                rows.append([_plain(c) for c in cells])
            continue
        flush()
        if line.startswith("#"):
            level = min(6, 2 + len(line) - len(line.lstrip("#")))
            out.append(f"<h{level}>{_inline(line.lstrip('# '))}</h{level}>")
        elif line.strip():
            out.append(f"<li>{_inline(line[2:])}</li>" if line.startswith("- ") else f"<p>{_inline(line)}</p>")
    flush()
    return "\n".join(out)


def _plain(text: str) -> str:
    return text.replace("`", "").replace("**", "")


def _inline(text: str) -> str:
    parts = html.escape(text.replace("**", "")).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


_NUMBER = re.compile(r"^[-+]?[\d,.]+%?( \[[-\d.,%\s]+\])?$|^\[[-\d.,%\s]+\]$")  # a count, a rate, an interval

_CSS = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "figure{margin:1.5em 0}img{max-width:100%;border:1px solid #ddd}"
        "figcaption{color:#555;font-size:.9em}table{border-collapse:collapse;margin:1em 0}"
        "caption{text-align:left;font-weight:bold;padding:.3em 0}th,td{border:1px solid #ddd;padding:.3em .6em;"
        "text-align:left}td.n{text-align:right;white-space:nowrap}th{background:#f3f3f3}.dim{color:#888;font-size:.85em}"
        "ul.personas{columns:3}")


def build_report(version: Path | str) -> ReportWritten:
    """Plot a dataset version (and its eval runs) and write ``<version>/report/``."""
    ds = load(version)  # every table: the persona pages show sessions and turns
    verify(ds.path, ds.manifest)  # every file, those the report does not read included, as inspect and export do
    check_report(ds.path)  # a read-only version: one line before any plot is drawn
    evals = read_evals(ds.path)
    figures = make_plots(ds, evals)
    rendered = figures.plots
    summary = summary_markdown(ds, evals)
    pages = render_review(ds)  # index.html and a page per persona, beside report.html
    personas = [(p.persona_id, p.name, page_name(p.persona_id)) for p in sorted(ds.personas, key=lambda p: p.name)]
    page = render_html(f"{ds.manifest.dataset} {ds.manifest.version}", ds, figures, evals, personas)
    files = {p.name: p.png for p in rendered} | pages | {"report.html": page.encode(), "summary.md": summary.encode()}
    target = write_report(ds.path, files)
    publish_artifact(artifact_key("report", ds.manifest.dataset, ds.manifest.version), summary,
                     f"dataset report {ds.manifest.dataset} {ds.manifest.version}")
    return ReportWritten(html=target / "report.html", images=[target / p.name for p in rendered], summary=summary)
