"""Reliability round 3: a read-only output folder, a template that includes itself, damaged cache rows and a
damaged version are each one line naming the culprit, before any model call where there is one to spare."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli.app import app
from tests.support.eval_data import publish_tiny
from tests.support.readonly import read_only

REPO = Path(__file__).resolve().parents[1]


def one_line(result, *needles: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code != 0 and len(lines) == 1 and lines[0].startswith("error: "), result.output[-3000:]
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("command", ["plan", "text", "queries"])
def test_a_read_only_out_is_one_line_before_any_model_call(tmp_path, command):
    locked = tmp_path / "locked"
    locked.mkdir()
    cache = tmp_path / "cache" / "llm.sqlite"
    args = [command, "--n", "1", "--profile", "smoke", "--out", str(locked / "out")]
    if command != "plan":
        args += ["--llm", "fake", "--cache", str(cache)]
    with read_only(locked):
        line = one_line(CliRunner().invoke(app, args), f"--out {locked / 'out'}")
    assert "nothing was written" in line
    if cache.exists():
        with sqlite3.connect(cache) as db:
            assert db.execute("select count(*) from calls").fetchone()[0] == 0
    assert list(locked.iterdir()) == []


def test_report_on_a_read_only_version_is_one_line(tmp_path):
    version = publish_tiny(tmp_path / "out", n_personas=2)
    with read_only(version):
        one_line(CliRunner().invoke(app, ["report", str(version)]), "report folder", "cannot write")
    assert not (version / "report").exists()


@pytest.mark.parametrize("how", ["self", "pair"])
def test_a_template_that_includes_itself_is_one_line_naming_the_file(tmp_path, how):
    root = tmp_path / "prompts"
    shutil.copytree(REPO / "prompts", root)
    ping = root / "gateway" / "ping.jinja"
    include = "gateway/ping.jinja" if how == "self" else "gateway/_loop.jinja"
    if how == "pair":
        (root / "gateway" / "_loop.jinja").write_text('{% include "gateway/ping.jinja" %}\n')
    source = ping.read_text()
    cut = source.rindex("{% endblock")
    ping.write_text(source[:cut] + f'{{% include "{include}" %}}' + source[cut:])  # inside the user block
    runner = CliRunner()
    checked = runner.invoke(app, ["prompts", "check", "--prompts-dir", str(root)])
    assert checked.exit_code == 1 and "Traceback" not in checked.output and "RecursionError" not in checked.output
    problems = [line for line in checked.output.splitlines() if "includes itself" in line]
    assert problems and all(".jinja:" in line and len(line) < 400 for line in problems), checked.output[-2000:]
    line = one_line(runner.invoke(app, ["prompts", "render", "gateway.ping", "--prompts-dir", str(root)]),
                    "includes itself")
    assert "ping.jinja" in line and len(line) < 400
    env = {"PERSONAGEN_PROMPTS": str(root)}
    line = one_line(runner.invoke(app, ["generate", "--n", "1", "--profile", "smoke", "--llm", "fake",
                                        "--outputs", str(tmp_path / "o")], env=env), "includes itself")
    assert "ping.jinja" in line


def test_a_slow_server_is_said_while_the_call_waits(tmp_path, monkeypatch):
    import pipeline.llm.transport as transport
    from pipeline.llm import LLM, listen_notices
    from schemas.llm import LLMSettings
    from tests.support.openai_server import OpenAIServer

    monkeypatch.setattr(transport, "HEARTBEAT_S", 0.2)
    heard: list[str] = []
    stop = listen_notices(heard.append)
    try:
        with OpenAIServer(latency_s=1.0, responder=lambda body: "fine") as server:
            monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
            llm = LLM(LLMSettings(llm="openai:test-model", cache_path=tmp_path / "c.sqlite"))
            reply = llm.chat([{"role": "user", "content": "hi"}])
            llm.close()
    finally:
        stop()
    assert reply.text == "fine"
    waits = [line for line in heard if "still waiting for the server's answer" in line]
    assert 2 <= len(waits) <= 6 and "gives up in" in waits[0], heard


def test_the_plans_measuring_calls_give_up_at_their_own_bound(tmp_path, monkeypatch):
    import pipeline.run.estimate as estimate
    from pipeline.config import load_config
    from pipeline.llm import LLM
    from pipeline.llm.errors import LLMError
    from schemas.llm import LLMSettings
    from tests.support.openai_server import OpenAIServer

    monkeypatch.setattr(estimate, "SETUP_CALL_S", 0.5)
    with OpenAIServer(latency_s=5.0) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        llm = LLM(LLMSettings(llm="openai:test-model", cache_path=tmp_path / "c.sqlite", backoff_s=0.01))
        with pytest.raises(LLMError, match=r"measuring calls' bound \(0.5 s\)"):  # not llm.call_timeout_s
            estimate.estimate_run(load_config("smoke", n_personas=1), llm, workers=1)
        llm.close()
    assert llm.setup_bound_s is None


@contextmanager
def _damaged_ping(tmp_path: Path, damage: str):
    """A fake gateway whose cached ping row was then changed by ``damage`` (SQL); yields (llm, the first
    answer, the row's key, the notices heard while the block runs)."""
    from pipeline.llm import LLM, listen_notices
    from pipeline.specs import PING
    from schemas.llm import LLMSettings

    llm = LLM(LLMSettings(llm="fake", cache_path=tmp_path / "c.sqlite"))
    first = llm.generate(PING, PING.sample_context())
    with sqlite3.connect(llm.cache.path) as db:
        db.execute(damage)
    heard: list[str] = []
    stop = listen_notices(heard.append)
    try:
        yield llm, first, llm.cache_key(PING, PING.sample_context()), heard
    finally:
        stop()
        llm.close()


def test_a_cached_row_with_text_where_a_number_belongs_is_a_miss_said_once(tmp_path):
    from pipeline.specs import PING

    damage = "UPDATE calls SET created_at = 'yesterday', latency_s = 'slow'"
    with _damaged_ping(tmp_path, damage) as (llm, first, key, heard):
        assert llm.cache.get(key) is None and llm.cache.recent("fake", llm.backend.model) == []
        assert llm.generate(PING, PING.sample_context()) == first  # asked again; the answer replaces the row
        assert llm.cache.get(key) is not None
    assert len([line for line in heard if "cached call is damaged" in line]) == 1, heard


def test_a_cached_reply_that_no_longer_parses_is_asked_again_and_says_the_cache_is_at_fault(tmp_path):
    from pipeline.specs import PING

    with _damaged_ping(tmp_path, "UPDATE calls SET output = '{\"bogus\": 1}'") as (llm, first, _, heard):
        assert llm.generate(PING, PING.sample_context()) == first
    assert any("cached reply of" in line and "does not parse as PingReply" in line for line in heard), heard


def test_a_full_disk_under_the_cache_is_named_not_the_server(tmp_path, monkeypatch):
    from pipeline.llm.cache import LLMCache
    from pipeline.run.spec import RunFailed
    from tests.support.smoke import publish_smoke

    def full(self, record):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(LLMCache, "_values", full)
    with pytest.raises(RunFailed) as failed:
        publish_smoke(tmp_path, n_personas=1)
    message = str(failed.value)
    assert "could not be stored" in message and "the disk under the cache is full" in message
    assert "server" not in message and "is cached" not in message
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("manifest.json"))


