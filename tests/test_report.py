"""`personagen report`: a self-contained HTML whose embedded images decode as non-empty PNGs."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import shutil
import subprocess
from collections import Counter

import pytest
from PIL import Image
from typer.testing import CliRunner

from pipeline.cli.app import app
from pipeline.dataset import load
from pipeline.evaluation.evaluate import EvalSettings, run_eval
from pipeline.evaluation.summary import publish_artifact
from pipeline.llm import LLM
from pipeline.reporting.report import build_report, focus_persona
from schemas.llm import LLMSettings
from tests.support.eval_data import publish_tiny

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DATA_URI = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


@pytest.fixture
def version(tmp_path):
    return publish_tiny(tmp_path / "out", n_personas=2)


def _check_png(data: bytes) -> None:
    assert data.startswith(PNG_SIGNATURE) and len(data) > 2000
    image = Image.open(io.BytesIO(data))
    image.load()
    assert image.width > 200 and image.height > 150
    low, high = image.convert("L").getextrema()
    assert low < high  # something is drawn


def test_report_html_embeds_every_plot_as_a_decodable_png(version):
    written = build_report(version)
    assert written.html == version / "report" / "report.html"
    page = written.html.read_text()
    embedded = [base64.b64decode(m) for m in DATA_URI.findall(page)]
    assert len(embedded) == len(written.images) >= 2
    for data, path in zip(embedded, written.images, strict=True):
        _check_png(data)
        assert path.read_bytes() == data
    names = {p.name for p in written.images}
    assert {"persona_timeline.png", "baselines.png"} <= names
    assert "eval_results.png" not in names and "<h2>Eval runs</h2>" not in page
    assert "src=\"http" not in page and "<script" not in page


def test_a_small_runs_counts_are_tables_and_a_big_runs_are_plots(version, tmp_path):
    """No bar chart of ones: a count is drawn only when its largest bar reaches MIN_BAR, else it is a table."""
    from pipeline.reporting.report import MIN_BAR, MIN_QUERIES, make_plots

    ds = load(version)
    figures = make_plots(ds, [])
    drawn = {p.name for p in figures.plots}
    by_type = Counter(q.type for q in ds.queries)
    assert ("queries_per_type.png" in drawn) == (max(by_type.values()) >= MIN_BAR)
    assert ("correct_position.png" in drawn) == (len(ds.queries) >= MIN_QUERIES)
    if "queries_per_type.png" not in drawn:
        assert any(title == "Queries per type" for title, _, _ in figures.tables)
    big = ds.model_copy(update={"queries": ds.queries * (MIN_QUERIES // max(1, min(by_type.values())) + MIN_BAR)})
    assert {"queries_per_type.png", "correct_position.png"} <= {p.name for p in make_plots(big, []).plots}


def test_the_report_is_html_tables_with_a_page_per_persona(version, tmp_path):
    llm = LLM(LLMSettings(llm="fake?answer=correct", cache_path=tmp_path / "llm.sqlite", max_tokens=32))
    run_eval(version, llm=llm, settings=EvalSettings(limit=6), name="judge")
    page = build_report(version).html.read_text()
    assert "<pre" not in page and page.count("<table>") >= 4
    assert re.search(r"<td>judge</td>.*?<td class=n>100\.0%</td><td class=n>\[100\.0%, 100\.0%\]</td>", page), page
    ds = load(version)
    for p in ds.personas:
        target = version / "report" / f"persona-{p.persona_id}.html"
        assert f'href="{target.name}"' in page and target.is_file()
    assert (version / "report" / "index.html").is_file()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no headless chromium (apt-get install -y chromium)")
def test_the_report_renders_in_a_headless_browser_without_scroll_boxes(version, tmp_path):
    llm = LLM(LLMSettings(llm="fake?answer=correct", cache_path=tmp_path / "llm.sqlite", max_tokens=32))
    run_eval(version, llm=llm, settings=EvalSettings(limit=6), name="judge")
    html_path = build_report(version).html
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1200,1600", f"--screenshot={shot}", html_path.as_uri()],
                   check=True, capture_output=True, timeout=120)
    image = Image.open(shot).convert("L")
    assert image.size == (1200, 1600)
    # the table grid: many rows of the page hold a long run of the border grey, as a table's rules draw
    pixels = image.load()
    ruled = sum(1 for y in range(image.height) if sum(1 for x in range(image.width) if 215 <= pixels[x, y] <= 225) > 150)
    assert ruled >= 10, ruled
    low, high = image.getextrema()
    assert low < 60 and high > 240  # dark text on a light page


def test_report_includes_eval_results_when_present_and_leaves_the_tables_alone(version, tmp_path):
    llm = LLM(LLMSettings(llm="fake?answer=correct", cache_path=tmp_path / "llm.sqlite", max_tokens=32))
    run_eval(version, llm=llm, settings=EvalSettings(limit=6), name="judge")
    written = build_report(version)
    assert "eval_results.png" in {p.name for p in written.images}
    assert "| judge | fake:fake-answer-correct | mcq | choice | 6 | 100.0% |" in written.summary
    assert re.search(r"<tr><td>judge</td><td>fake:fake-answer-correct</td><td>mcq</td><td>choice</td>"
                     r"<td class=n>6</td><td class=n>100\.0%</td>", written.html.read_text())
    manifest = json.loads((version / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        assert hashlib.sha256((version / name).read_bytes()).hexdigest() == entry["sha256"]


def test_the_timeline_plot_shows_the_persona_with_the_richest_graph(version):
    ds = load(version)
    chosen = focus_persona(ds)
    owner = {e.event_id: e.persona_id for e in ds.events}
    edges = {p.persona_id: sum(owner[e.child_event_id] == p.persona_id for e in ds.event_edges) for p in ds.personas}
    assert edges[chosen] == max(edges.values())


def test_report_and_eval_commands_run_from_the_cli(version, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["eval", str(version), "--llm", "fake?answer=correct", "--limit", "3",
                                 "--cache", str(tmp_path / "llm.sqlite"), "--budget", "2k"])
    assert result.exit_code == 0, result.output
    assert "100.0%" in result.output and (version / "evals" / "mcq-fake-fake-answer-correct-2k").is_dir()
    result = runner.invoke(app, ["report", str(version)])
    assert result.exit_code == 0, result.output
    assert "report.html" in result.output and (version / "report" / "eval_results.png").is_file()


def test_cli_errors_are_one_line(version, tmp_path):
    runner = CliRunner()
    for args, message in ((["--budget", "lots"], "--budget 'lots'"), (["--mode", "open"], "--mode 'open'"),
                          (["--budget", "9k"], "no placements at budget 9000")):
        result = runner.invoke(app, ["eval", str(version), "--llm", "fake", "--cache", str(tmp_path / "c.sqlite"),
                                     *args])
        assert result.exit_code == 2 and message in result.output


def test_artifacts_are_posted_only_inside_a_prefect_run(monkeypatch):
    assert publish_artifact("report-x", "# hi", "test") is False
    posted = []
    monkeypatch.setattr("prefect.context.get_run_context", lambda: object())
    monkeypatch.setattr("prefect.artifacts.create_markdown_artifact", lambda **kw: posted.append(kw))
    assert publish_artifact("report-x", "# hi", "test") is True
    assert posted == [{"markdown": "# hi", "key": "report-x", "description": "test"}]


@pytest.mark.slow
def test_report_inside_a_flow_posts_a_markdown_artifact(version):
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.testing.utilities import prefect_test_harness

    @flow
    def report_flow(path: str) -> str:
        return build_report(path).summary

    with prefect_test_harness(server_startup_timeout=180):
        summary = report_flow(str(version))
        with get_client(sync_client=True) as client:
            artifacts = [a for a in client.read_artifacts() if a.key == "report-tiny-v0001"]
    assert len(artifacts) == 1 and artifacts[0].type == "markdown" and artifacts[0].data == summary
