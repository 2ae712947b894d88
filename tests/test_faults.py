"""Fault injection: a faulty model, kill -9 and resume, concurrent runs, a full or unwritable disk.

Each test checks the same promise: a run either publishes a complete, valid version with nothing
lost, or publishes nothing and says why in one line; the LLM cache survives either way.
"""

from __future__ import annotations

import collections
import errno
import json
import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import pipeline.dataset.publishing
import pipeline.llm.fake
from pipeline.config import load_config
from pipeline.dataset import load
from pipeline.dataset.validate import validate_tables
from pipeline.run.spec import RunSpec
from schemas.llm import LLMSettings
from schemas.tables import TABLES
from tests.support.procs import kill_group, start_in_group

REPO = Path(__file__).resolve().parents[1]
FAULTY = "fake?malformed_json=0.1&rate_limit=0.05&timeout=0.02&timeout=@7&truncation=0.02"  # @7: at least one timeout
TRANSPORT = ("rate_limit", "timeout")
CONTENT = ("malformed_json", "truncation")


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture
def injected(monkeypatch) -> collections.Counter:
    """Counts every reply of the fake backend by the fault it carried ('none' for a clean one)."""
    seen: collections.Counter = collections.Counter()
    original = pipeline.llm.fake._apply

    async def counting(fault, text, request):
        seen[fault.kind if fault else "none"] += 1
        return await original(fault, text, request)

    monkeypatch.setattr(pipeline.llm.fake, "_apply", counting)
    return seen


def spec_for(root: Path, llm: str, *, n: int = 2, reask: int = 2) -> RunSpec:
    """A smoke run with short timeouts and backoff, so injected timeouts cost little; budgets of 1,500 and
    3,000 tokens and model-written filler (more filler calls than smoke's own) so that every fault rate is hit."""
    settings = LLMSettings(llm=llm, cache_path=root / "cache" / "llm.sqlite", timeout_s=0.3, backoff_s=0.01,
                           backoff_max_s=0.05, reask=reask)
    config = load_config("smoke", n_personas=n, seed=11)
    config = config.model_copy(update={"assembly": config.assembly.model_copy(update={"budgets": [1500, 3000]}),
                                       "filler": config.filler.model_copy(update={"source": "llm"}),  # model calls
                                       "text": config.text.model_copy(update={"writing": "exchange"})})
    return RunSpec(config=config, llm=settings, outputs=root / "out")


def table_bytes(version: Path) -> dict[str, bytes]:
    return {name: (version / f"{name}.parquet").read_bytes() for name in TABLES}


def manifest(version: Path) -> dict:
    return json.loads((version / "manifest.json").read_text(encoding="utf-8"))


def assert_valid(version: Path) -> None:
    """The version loads as typed rows and passes every cross-table check again."""
    ds = load(version)
    tables = {name: getattr(ds, name) for name in TABLES}
    config = load_config("smoke")
    report = validate_tables(tables, period_order=[p.name for p in config.periods],
                             tolerance=config.assembly.tolerance)
    assert report.ok, report.errors[:3]
    assert manifest(version)["validation"]["ok"]


def test_faulty_model_run_publishes_every_row(harness, injected, tmp_path):
    """10% malformed, 5% 429, 2% timeouts (and call 7), 2% truncated: same tables as a clean run, every fault accounted."""
    from flows.generate import run_generate

    # six re-asks: with 12% content faults a call fails all three asks of the default about once in 600 calls, so
    # some data (its request keys seed the fault draw) would fail a call and change a table by chance
    clean = run_generate(spec_for(tmp_path / "clean", "fake", reask=6), workers=2)
    injected.clear()
    faulty = run_generate(spec_for(tmp_path / "faulty", FAULTY, reask=6), workers=2)
    assert_valid(faulty)
    usage = manifest(faulty)["usage"]["total"]
    faults = sum(injected[k] for k in (*TRANSPORT, *CONTENT))
    assert injected["malformed_json"] and injected["rate_limit"] and injected["timeout"] and injected["truncation"]
    assert usage["backend_calls"] == injected["none"] + faults
    assert usage["retries"] == sum(injected[k] for k in TRANSPORT)
    assert usage["reasks"] == sum(injected[k] for k in CONTENT)
    assert usage["failures"] == 0 and manifest(faulty)["failures"] == []
    lost = {n: c - manifest(faulty)["counts"][n] for n, c in manifest(clean)["counts"].items()}
    assert set(lost.values()) == {0}
    assert table_bytes(faulty) == table_bytes(clean)
    print(f"\nfault run: {usage['backend_calls']} requests, {faults} faults {dict(injected)}, "
          f"{usage['retries']} retries, {usage['reasks']} re-asks, "
          f"{sum(manifest(faulty)['counts'].values())} rows published, {sum(lost.values())} lost")


