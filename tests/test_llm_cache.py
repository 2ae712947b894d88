"""The content-addressed cache: what changes the key, failure rows, multi-process writers, kill -9 resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from pydantic import BaseModel

from pipeline.llm import LLM
from pipeline.llm.cache import CallRecord, LLMCache
from pipeline.llm.fake import FakeBackend
from pipeline.prompting import PromptSpec
from tests.support.llm_helpers import SPEC, TEMPLATE, TopicContext, fake_llm, settings, write_prompts

ADA = TopicContext(name="Ada", topic="tea")
REPO = Path(__file__).resolve().parents[1]


def _key(tmp_path: Path, template: str = TEMPLATE, spec: PromptSpec = SPEC, sample_index: int = 0,
         **overrides) -> str:
    llm = LLM(settings(tmp_path, **overrides), backend=FakeBackend(),
              prompts=write_prompts(tmp_path / "prompts", template))
    return llm.cache_key(spec, ADA, sample_index=sample_index)


def test_key_changes_with_template_schema_sample_and_sampling(tmp_path):
    base = _key(tmp_path)
    assert _key(tmp_path) == base
    assert _key(tmp_path, TEMPLATE.replace("You help", "You assist")) != base
    assert _key(tmp_path, TEMPLATE + "{# a comment #}\n") != base

    class OtherNote(BaseModel):
        title: str
        score: float

    assert _key(tmp_path, spec=PromptSpec("test.topic", "test/topic.jinja", TopicContext, OtherNote)) != base
    assert _key(tmp_path, sample_index=1) != base
    assert _key(tmp_path, temperature=0.1) != base
    assert _key(tmp_path, seed=5) != base


def test_key_ignores_operational_settings(tmp_path, monkeypatch):
    base = _key(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    assert _key(tmp_path, timeout_s=5, max_concurrency=1, rpm=10, tpm=1000, max_retries=0, reask=0,
                cache_path=tmp_path / "other.sqlite", backoff_s=3) == base


def test_template_edit_reruns_only_the_calls_that_used_it(tmp_path):
    other = PromptSpec("test.other", "test/other.jinja", TopicContext, SPEC.output)
    env = write_prompts(tmp_path / "prompts")
    (env.root / "test" / "other.jinja").write_text(TEMPLATE.replace("Tell me", "Ask me"))

    def run() -> FakeBackend:
        backend = FakeBackend()
        llm = LLM(settings(tmp_path), backend=backend, prompts=env)
        llm.generate(SPEC, ADA)
        llm.generate(other, ADA)
        return backend

    assert run().calls == 2
    (env.root / "test" / "other.jinja").write_text(TEMPLATE.replace("Tell me", "Ask me") + "{# edited #}")
    assert run().calls == 1


def test_failures_are_not_hits_and_never_overwrite_successes(tmp_path):
    cache = LLMCache(tmp_path / "c.sqlite")
    row = {"key": "k", "spec": "s", "provider": "p", "model": "m", "request": "[]"}
    cache.put(CallRecord(status="failed", error="boom", **row))
    assert cache.get("k") is None
    cache.put(CallRecord(status="ok", output="{}", **row))
    cache.put(CallRecord(status="failed", error="late failure", **row))
    assert cache.get("k").output == "{}" and cache.count("failed") == 0


WRITER = """
import sys
from pipeline.llm.cache import CallRecord, LLMCache
cache = LLMCache(sys.argv[1])
for i in range(100):
    cache.put(CallRecord(key=f"{sys.argv[2]}-{i}", status="ok", spec="s", provider="p", model="m",
                         request="[]", output="{}"))
"""


def test_several_processes_write_at_once(tmp_path):
    path = tmp_path / "shared.sqlite"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"w{n}"], cwd=REPO) for n in range(4)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    assert LLMCache(path).count("ok") == 400


BATCH = textwrap.dedent("""
    import sys
    from pathlib import Path
    from tests.support.llm_helpers import SPEC, TopicContext, fake_llm
    llm, _ = fake_llm(Path(sys.argv[1]), "latency_s=0.05", max_concurrency=2)
    llm.generate_many(SPEC, [TopicContext(name=f"p{i}", topic="tea") for i in range(50)])
""")


def _completed(path: Path) -> int:
    """Successful rows in the cache at `path` (0 before it exists)."""
    if not path.exists():
        return 0
    cache = LLMCache(path)
    try:
        return cache.count("ok")
    finally:
        cache.close()


def test_kill_9_mid_batch_then_rerun_calls_only_unfinished(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", BATCH, str(tmp_path)], cwd=REPO)
    cache_path = tmp_path / "llm.sqlite"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _completed(cache_path) < 10:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = _completed(cache_path)
    assert 10 <= done < 50
    llm, backend = fake_llm(tmp_path, max_concurrency=2)
    llm.generate_many(SPEC, [TopicContext(name=f"p{i}", topic="tea") for i in range(50)])
    assert backend.calls == 50 - done
    assert llm.usage_summary().total.cache_hits == done
