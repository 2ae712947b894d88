"""Persona tasks on Dask workers that share no disk with the driver: the job carries everything, the reply brings
everything back, the driver alone writes; shipped calls make a rerun repeat none; honest errors."""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path

import pytest

from pipeline.config import load_config
from pipeline.errors import UserError
from pipeline.llm.cache import CallRecord, LLMCache
from pipeline.run import cluster, remote
from pipeline.run.cluster import DaskSettings, Driver, NoWorkers, WorkerFailed, open_pool, remote_personas
from pipeline.run.jobs import persona_job, persona_tag
from pipeline.run.remote import WorkerReply, run_job, unpack, work
from pipeline.run.spec import RunSpec, fingerprint, model_name
from pipeline.s1_personas.sample_personas import sample_personas
from schemas.llm import LLMSettings

QUERY_TEMPLATE = "generate_queries/query.jinja"
MARK = "Word the question plainly."


def _spec(tmp: Path, llm: str = "fake") -> RunSpec:
    config = load_config("smoke", n_personas=2, seed=11)
    return RunSpec(config=config, llm=LLMSettings(llm=llm, cache_path=tmp / "out" / ".cache" / "llm.sqlite",
                                                  backoff_s=0), outputs=tmp / "out")


def _seeds(spec: RunSpec):
    return sample_personas(spec.config.n_personas, run_seed=spec.config.seed, settings=spec.config.personas)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_a_worker_gets_everything_in_its_job_and_a_rerun_with_the_shipped_calls_makes_none(tmp_path):
    spec = _spec(tmp_path)
    seed = _seeds(spec)[0]
    driver = Driver(spec)
    job = driver.job(seed)
    before = _files(spec.outputs)
    job.templates[QUERY_TEMPLATE] = job.templates[QUERY_TEMPLATE].replace(
        "{% block system %}", "{% block system %}\n" + MARK, 1)
    reply = work(job)
    assert reply.error is None and reply.result is not None
    assert _files(spec.outputs) == before  # the worker wrote nothing of the driver's: no cache row, no checkpoint
    calls = reply.usage.total.backend_calls
    assert calls > 0 and len([r for r in reply.rows if r.status == "ok"]) == calls
    assert {r.tag for r in reply.rows} == {persona_tag(seed, model_name(spec.llm))}
    assert any(MARK in r.request for r in reply.rows)  # rendered from the job's templates, not the local folder
    job_result = driver.receive(seed, reply)
    assert driver.cache.count("ok") == calls
    assert spec.checkpoints.load(seed, fingerprint(spec, model_name(spec.llm))) == job_result.result
    again = driver.job(seed)
    again.templates, again.fingerprints = job.templates, job.fingerprints
    assert len(again.rows) == calls
    rerun = work(again)
    assert rerun.usage.total.backend_calls == 0 and rerun.usage.total.cache_hits == calls
    assert rerun.result == reply.result and rerun.rows == []


def test_a_worker_that_cannot_load_the_backend_fails_in_one_line_naming_it(tmp_path):
    spec = _spec(tmp_path, llm=f"local:{tmp_path / 'absent.gguf'}")
    driver = Driver(spec)
    seed = _seeds(spec)[0]
    reply = work(driver.job(seed))
    assert reply.result is None and not reply.retry
    assert reply.error.startswith(f"worker {remote.worker_name()}: ") and "absent.gguf" in reply.error
    assert "\n" not in reply.error
    failed = driver.receive(seed, reply)
    assert isinstance(failed, WorkerFailed) and str(failed) == reply.error
    assert not spec.checkpoints.root.exists()


def test_a_worker_with_other_code_refuses_the_job(tmp_path):
    spec = _spec(tmp_path)
    job = Driver(spec).job(_seeds(spec)[0])
    reply = work(job.model_copy(update={"code": "0" * 64}))
    assert reply.result is None and "code differs from the driver's" in reply.error and not reply.retry
    newer = json.loads(job.model_dump_json())  # a newer driver's job, which this version cannot even read
    newer["code"], newer["spec"]["config"]["a_newer_setting"] = "0" * 64, 1
    reply = unpack(run_job(zlib.compress(json.dumps(newer).encode())), WorkerReply)
    assert reply.result is None and "code differs from the driver's" in reply.error


