"""`personagen eval` end to end with the real embedded model (tiny: a 1.5k window, so one short history is asked and the longer ones are skipped)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli.app import app
from tests.support.eval_data import publish_tiny
from tests.support.smoke import publish_smoke


@pytest.mark.model
def test_personagen_eval_runs_end_to_end_with_the_embedded_model(tmp_path):
    version = publish_tiny(tmp_path / "out", n_personas=2)
    args = ["eval", str(version), "--llm", "local", "--limit", "3", "--window", "1500", "--max-tokens", "24",
            "--name", "smol", "--cache", str(tmp_path / "llm.sqlite")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = pq.read_table(version / "evals" / "smol" / "results.parquet").to_pylist()
    summary = json.loads((version / "evals" / "smol" / "summary.json").read_text())
    assert len(rows) == 3 and summary["llm"].startswith("local:SmolLM2") and summary["window"] == 1500
    asked = [r for r in rows if r["status"] != "skipped"]
    assert 0 < len(asked) < len(rows)
    assert all(r["prediction"] is not None and r["input_tokens"] > 0 for r in asked)
    assert all("> window 1,500" in r["skipped_reason"] for r in rows if r["status"] == "skipped")
    assert summary["n_scored"] == len(asked) and summary["overall"]["n"] == len(asked)
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0
    rerun = pq.read_table(version / "evals" / "smol" / "results.parquet").to_pylist()
    assert all(r["cached"] for r in rerun if r["status"] != "skipped")


@pytest.mark.model
def test_a_suite_with_open_answers_runs_on_the_embedded_model_on_the_smoke_profile(tmp_path):
    """Every mode, open answers and the judge on SmolLM2 (smoke profile, 2 placements; the window skips the
    whole-history prompts and keeps the short ones); the rerun answers from the cache."""
    version = publish_smoke(tmp_path, n_personas=1)
    args = ["eval", str(version), "--llm", "local", "--judge", "local", "--suite", "--answer", "open", "--limit", "2",
            "--window", "600", "--max-tokens", "24", "--recent-tokens", "200", "--k", "1", "--judge-sample", "1",
            "--name", "smol-suite", "--cache", str(tmp_path / "llm.sqlite")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((version / "evals" / "smol-suite" / "summary.json").read_text())
    runs = summary["runs"]
    assert set(runs) == {"mcq", "no-context", "oracle", "recent", "rag"} and summary["judge"].startswith("local:")
    assert runs["mcq"]["n_skipped"] >= 1 and runs["mcq"]["n_skipped"] + runs["mcq"]["n_scored"] == 2
    assert all(runs[m]["n_scored"] == 2 for m in ("no-context", "oracle", "recent", "rag"))
    assert all(r["n_failed"] == 0 for r in runs.values()) and summary["judge_agreement"]["n_judged"] == 2
    rows = pq.read_table(version / "evals" / "smol-suite" / "results.parquet").to_pylist()
    asked = [r for r in rows if r["status"] == "answered"]
    assert asked and all(r["verdict"] in ("correct", "outdated", "incorrect") and r["prediction"] for r in asked)
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0
    rerun = pq.read_table(version / "evals" / "smol-suite" / "results.parquet").to_pylist()
    assert all(r["cached"] for r in rerun if r["status"] == "answered")