def test_loopback_server_faults_are_retried(harness, tmp_path, monkeypatch):
    """The OpenAI path: 429 with Retry-After, 500, non-JSON, finish_reason=length and a hung reply all recover."""
    from flows.generate import run_generate
    from tests.support.openai_server import OpenAIServer

    with OpenAIServer(retry_after_s=0.05, slow_s=2.0) as server:
        for index, fault in enumerate(["rate_limit", "server_error", "malformed", "length", "slow"] * 4):
            server.schedule(3 + 4 * index, fault)  # all 20 within the first 80 of the ~100 requests of one persona
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        spec = spec_for(tmp_path, "openai:test-model", n=1)
        # 1 s still times out the 2 s hung replies; 0.3 s also timed out healthy replies on a loaded machine,
        # and a call out of retries failed the run
        spec = spec.model_copy(update={"llm": spec.llm.model_copy(update={"timeout_s": 1.0})})
        version = run_generate(spec, workers=2)
        requests = server.requests
    assert_valid(version)
    usage = manifest(version)["usage"]["total"]
    assert usage["backend_calls"] == requests
    assert usage["retries"] >= 12  # the 429s, 500s and hung replies
    assert usage["reasks"] >= 8  # the non-JSON and truncated replies


def run_cli(tmp: Path, *args: str) -> Result:
    """`personagen generate` in-process (smoke, fake model) into tmp/out with the cache in tmp/cache."""
    base = ["generate", "--profile", "smoke", "--n", "2", "--seed", "11", "--llm", "fake", "--workers", "2",
            "--outputs", str(tmp / "out"), "--cache", str(tmp / "cache" / "llm.sqlite")]
    from pipeline.cli.app import app

    return CliRunner().invoke(app, [*base, *args])


def cache_rows(cache: Path) -> list[tuple]:
    """Every stored call (key, status), after an integrity check of the SQLite file."""
    with sqlite3.connect(cache) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return sorted(db.execute("SELECT key, status FROM calls").fetchall())


def test_disk_full_while_publishing_publishes_nothing(harness, tmp_path, monkeypatch):
    """ENOSPC on the 6th table: one error line, no v0002, latest unchanged, no staging left, cache intact."""
    first = run_cli(tmp_path)
    assert first.exit_code == 0, first.output[-2000:]
    dataset = tmp_path / "out" / "smoke"
    rows = cache_rows(tmp_path / "cache" / "llm.sqlite")
    written = []
    real_write = pipeline.dataset.publishing.write_table

    def filling_disk(directory, name, table_rows):
        written.append(name)
        if len(written) == 6:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory / f"{name}.parquet"))
        return real_write(directory, name, table_rows)

    monkeypatch.setattr(pipeline.dataset.publishing, "write_table", filling_disk)
    full = run_cli(tmp_path)
    errors = [line for line in full.stderr.splitlines() if line.startswith("error:")]
    assert full.exit_code == 2 and len(errors) == 1 and full.stderr.strip().splitlines()[-1] == errors[0]
    assert "No space left on device" in errors[0] and "nothing published" in errors[0]
    assert sorted(p.name for p in dataset.iterdir()) == [".lock", "latest", "v0001"]
    assert os.readlink(dataset / "latest") == "v0001"
    assert cache_rows(tmp_path / "cache" / "llm.sqlite") == rows
    monkeypatch.setattr(pipeline.dataset.publishing, "write_table", real_write)
    again = run_cli(tmp_path)
    assert again.exit_code == 0, again.output[-2000:]
    assert manifest(dataset / "v0002")["usage"]["total"]["backend_calls"] == 0
    assert table_bytes(dataset / "v0002") == table_bytes(dataset / "v0001")