def test_an_export_that_fails_midway_leaves_no_file_of_it(tmp_path, monkeypatch):
    import errno

    import pipeline.dataset.export as export

    version = publish_tiny(tmp_path / "ds", n_personas=2)

    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(export, "write_csv", full)
    out = tmp_path / "pm"
    line = one_line(CliRunner().invoke(app, ["export", "personamem", str(version), "--out", str(out)]),
                    "No space left on device")
    assert "nothing was exported" in line
    assert not [p.name for p in out.iterdir() if not p.name.startswith(".personagen-out")]


def test_report_on_a_version_whose_turns_are_damaged_refuses_in_one_line(tmp_path):
    version = publish_tiny(tmp_path / "out", n_personas=2)
    turns = version / "turns.parquet"
    turns.chmod(0o644)
    with turns.open("r+b") as fh:
        fh.seek(100)
        fh.write(b"\0\0\0\0")
    one_line(CliRunner().invoke(app, ["report", str(version)]), "turns.parquet", "damaged")
    assert not (version / "report").exists()


def test_the_end_of_a_run_says_the_models_share_and_warns_when_code_wrote_most():
    from pipeline.cli.generate import origin_summary

    healthy = {"narrative": {"model": 50, "reasked": 5, "code": 0}, "item": {"model": 0, "reasked": 0, "code": 20}}
    line, warning = origin_summary(healthy)
    assert line == "model wrote: item 0%, narrative 100% (code the rest)" and warning is None
    junk = {"narrative": {"model": 2, "reasked": 0, "code": 48}, "question": {"model": 0, "reasked": 0, "code": 30}}
    line, warning = origin_summary(junk)
    assert "narrative 4%" in line and warning.startswith("warning: the model wrote only 2% ")
    assert origin_summary({}) == ("", None)


