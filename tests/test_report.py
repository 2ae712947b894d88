"""`personagen report`: a self-contained HTML whose embedded images decode as non-empty PNGs."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re

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
    assert len(embedded) == len(written.images) >= 9
    for data, path in zip(embedded, written.images, strict=True):
        _check_png(data)
        assert path.read_bytes() == data
    names = {p.name for p in written.images}
    assert {"persona_timeline.png", "correct_position.png", "option_length_by_role.png", "baselines.png"} <= names
    assert "eval_results.png" not in names and "<h2>Eval runs</h2>" not in page
    assert "src=\"http" not in page and "<script" not in page


def test_report_includes_eval_results_when_present_and_leaves_the_tables_alone(version, tmp_path):
    llm = LLM(LLMSettings(llm="fake?answer=correct", cache_path=tmp_path / "llm.sqlite", max_tokens=32))
    run_eval(version, llm=llm, settings=EvalSettings(limit=6), name="judge")
    written = build_report(version)
    assert "eval_results.png" in {p.name for p in written.images}
    assert "| judge | fake:fake-answer-correct | mcq | choice | 6 | 100.0% |" in written.summary
    assert "<h3>judge</h3>" in written.html.read_text()
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