def test_unwritable_outputs_fail_before_any_model_call(tmp_path):
    """Outputs under a regular file: the preflight says so in one line; no cache, no model call."""
    (tmp_path / "blocker").write_text("not a folder")
    from pipeline.cli.app import app

    result = CliRunner().invoke(app, ["generate", "--profile", "smoke", "--llm", "fake",
                                      "--outputs", str(tmp_path / "blocker" / "out"),
                                      "--cache", str(tmp_path / "cache" / "llm.sqlite")])
    (line,) = result.stderr.strip().splitlines()
    target = tmp_path / "blocker" / "out" / "smoke"
    assert result.exit_code == 2 and line.startswith(f"error: {target}: outputs folder is not writable (Not a directory")
    assert not (tmp_path / "cache").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through read-only permissions")
def test_read_only_dataset_folder_fails_up_front(tmp_path):
    """A dataset folder without write permission: one error line, latest unchanged."""
    dataset = tmp_path / "out" / "smoke"
    dataset.mkdir(parents=True)
    dataset.chmod(0o555)
    try:
        from pipeline.cli.app import app

        result = CliRunner().invoke(app, ["generate", "--profile", "smoke", "--llm", "fake",
                                          "--outputs", str(tmp_path / "out"),
                                          "--cache", str(tmp_path / "cache" / "llm.sqlite")])
    finally:
        dataset.chmod(0o755)
    (line,) = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and line.startswith(f"error: {dataset}: outputs folder is not writable (Permission")
    assert list(dataset.iterdir()) == []


# -- subprocess runs: kill -9 and concurrency -----------------------------------------------------

CLI = [sys.executable, "-m", "pipeline.cli", "generate", "--profile", "smoke", "--n", "2", "--seed", "5",
       "--workers", "2"]
ENV = {**os.environ, "PREFECT_LOGGING_LEVEL": "ERROR"}


def start_cli(root: Path, llm: str, log: Path) -> subprocess.Popen:
    """The CLI in its own process group, output to `log`."""
    args = [*CLI, "--llm", llm, "--outputs", str(root / "out"), "--cache", str(root / "cache" / "llm.sqlite")]
    return start_in_group(args, log, env=ENV)


def finish(proc: subprocess.Popen) -> int:
    """Wait for the CLI, then kill what its group left behind (Prefect's temporary server)."""
    try:
        return proc.wait(timeout=600)
    finally:
        kill_group(proc)


def ok_keys(root: Path) -> set[str]:
    with sqlite3.connect(root / "cache" / "llm.sqlite") as db:
        return {k for (k,) in db.execute("SELECT key FROM calls WHERE status = 'ok'")}


@pytest.mark.slow
def test_five_kills_then_resume_equals_an_uninterrupted_run(tmp_path):
    """kill -9 at 5 seeded points, rerunning each time: same tables, and no completed request sent twice."""
    rng = random.Random(9)
    points = [rng.randint(3, 6) for _ in range(5)]  # at most 30 of the 32 calls of one smoke run (any 4: 24)
    killed = tmp_path / "killed"
    committed = 0
    for i, k in enumerate(points):
        before = ok_keys(killed) if (killed / "cache").exists() else set()
        code = finish(start_cli(killed, f"fake?exit_after={k}", tmp_path / f"kill{i}.log"))
        assert code == 137, (tmp_path / f"kill{i}.log").read_text()[-2000:]
        done = len(ok_keys(killed) - before)
        assert 0 <= k - done <= 8 * 2  # only requests in flight at the kill are lost (concurrency x workers)
        committed += done
        print(f"kill {i}: at call {k}, {done} calls completed, {k - done} in flight lost")
    assert finish(start_cli(killed, "fake", tmp_path / "resume.log")) == 0, (tmp_path / "resume.log").read_text()
    assert finish(start_cli(tmp_path / "whole", "fake", tmp_path / "whole.log")) == 0
    (resumed,) = (killed / "out" / "smoke").glob("v0*")
    (whole,) = (tmp_path / "whole" / "out" / "smoke").glob("v0*")
    assert table_bytes(resumed) == table_bytes(whole)
    assert ok_keys(killed) == ok_keys(tmp_path / "whole")
    assert committed + manifest(resumed)["usage"]["total"]["backend_calls"] == len(ok_keys(killed))
    assert_valid(resumed)