def test_a_worker_without_personagen_is_named_as_such(tmp_path, local_cluster, monkeypatch):
    def unloadable(payload: bytes) -> bytes:
        raise ModuleNotFoundError("No module named 'pipeline'")

    monkeypatch.setattr(cluster, "run_job", unloadable)
    spec = _spec(tmp_path)
    with open_pool(DaskSettings(address=local_cluster.scheduler_address, workers=1), print) as pool:
        outcomes = [outcome for _, outcome in remote_personas(pool, _seeds(spec), spec)]
    assert [str(o) for o in outcomes] == ["a Dask worker cannot import personagen (No module named 'pipeline'): "
                                          "install it on every worker"] * 2


def test_thread_runs_tag_their_calls_so_a_dask_rerun_can_ship_them(tmp_path):
    spec = _spec(tmp_path)
    seed = _seeds(spec)[0]
    job = persona_job(seed, spec)
    cache = LLMCache(spec.llm.cache_path)
    tagged = cache.tagged(persona_tag(seed, model_name(spec.llm)))
    assert len(tagged) == job.usage.total.backend_calls > 0


def test_a_cache_from_before_the_tag_column_gets_it_on_open(tmp_path):
    path = tmp_path / "old.sqlite"
    columns = [name for name in CallRecord.model_fields if name != "tag"]
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TABLE calls ({', '.join(columns)}, PRIMARY KEY (key))")
        db.execute(f"INSERT INTO calls ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
                   ("k1", "ok", "s", "fake", "fake", "[]", "{}", "{}", "stop", 1, 1, 0.1, 1, None, 1.0))
    cache = LLMCache(path, tag="p1")
    assert cache.get("k1").output == "{}" and cache.get("k1").tag is None
    cache.put(CallRecord(key="k2", status="ok", spec="s", provider="fake", model="fake", request="[]", output="{}"))
    assert [r.key for r in cache.tagged("p1")] == ["k2"]


@pytest.fixture
def local_cluster():
    import distributed

    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as c:
        yield c


def test_a_persona_whose_task_failed_is_tried_again_with_the_calls_it_answered(tmp_path, local_cluster, monkeypatch):
    spec = _spec(tmp_path)
    real, failed = remote.make_persona, []

    def flaky(seed, spec, llm):
        if not failed:
            real(seed, spec, llm)  # every call made and kept in the task's cache, then the task fails
            failed.append(seed.index)
            raise RuntimeError("the disk filled up")
        return real(seed, spec, llm)

    monkeypatch.setattr(remote, "make_persona", flaky)
    settings = DaskSettings(address=local_cluster.scheduler_address, workers=1)
    notes = []
    with open_pool(settings, notes.append) as pool:
        outcomes = {seed.index: (seed, outcome) for seed, outcome in remote_personas(pool, _seeds(spec), spec)}
        stats = pool.stats()
    assert failed and sorted(outcomes) == [0, 1]
    assert all(not isinstance(outcome, Exception) for _, outcome in outcomes.values())
    seed, retried = outcomes[failed[0]]
    assert retried.usage.total.backend_calls == 0  # the retry was shipped every call its failed attempt made
    tagged = LLMCache(spec.llm.cache_path).tagged(persona_tag(seed, model_name(spec.llm)))
    assert len(tagged) == retried.usage.total.cache_hits > 0
    assert stats["tasks"] == 3 and stats["bytes_to_workers"] > 0 and stats["bytes_from_workers"] > 0
    assert "1 workers (1 threads)" in notes[0]
    key = fingerprint(spec, model_name(spec.llm))
    assert all(spec.checkpoints.load(seed, key) is not None for seed, _ in outcomes.values())


def test_no_worker_says_so_then_fails_in_one_line(tmp_path):
    import distributed

    spec = _spec(tmp_path)
    notes = []
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        settings = DaskSettings(address=cluster.scheduler_address, timeout_s=2)
        with open_pool(settings, notes.append) as pool, pytest.raises(NoWorkers) as raised:
            list(remote_personas(pool, _seeds(spec), spec))
    assert "0 workers" in notes[0]
    assert "no Dask worker has taken a task" in notes[1]
    assert str(raised.value) == (f"no Dask worker took a task within 2 s ({cluster.scheduler_address}: 0 workers "
                                 "connected); nothing published")
    assert not spec.checkpoints.root.exists()


def test_an_unreachable_scheduler_is_one_line(tmp_path):
    settings = DaskSettings(address="tcp://127.0.0.1:9", timeout_s=1)
    with pytest.raises(UserError) as raised, open_pool(settings, print):
        pass
    assert str(raised.value).startswith("cannot reach the Dask scheduler at tcp://127.0.0.1:9 (")
    assert "\n" not in str(raised.value)
