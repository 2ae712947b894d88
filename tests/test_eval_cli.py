"""`personagen eval` from the command line: one-line errors before any call, failed calls reported apart with
a non-zero exit, read-only versions, Ctrl-C and resume, and every mode with open answers against a loopback
OpenAI-compatible server."""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli.app import app
from pipeline.llm import LLM
from pipeline.llm.cache import LLMCache
from pipeline.llm.limits import Runtime
from schemas.llm import LLMSettings
from tests.support.eval_data import publish_tiny
from tests.support.openai_server import OpenAIServer, schema_answer
from tests.support.readonly import read_only


@pytest.fixture(scope="module")
def version(tmp_path_factory):
    return publish_tiny(tmp_path_factory.mktemp("cli"))


def _eval(version, tmp_path, *args: str):
    return CliRunner().invoke(app, ["eval", str(version), "--cache", str(tmp_path / "cache" / "llm.sqlite"),
                                    "--outputs", str(tmp_path / "out"), *args])


def _one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


BAD_OPTIONS = {
    "--concurrency 0": (["--concurrency", "0"], "--concurrency 0: must be at least 1"),
    "--max-tokens 0": (["--max-tokens", "0"], "--max-tokens 0: must be at least 1"),
    "--temperature -1": (["--temperature", "-1"], "--temperature -1: must be between 0 and 2"),
    "--limit 0": (["--limit", "0"], "--limit 0: must be at least 1"),
    "--window 0": (["--window", "0"], "--window 0: must be at least 1"),
    "--budget 0": (["--budget", "0"], "--budget '0': must be at least 1 token"),
    "--k 0": (["--mode", "rag", "--k", "0"], "--k 0: must be at least 1"),
    "--recent-tokens 0": (["--recent-tokens", "0"], "--recent-tokens 0: must be at least 1"),
    "--judge-sample 0": (["--judge-sample", "0"], "--judge-sample 0: must be at least 1"),
    "--mode bogus": (["--mode", "bogus"], "--mode 'bogus': use mcq, no-context, oracle, recent, rag"),
    "two modes": (["--mode", "mcq", "--mode", "rag"], "--mode given more than once: pass --suite"),
    "--granularity page": (["--granularity", "page"], "--granularity 'page': use session or turn"),
    "--answer open alone": (["--answer", "open"], "--answer open needs --judge <llm>"),
    "--name ../x": (["--name", "../x"], "eval run name '../x': use letters, digits"),
    "--name a/b": (["--name", "a/b"], "eval run name 'a/b': use letters, digits"),
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_options_are_one_line_before_anything_is_asked(tmp_path, version, case):
    args, message = BAD_OPTIONS[case]
    result = _eval(version, tmp_path, "--llm", "fake", *args)
    line = _one_line(result)
    assert result.exit_code == 2 and line.startswith("error: ") and message in line, line
    assert not (tmp_path / "cache").exists() and not (version / "evals" / "x").exists()


def _server_env(monkeypatch, server) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setattr(LLM, "_delay", lambda self, retry, error: 0.0)  # retries at once: the test waits for none


def test_calls_that_fail_are_reported_apart_exit_non_zero_and_are_asked_again_on_rerun(tmp_path, version,
                                                                                     monkeypatch):
    """A server that dies after 10 answers: the rest fail, not scored; exit 1; a rerun asks only those."""
    args = ["--llm", "openai:test-model", "--limit", "16", "--name", "dying", "--concurrency", "1"]
    with OpenAIServer(responder=lambda body: "<final_answer>(a)") as server:
        for index in range(10, 200):
            server.schedule(index, "server_error")
        _server_env(monkeypatch, server)
        result = _eval(version, tmp_path, *args)
        # the distinct requests that never got an answer (two placements may send the very same history and
        # question: the rerun answers both from one call)
        answered = {json.dumps(body["messages"]) for body in server.bodies[:10]}
        failed = {json.dumps(body["messages"]) for body in server.bodies[10:]} - answered
    rows = pq.read_table(version / "evals" / "dying" / "results.parquet").to_pylist()
    lost = sum(r["status"] == "failed" and r["correct"] is False and r["prediction"] is None for r in rows)
    # 16 placements, 10 answered calls: placements that share a request share its answer (or its failure)
    assert 0 < lost <= 6 and len(rows) == 16
    assert result.exit_code == 1 and _one_line(result) == (
        f"error: {lost} model or judge calls failed and are not scored; rerun the same command to retry them "
        "(every finished call is cached)")
    summary = json.loads((version / "evals" / "dying" / "summary.json").read_text())
    assert (summary["n_failed"], summary["n_scored"], summary["overall"]["n"]) == (lost, 16 - lost, 16 - lost)
    assert f"**{lost} failed calls** are not scored" in (version / "evals" / "dying" / "summary.md").read_text()
    with OpenAIServer(responder=lambda body: "<final_answer>(a)") as healthy:
        _server_env(monkeypatch, healthy)
        again = _eval(version, tmp_path, *args)
        assert again.exit_code == 0, again.output
        assert healthy.requests == len(failed) and 0 < len(failed) <= 6
    summary = json.loads((version / "evals" / "dying" / "summary.json").read_text())
    assert (summary["n_failed"], summary["n_scored"]) == (0, 16)


def test_a_read_only_version_writes_its_results_under_outputs(tmp_path, version):
    (version / "evals").mkdir(exist_ok=True)
    with read_only(version / "evals"):
        result = _eval(version, tmp_path, "--llm", "fake?answer=correct", "--limit", "3", "--name", "ro")
    assert result.exit_code == 0, result.output
    target = tmp_path / "out" / "eval-results" / version.parent.name / version.name / "ro"
    assert (target / "summary.json").is_file() and not (version / "evals" / "ro").exists()
    assert "the version is read-only: written under --outputs" in result.output


def test_a_read_only_version_and_outputs_fail_before_the_first_call(tmp_path, version):
    (version / "evals").mkdir(exist_ok=True)
    (tmp_path / "out").mkdir()
    with read_only(version / "evals"), read_only(tmp_path / "out"):
        result = CliRunner().invoke(app, ["eval", str(version), "--llm", "fake", "--name", "nowhere",
                                          "--outputs", str(tmp_path / "out"),
                                          "--cache", str(tmp_path / "cache" / "llm.sqlite")])
    line = _one_line(result)
    assert result.exit_code == 2 and line.startswith(f"error: {version / 'evals'}: cannot write the eval results")
    assert "nothing was asked" in line
    assert LLMCache(tmp_path / "cache" / "llm.sqlite").count() == 0


def test_ctrl_c_then_rerun_repeats_no_call(tmp_path, version, monkeypatch):
    """Ctrl-C after the first batch: one line, exit 130; the rerun asks only the rest (no call twice)."""
    import rich.progress

    from pipeline.evaluation import evaluate

    monkeypatch.setattr(evaluate, "BATCH", 4)
    monkeypatch.setattr(evaluate, "POLL_S", 600.0)  # the bar moves at the end of each batch only
    update = rich.progress.Progress.update

    def interrupt(self, task, *args, completed=None, **kwargs):
        if completed:
            raise KeyboardInterrupt
        return update(self, task, *args, completed=completed, **kwargs)

    args = ["--llm", "openai:test-model", "--limit", "12", "--name", "stopped"]
    with OpenAIServer(responder=lambda body: "<final_answer>(b)") as server:
        _server_env(monkeypatch, server)
        monkeypatch.setattr(rich.progress.Progress, "update", interrupt)
        try:
            stopped = _eval(version, tmp_path, *args)
        finally:
            Runtime.get().resume()
        assert stopped.exit_code == 130 and _one_line(stopped) == (
            "error: interrupted; every finished call is cached: rerun the same command to continue")
        assert server.requests == 4 and not (version / "evals" / "stopped").exists()
        monkeypatch.setattr(rich.progress.Progress, "update", update)
        resumed = _eval(version, tmp_path, *args)
        assert resumed.exit_code == 0, resumed.output
        assert server.requests == 12


def _answers(body: dict) -> str:
    """Free text for the model's calls, a valid verdict for the judge's structured calls."""
    return schema_answer(body) if "response_format" in body else "I would suggest what you told me you like now."


def test_a_suite_of_every_mode_with_open_answers_runs_against_an_openai_compatible_server(tmp_path, version,
                                                                                         monkeypatch):
    args = ["--llm", "openai:test-model", "--judge", "openai:test-model", "--suite", "--answer", "open",
            "--limit", "4", "--judge-sample", "3", "--granularity", "turn", "--k", "3", "--name", "wire"]
    with OpenAIServer(responder=_answers) as server:
        _server_env(monkeypatch, server)
        result = _eval(version, tmp_path, *args)
        assert result.exit_code == 0, result.output
        asked = server.requests
        # No prompt reaches the server twice, even when two modes' calls are in flight at once (the gateway
        # asks an identical call once); the judge reads the question, the key and the answer, not the mode,
        # so the same answer to the same query gets one verdict: 4 verdicts, plus the agreement sample's 2 x 3.
        bodies = [json.dumps(b["messages"], sort_keys=True) for b in server.bodies]
        assert len(set(bodies)) == len(bodies) == asked
        rows = pq.read_table(version / "evals" / "wire" / "results.parquet").to_pylist()
        assert len(rows) == 5 * 4 and all(r["verdict"] for r in rows)
        queries = {r["query_id"] for r in rows}
        judged = [b for b in server.bodies if "response_format" in b]
        assert len(judged) == len(queries) + 2 * 3 and all(b["temperature"] == 0 for b in judged)
        assert len(queries) <= asked - len(judged) <= 5 * 4  # the answers: one per distinct prompt
        assert all("(a)" not in b["messages"][-1]["content"] for b in server.bodies if "response_format" not in b)
        again = _eval(version, tmp_path, *args)
        assert again.exit_code == 0 and server.requests == asked
    summary = json.loads((version / "evals" / "wire" / "summary.json").read_text())
    assert summary["kind"] == "suite" and summary["judge"] == "openai:test-model"
    assert set(summary["runs"]) == {"mcq", "no-context", "oracle", "recent", "rag"}
    assert all(run["n_scored"] == 4 for run in summary["runs"].values())
    assert summary["judge_agreement"]["n_judged"] == 6
    assert summary["runs"]["rag"]["history"] == {"retriever": "bm25", "granularity": "turn", "k": 3}
    assert "Memory gap" in result.output


def test_a_window_smaller_than_the_contexts_is_said_before_the_run_with_the_modes_that_fit(tmp_path, version):
    result = _eval(version, tmp_path, "--llm", "fake?answer=correct", "--window", "1500", "--max-tokens", "64",
                   "--name", "small")
    assert result.exit_code == 0, result.output
    note = next(line for line in result.stderr.splitlines() if line.startswith("note: "))
    said = re.search(r"in mcq \((\d+) of (\d+)\)", note)
    assert said and 0 < int(said.group(1)) <= int(said.group(2)), note
    summary = json.loads((version / "evals" / "small" / "summary.json").read_text())
    assert summary["n_skipped"] == int(said.group(1))  # the note counted what the run skipped
    recent = re.search(r"recent \(--recent-tokens ([\d,]+)\)", note)
    assert "oracle" in note and recent, note
    fitted = _eval(version, tmp_path, "--llm", "fake?answer=correct", "--window", "1500", "--max-tokens", "64",
                   "--mode", "recent", "--recent-tokens", recent.group(1).replace(",", ""), "--name", "fitted")
    assert fitted.exit_code == 0 and "note: " not in fitted.stderr, fitted.output
    assert json.loads((version / "evals" / "fitted" / "summary.json").read_text())["n_skipped"] == 0


def test_the_eval_bar_moves_within_a_batch_as_calls_finish(tmp_path, version, monkeypatch):
    """One batch of slow calls: the bar is told its total before the first call and counts calls while they finish,
    not only when the batch is done."""
    from pipeline.evaluation import evaluate
    from pipeline.evaluation.evaluate import EvalSettings, run_eval

    monkeypatch.setattr(evaluate, "POLL_S", 0.02)
    seen: list[tuple[int, int]] = []
    with OpenAIServer(latency_s=0.1, responder=lambda body: "<final_answer>(b)") as server:
        _server_env(monkeypatch, server)
        llm = LLM(LLMSettings(llm="openai:test-model", cache_path=tmp_path / "c.sqlite", max_concurrency=1))
        run_eval(version, llm=llm, settings=EvalSettings(limit=5), name="bar", progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (0, 5) and seen[-1] == (5, 5), seen
    assert {d for d, _ in seen} > {0, 5}, seen  # counts between the first and the last