@pytest.mark.slow
def test_two_runs_into_one_outputs_root_publish_two_versions(tmp_path):
    """Two `generate` processes at once, sharing outputs and cache: v0001 and v0002, both valid and complete."""
    procs = [start_cli(tmp_path, "fake", tmp_path / f"run{i}.log") for i in range(2)]
    codes = [finish(p) for p in procs]
    assert codes == [0, 0], [(tmp_path / f"run{i}.log").read_text()[-2000:] for i in range(2)]
    dataset = tmp_path / "out" / "smoke"
    assert sorted(p.name for p in dataset.glob("v0*")) == ["v0001", "v0002"]
    assert os.readlink(dataset / "latest") == "v0002"
    assert not list(dataset.glob(".staging-*"))
    for version in ("v0001", "v0002"):
        assert_valid(dataset / version)
    assert table_bytes(dataset / "v0001") == table_bytes(dataset / "v0002")


# -- cache files that cannot be used, and what a failed or dry run leaves behind ---------------------


def _damaged_cache(path: Path) -> None:
    """A real cache of 300 calls with two pages in the middle overwritten."""
    from pipeline.llm.cache import CallRecord, LLMCache

    cache = LLMCache(path)
    for i in range(300):
        cache.put(CallRecord(key=f"k{i}", status="ok", spec="s", provider="p", model="m", request="x" * 500,
                             raw="y" * 800))
    cache.close()
    with path.open("r+b") as fh:
        fh.seek(path.stat().st_size // 2 // 4096 * 4096)
        fh.write(random.Random(3).randbytes(8192))


CACHE_CASES = {
    "folder": (lambda p: p.mkdir(), "cannot open the LLM cache (unable to open database file"),
    "random bytes": (lambda p: p.write_bytes(random.Random(1).randbytes(4096)), "file is not a database"),
    "another database": (lambda p: sqlite3.connect(p).execute("CREATE TABLE t (x)").connection.close(),
                         "not an LLM cache (another database: tables t)"),
    "damaged pages": (_damaged_cache, "damaged"),
}


@pytest.mark.parametrize("command", ["generate", "eval"])
@pytest.mark.parametrize("case", sorted(CACHE_CASES))
def test_an_unusable_cache_file_is_one_line(tmp_path, case, command):
    """A cache path that is a folder, random bytes, another program's database, or damaged: exit 2, one line."""
    make, message = CACHE_CASES[case]
    cache = tmp_path / "g.sqlite"
    make(cache)
    from pipeline.cli.app import app

    args = (["generate", "--profile", "smoke", "--n", "2", "--llm", "fake", "--outputs", str(tmp_path / "out")]
            if command == "generate" else ["eval", "smoke", "--llm", "fake", "--outputs", str(tmp_path / "out")])
    result = CliRunner().invoke(app, [*args, "--cache", str(cache)])
    (line,) = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and line.startswith(f"error: {cache}: ") and message in line, result.output
    assert not (tmp_path / "out").exists()
    if case == "another database":
        assert [n for (n,) in sqlite3.connect(cache).execute("SELECT name FROM sqlite_master")] == ["t"]


def test_a_latest_folder_fails_before_any_model_call(tmp_path):
    """`<dataset>/latest` as a real folder: one line before any call; no version, no stray link, no cache."""
    latest = tmp_path / "out" / "smoke" / "latest"
    latest.mkdir(parents=True)
    result = run_cli(tmp_path)
    (line,) = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and line == (f"error: {latest}: expected a link to the newest version, found a "
                                              "folder; move it aside, nothing published")
    assert sorted(p.name for p in latest.parent.iterdir()) == ["latest"]
    assert not (tmp_path / "cache").exists()


def test_a_failed_or_dry_run_leaves_no_empty_folder_and_the_cache_lives_under_outputs(tmp_path):
    """A dry run with the default cache: the cache (the speed probe's calls) under --outputs, no dataset folder;
    a run failing at the preflight of its backend leaves nothing at all."""
    from pipeline.cli.app import app

    out = tmp_path / "out"
    dry = CliRunner().invoke(app, ["generate", "--profile", "smoke", "--llm", "fake", "--outputs", str(out),
                                   "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if not p.name.endswith(("-wal", "-shm"))) == [
        ".cache", ".cache/llm.sqlite"]
    failed = CliRunner().invoke(app, ["generate", "--profile", "smoke", "--llm", "openai:gpt-4o-mini",
                                      "--outputs", str(tmp_path / "other")], env={"OPENAI_API_KEY": ""})
    assert failed.exit_code == 2 and not (tmp_path / "other").exists(), failed.output


def test_ctrl_c_while_planning_or_after_the_publish_is_one_line(tmp_path, monkeypatch):
    """Ctrl-C during the plan's estimate, or while the summary prints after the publish: exit 130, one line
    saying which (no click "Aborted!", no traceback)."""
    import pipeline.cli.generate
    import pipeline.run.estimate

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline.run.estimate, "estimate_run", interrupt)
    planning = run_cli(tmp_path)
    assert planning.exit_code == 130 and planning.stderr.strip().splitlines() == [
        "error: interrupted before the run started; nothing published"], planning.output
    assert "Aborted" not in planning.output
    monkeypatch.undo()
    published = tmp_path / "out" / "smoke" / "v0001"
    monkeypatch.setattr(pipeline.cli.generate, "_run", lambda spec, **kwargs: published)
    monkeypatch.setattr(pipeline.cli.generate, "_summary", interrupt)
    after = run_cli(tmp_path)
    assert after.exit_code == 130 and after.stderr.strip().splitlines() == [
        f"error: interrupted after publishing {published} (the version is complete)"], after.output


@pytest.mark.slow
def test_two_runs_with_keep_do_not_prune_each_others_new_version(tmp_path):
    """Two `generate --keep 1` at once: both exit 0 without a traceback, and neither prunes the version the
    other is still publishing and summarizing (at most one old version is left for the next run's retention)."""
    args = [*CLI, "--llm", "fake", "--keep", "1", "--outputs", str(tmp_path / "out"),
            "--cache", str(tmp_path / "cache" / "llm.sqlite")]
    procs = [start_in_group(args, tmp_path / f"run{i}.log", env=ENV) for i in range(2)]
    codes = [finish(p) for p in procs]
    logs = [(tmp_path / f"run{i}.log").read_text() for i in range(2)]
    assert codes == [0, 0] and not [log for log in logs if "Traceback" in log], [log[-2000:] for log in logs]
    dataset = tmp_path / "out" / "smoke"
    names = sorted(p.name for p in dataset.glob("v0*"))
    assert names in (["v0002"], ["v0001", "v0002"]) and os.readlink(dataset / "latest") == "v0002"
    for name in names:
        assert_valid(dataset / name)


def unanswered_spec(root: Path, llm: str, **llm_updates) -> RunSpec:
    """A one-persona smoke run whose calls get one try and no backoff."""
    spec = spec_for(root, llm, n=1)
    return spec.model_copy(update={"llm": spec.llm.model_copy(update={"max_retries": 0, "backoff_s": 0,
                                                                      **llm_updates})})


def test_gateway_counts_transport_failures_apart_from_content_rejections(tmp_path):
    from pipeline.llm import LLM, CallFailed
    from pipeline.specs import ALL_SPECS
    from schemas.llm import PingContext

    spec, context = ALL_SPECS["gateway.ping"], PingContext(persona="a nurse", topic="books")
    for backend, transport in (("fake?malformed_json=1.0", 0), ("fake?server_error=1.0", 1)):
        llm = LLM(LLMSettings(llm=backend, cache_path=tmp_path / f"{transport}.sqlite", max_retries=0, reask=0,
                              backoff_s=0))
        with pytest.raises(CallFailed):
            llm.generate(spec, context)
        total = llm.usage_summary().total
        assert (total.failures, total.transport_failures) == (1, transport), backend
        llm.close()
    llm = LLM(LLMSettings(llm="fake", cache_path=tmp_path / "empty.sqlite", cache_only=True))
    with pytest.raises(CallFailed.__mro__[1]):  # CacheMiss is an LLMError
        llm.generate(spec, context)
    assert llm.usage_summary().total.transport_failures == 1  # a cache-only miss is an unanswered call
    llm.close()


def test_a_server_failing_calls_fails_closed_publishes_nothing_and_a_rerun_resumes(harness, tmp_path):
    from flows.generate import run_generate
    from pipeline.run.spec import RunFailed

    with pytest.raises(RunFailed) as failed:
        run_generate(unanswered_spec(tmp_path, "fake?server_error=0.3"), workers=2)
    line = str(failed.value)
    assert "model calls got no answer" in line and "nothing published" in line and "rerun" in line
    assert "\n" not in line
    assert not list((tmp_path / "out").glob("*/v0*")) and not list((tmp_path / "out").glob("*/latest"))
    assert not list((tmp_path / "cache" / "personas").rglob("*.json"))  # no persona checkpointed: all asked again
    assert any(status == "ok" for _, status in cache_rows(tmp_path / "cache" / "llm.sqlite"))
    version = run_generate(unanswered_spec(tmp_path, "fake"), workers=2)
    usage = manifest(version)["usage"]["total"]
    # the answered calls are not asked again (those after a failed one differ: code text stood in before them)
    assert usage["transport_failures"] == 0 and usage["cache_hits"] > 0


def test_a_few_unanswered_calls_publish_and_the_card_says_how_many(harness, tmp_path):
    from flows.generate import run_generate

    version = run_generate(unanswered_spec(tmp_path, "fake?server_error=0.3", max_failed_share=1.0), workers=2)
    usage = manifest(version)["usage"]["total"]
    assert usage["transport_failures"] > 0
    card = (version / "README.md").read_text(encoding="utf-8")
    assert f"| {usage['transport_failures']} of {usage['calls']} |" in card


def test_cache_only_on_another_seeds_cache_fails_closed(harness, tmp_path):
    from flows.generate import run_generate
    from pipeline.run.spec import RunFailed

    with pytest.raises(RunFailed, match=r"no cached reply \(--cache-only\)"):
        run_generate(unanswered_spec(tmp_path, "fake", cache_only=True), workers=2)
    assert not list((tmp_path / "out").glob("*/v0*"))


def test_a_loopback_server_dying_after_4_calls_fails_closed(harness, tmp_path, monkeypatch):
    """`ok*4,503`: the OpenAI path, every chat request after the fourth answered HTTP 500."""
    from flows.generate import run_generate
    from pipeline.run.spec import RunFailed
    from tests.support.openai_server import OpenAIServer

    with OpenAIServer() as server:
        for index in range(4, 3000):
            server.schedule(index, "server_error")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-loopback")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        with pytest.raises(RunFailed, match="model calls got no answer: the server did not answer"):
            run_generate(unanswered_spec(tmp_path, "openai:test-model", max_retries=1), workers=2)
        assert server.requests > 4
    assert not list((tmp_path / "out").glob("*/v0*"))


def test_ctrl_c_right_after_the_rename_says_the_version_is_complete(tmp_path, monkeypatch):
    """Interrupted after the version was renamed into place (before `latest` moved): not "rerun to continue"."""
    import flows.generate
    import pipeline.dataset.publishing as publishing
    from tests.support.smoke import publish_smoke

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(publishing, "_point_latest", interrupt)
    with pytest.raises(KeyboardInterrupt):
        publish_smoke(tmp_path / "real")
    version = publishing.PUBLISHED[-1]
    assert version.name == "v0001" and (version / "manifest.json").is_file()

    def publish_then_interrupt(spec, **kwargs):
        publishing.PUBLISHED.append(version)
        raise KeyboardInterrupt

    monkeypatch.setattr(flows.generate, "run_generate", publish_then_interrupt)
    result = run_cli(tmp_path)
    assert result.exit_code == 130 and result.stderr.strip().splitlines() == [
        f"error: interrupted after publishing {version} (the version is complete; a rerun would publish another)"]


def test_the_load_commands_run_as_printed_when_the_path_holds_quotes_and_spaces(tmp_path):
    """Every printed "Load it with" line runs in a shell as printed, for a path with a space and both quotes."""
    import shlex

    from pipeline.cli.generate import load_commands
    from tests.support.smoke import publish_smoke

    version = publish_smoke(tmp_path / "it's a \"quoted\" dir")
    lines = [line.strip() for line in load_commands(version).splitlines()[1:]]
    assert len(lines) == 3
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    venv_personagen = shlex.quote(str(Path(sys.executable).parent / "personagen"))
    for line in lines:  # personagen's own python and command: a fresh shell has neither on its PATH
        assert line.startswith((f"{shlex.quote(sys.executable)} -c ", f"{venv_personagen} export "))
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
        assert done.returncode == 0, (line, done.stderr[-2000:])
    assert (version.parent / "personamem_format").is_dir()


def dead_pid() -> int:
    """The pid of a process that has ended."""
    done = subprocess.run(["true"], check=True)
    del done
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_leftovers_of_killed_runs_are_swept_at_the_next_start_and_live_ones_kept(tmp_path, monkeypatch):
    import pipeline.run.estimate

    pid = dead_pid()
    dataset, personas = tmp_path / "out" / "smoke", tmp_path / "cache" / "personas"
    dead = [dataset / f".staging-publish-{pid}-deadbeef", dataset / ".trash-v0001-0123abcd"]
    live = dataset / ".staging-publish-1-cafebabe"  # pid 1 is always running
    for folder in (*dead, live):
        folder.mkdir(parents=True)
        (folder / "turns.parquet").write_bytes(b"x" * 100)
    personas.mkdir(parents=True)
    stale = personas / f"abc.{pid}-0123abcd.tmp"
    stale.write_bytes(b"")
    target = planted_folder = tmp_path / "a user's folder"
    planted_folder.mkdir()
    (planted_folder / "thesis.txt").write_text("mine")
    (dataset / ".trash-v0002-89abcdef").symlink_to(target)  # a link moved aside: removed, never followed

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline.run.estimate, "estimate_run", interrupt)
    result = run_cli(tmp_path)
    assert result.exit_code == 130, result.output
    assert not any(p.exists() for p in dead) and not stale.exists() and live.is_dir()
    assert not (dataset / ".trash-v0002-89abcdef").is_symlink() and (target / "thesis.txt").read_text() == "mine"


def test_an_interrupted_plan_leaves_no_empty_cache(tmp_path, monkeypatch):
    import pipeline.run.estimate

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline.run.estimate, "estimate_run", interrupt)
    assert run_cli(tmp_path).exit_code == 130
    assert not (tmp_path / "cache").exists()


def test_a_killed_exports_temporary_file_is_swept_and_a_full_disk_leaves_no_checkpoint_tmp(tmp_path, monkeypatch):
    from pipeline.dataset.files import write_jsonl
    from pipeline.run.checkpoint import Checkpoints

    stale = tmp_path / f".all.jsonl.{dead_pid()}-0123abcd.tmp"
    stale.write_bytes(b"x" * 1000)
    other = tmp_path / ".notes.txt.12-0123abcd.tmp"  # not this export's: left alone
    other.write_bytes(b"")
    write_jsonl(tmp_path / "all.jsonl", [{"a": 1}])
    assert not stale.exists() and other.exists()

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError):
        Checkpoints._write(tmp_path / "ck" / "p.json", "{}")
    assert list((tmp_path / "ck").iterdir()) == []
