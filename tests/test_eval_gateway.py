"""The gateway's free-text path (`LLM.chat`) used by evaluation: cache, retries, scripts, OpenAI wire format."""

from __future__ import annotations

import pytest

from pipeline.evaluation.evaluate import AnswerKey
from pipeline.llm import LLM, CacheMiss, CallFailed, ConfigError
from pipeline.llm.fake import FaultPlan
from schemas.llm import LLMSettings
from tests.support.openai_server import OpenAIServer

MESSAGES = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Pick one: (a) or (b)?"}]


def _llm(tmp_path, llm: str, **overrides) -> LLM:
    return LLM(LLMSettings(llm=llm, cache_path=tmp_path / "llm.sqlite", backoff_s=0.01, **overrides))


def test_chat_is_cached_and_the_call_context_stays_out_of_the_key(tmp_path):
    llm = _llm(tmp_path, "fake?answer=correct")
    first = llm.chat(MESSAGES, context=AnswerKey(correct_letter="b"))
    second = llm.chat(MESSAGES, context=AnswerKey(correct_letter="a"))
    assert "b" in first.text.lower() and not first.cached
    assert second.cached and second.text == first.text and llm.backend.calls == 1
    assert llm.chat(MESSAGES, sample_index=1, context=AnswerKey(correct_letter="a")).cached is False
    assert llm.usage_summary().by_stage["evaluate"].cache_hits == 1


def test_chat_retries_transport_failures_and_stores_persistent_ones(tmp_path):
    llm = _llm(tmp_path, "fake?server_error=@0&answer=a")
    assert llm.chat(MESSAGES).text and llm.backend.calls == 2
    broken = _llm(tmp_path / "b", "fake?server_error=1.0&answer=a", max_retries=1)
    with pytest.raises(CallFailed, match="transport failed after 2 tries"):
        broken.chat(MESSAGES)
    assert broken.cache.count("failed") == 1 and broken.usage_summary().total.failures == 1


def test_cache_only_chat_misses_raise(tmp_path):
    with pytest.raises(CacheMiss, match="chat.evaluate"):
        _llm(tmp_path, "fake", cache_only=True).chat(MESSAGES)


def test_answer_scripts_are_checked_and_name_the_model():
    assert FaultPlan.parse("answer=C").answer == "c"
    with pytest.raises(ConfigError, match="answer='maybe'"):
        FaultPlan.parse("answer=maybe")


def test_correct_script_needs_the_answer_key(tmp_path):
    with pytest.raises(ConfigError, match="correct_letter"):
        _llm(tmp_path, "fake?answer=correct").chat(MESSAGES)


def test_openai_chat_sends_a_plain_completion_without_response_format(tmp_path, monkeypatch):
    with OpenAIServer(api_key="sk-test", responder=lambda body: "I think (b).\n<final_answer>(b)") as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        llm = _llm(tmp_path, "openai:test-model", timeout_s=2.0)
        reply = llm.chat(MESSAGES)
        assert reply.text.endswith("<final_answer>(b)") and reply.output_tokens > 0
        assert "response_format" not in server.bodies[0] and server.bodies[0]["messages"] == MESSAGES
        assert llm.chat(MESSAGES).cached and server.requests == 1