EXIT_HOOK = """
import atexit, sys, time
atexit.register(lambda: (print("hook started", flush=True), time.sleep(3), print("hook done", flush=True)))
from pipeline.cli.app import main
sys.argv = ["personagen", "prompts", "list"]
main()
"""


def test_ctrl_c_during_the_exit_hooks_is_not_heard(tmp_path):
    """After the command ended, Ctrl-C while an exit hook runs (Prefect's server stopping) leaves no
    "Exception ignored in atexit callback" traceback and the command's own exit status."""
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", EXIT_HOOK], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    for line in proc.stdout:
        if "hook started" in line:
            break
    for _ in range(3):
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.2)
    rest = proc.stdout.read()
    assert proc.wait(timeout=60) == 0, rest
    assert "hook done" in rest and "Traceback" not in rest and "Exception ignored" not in rest, rest


def _calls(cache: Path) -> int:
    try:
        with sqlite3.connect(f"file:{cache}?mode=ro", uri=True) as db:
            return db.execute("select count(*) from calls").fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_four_ctrl_c_in_a_row_end_in_one_line(tmp_path):
    """Ctrl-C pressed four times 0.2 s apart while the run works: the one line, then nothing more (Prefect's
    logging and exit hooks are not interrupted into tracebacks)."""
    import os
    import signal
    import sys
    import time

    from tests.support.procs import kill_group, start_in_group

    log = tmp_path / "run.log"
    args = [sys.executable, "-m", "pipeline.cli", "generate", "--profile", "smoke", "--n", "6", "--llm",
            "fake?latency_s=0.2", "--outputs", str(tmp_path / "out"), "--cache", str(tmp_path / "c.sqlite")]
    proc = start_in_group(args, log, env={**os.environ, "PREFECT_LOGGING_LEVEL": "ERROR"})
    try:
        deadline = time.monotonic() + 120
        while _calls(tmp_path / "c.sqlite") < 20 and time.monotonic() < deadline:  # the run is under way
            time.sleep(0.2)
        for _ in range(4):
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.2)
        code = proc.wait(timeout=120)
    finally:
        kill_group(proc)
    text = log.read_text(errors="replace")
    assert code in (130, -signal.SIGINT), text[-3000:]  # -2: a last press after Python's own handlers were gone
    assert text.count("error: interrupted") == 1 and "rerun the same command to continue" in text
    for noise in ("Traceback", "Logging error", "Exception ignored"):
        assert noise not in text, text[-3000:]
