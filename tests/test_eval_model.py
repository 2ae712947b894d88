"""`personagen eval` end to end with the real embedded model (tiny: a 1.5k window, so one short history is asked and the longer ones are skipped)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli.app import app
from tests.support.eval_data import publish_tiny


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
