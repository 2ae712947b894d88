"""The openai:<model> path over real HTTP against the loopback OpenAI-compatible server."""

from __future__ import annotations

import socket
import time

import pytest

from pipeline.llm import LLM, CallFailed, ConfigError
from tests.support.llm_helpers import SPEC, TopicContext, TopicNote, settings, write_prompts
from tests.support.openai_server import OpenAIServer

ADA = TopicContext(name="Ada", topic="tea")


@pytest.fixture
def server(monkeypatch):
    with OpenAIServer(api_key="sk-test", retry_after_s=0.3, slow_s=3.0) as running:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", running.base_url)
        yield running


def _llm(tmp_path, **overrides) -> LLM:
    values = {"llm": "openai:test-model", "timeout_s": 1.0} | overrides
    return LLM(settings(tmp_path, **values), prompts=write_prompts(tmp_path / "prompts"))


def test_structured_output_round_trip_and_cache(server, tmp_path):
    llm = _llm(tmp_path)
    llm.preflight()
    note = llm.generate(SPEC, ADA)
    assert isinstance(note, TopicNote)
    assert llm.generate(SPEC, ADA) == note and server.requests == 1
    body = server.bodies[0]
    assert body["model"] == "test-model" and body["messages"][1] == {"role": "user", "content": "Tell me about tea."}
    assert body["response_format"]["json_schema"]["schema"] == TopicNote.model_json_schema()
    usage = llm.usage_summary().total
    assert usage.input_tokens > 0 and usage.output_tokens > 0


def test_429_honours_retry_after(server, tmp_path):
    server.schedule(0, "rate_limit")
    started = time.monotonic()
    _llm(tmp_path).generate(SPEC, ADA)
    assert time.monotonic() - started >= 0.3 and server.requests == 2


def test_500_is_retried(server, tmp_path):
    server.schedule(0, "server_error")
    server.schedule(1, "server_error")
    llm = _llm(tmp_path)
    llm.generate(SPEC, ADA)
    assert server.requests == 3 and llm.usage_summary().total.retries == 2


def test_malformed_json_is_reasked(server, tmp_path):
    server.schedule(0, "malformed")
    llm = _llm(tmp_path)
    assert isinstance(llm.generate(SPEC, ADA), TopicNote)
    assert server.requests == 2
    assert [m["role"] for m in server.bodies[1]["messages"]] == ["system", "user", "assistant", "user"]


def test_length_finish_is_a_failure_then_reasked(server, tmp_path):
    server.schedule(0, "length")
    llm = _llm(tmp_path)
    llm.generate(SPEC, ADA)
    assert server.requests == 2 and "finish_reason=length" in server.bodies[1]["messages"][-1]["content"]


def test_slow_response_times_out_and_is_retried(server, tmp_path):
    server.schedule(0, "slow")
    started = time.monotonic()
    _llm(tmp_path, timeout_s=0.5).generate(SPEC, ADA)
    assert server.requests == 2 and time.monotonic() - started < 2.5


def test_persistent_failure_raises_and_is_stored(server, tmp_path):
    for index in range(3):
        server.schedule(index, "server_error")
    llm = _llm(tmp_path, max_retries=2)
    with pytest.raises(CallFailed, match="HTTP 500"):
        llm.generate(SPEC, ADA)
    assert llm.cache.count("failed") == 1


def test_preflight_missing_key(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is not set") as info:
        _llm(tmp_path).preflight()
    assert "\n" not in str(info.value)


def test_preflight_unreachable_base_url(monkeypatch, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    with pytest.raises(ConfigError, match="cannot reach OPENAI_BASE_URL") as info:
        _llm(tmp_path).preflight()
    assert "\n" not in str(info.value)


def test_preflight_unknown_model_and_bad_key(server, monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match="model 'gpt-9' is not served by .* \\(it serves: test-model\\)"):
        _llm(tmp_path, llm="openai:gpt-9").preflight()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    with pytest.raises(ConfigError, match="rejected OPENAI_API_KEY"):
        _llm(tmp_path).preflight()


def test_cache_only_skips_preflight(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    _llm(tmp_path, cache_only=True).preflight()
