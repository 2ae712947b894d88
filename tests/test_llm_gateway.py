"""The gateway over the fake backend: caching, re-asks, retries, limits, accounting, sync/async use."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from pipeline.llm import LLM, CacheMiss, CallFailed, ConfigError
from pipeline.llm.factory import make_backend, resolve_backend_string
from pipeline.llm.limits import Bucket, Runtime
from schemas.llm import LLMSettings, Price
from tests.support.llm_helpers import SPEC, TopicContext, TopicNote, fake_llm, settings

ADA = TopicContext(name="Ada", topic="tea")


def test_generate_returns_validated_output_and_caches(tmp_path):
    llm, backend = fake_llm(tmp_path)
    first = llm.generate(SPEC, ADA)
    assert isinstance(first, TopicNote)
    assert llm.generate(SPEC, ADA) == first
    assert backend.calls == 1
    total = llm.usage_summary().total
    assert (total.calls, total.cache_hits, total.backend_calls) == (2, 1, 1)


def test_cache_survives_a_new_gateway(tmp_path):
    llm, _ = fake_llm(tmp_path)
    first = llm.generate(SPEC, ADA)
    again, backend = fake_llm(tmp_path)
    assert again.generate(SPEC, ADA) == first and backend.calls == 0


def test_malformed_json_is_reasked_with_the_error(tmp_path):
    llm, backend = fake_llm(tmp_path, "malformed_json=@0")
    assert isinstance(llm.generate(SPEC, ADA), TopicNote)
    assert backend.calls == 2
    reask = backend.requests[1].messages
    assert [m["role"] for m in reask] == ["system", "user", "assistant", "user"]
    assert "not valid JSON" in reask[-1]["content"]
    assert llm.usage_summary().total.reasks == 1


def test_schema_violation_and_truncation_are_reasked(tmp_path):
    llm, backend = fake_llm(tmp_path, "schema_violation=@0&truncation=@1")
    assert isinstance(llm.generate(SPEC, ADA), TopicNote)
    assert backend.calls == 3
    assert "finish_reason=length" in backend.requests[2].messages[-1]["content"]


def test_backends_that_do_not_want_their_reply_back_get_a_fresh_sample(tmp_path):
    llm, backend = fake_llm(tmp_path, "truncation=@0")
    backend.reask_with_reply = False
    assert isinstance(llm.generate(SPEC, ADA), TopicNote)
    first, second = backend.requests
    assert [m["role"] for m in second.messages] == [m["role"] for m in first.messages]
    assert second.messages[-1]["content"].startswith(first.messages[-1]["content"])
    assert "finish_reason=length" in second.messages[-1]["content"]
    assert second.seed != first.seed and llm.usage_summary().total.reasks == 1


def test_a_reply_cut_off_for_repeating_itself_is_reasked(tmp_path):
    from pipeline.llm.asks import validate_reply
    from pipeline.llm.backends import BackendReply

    output, problem = validate_reply(BackendReply(text='{"topic": "tea tea tea', finish_reason="repetition"), TopicNote)
    assert output is None and "repeating itself" in problem


def test_exhausted_reasks_fail_are_stored_and_retried_next_run(tmp_path):
    llm, backend = fake_llm(tmp_path, "schema_violation=1", reask=2)
    with pytest.raises(CallFailed, match="no valid output after 3 asks"):
        llm.generate(SPEC, ADA)
    assert backend.calls == 3
    assert llm.cache.count("failed") == 1 and llm.usage_summary().total.failures == 1
    rerun, backend = fake_llm(tmp_path)
    assert isinstance(rerun.generate(SPEC, ADA), TopicNote)
    assert backend.calls == 1 and rerun.cache.count("failed") == 0


def test_rate_limit_pauses_then_retries(tmp_path):
    llm, backend = fake_llm(tmp_path, "rate_limit=@0")
    backend.plan.faults[0].retry_after_s = 0.3
    started = time.monotonic()
    llm.generate(SPEC, ADA)
    assert time.monotonic() - started >= 0.3
    assert backend.calls == 2 and llm.usage_summary().total.retries == 1


def test_timeouts_and_server_errors_are_retried(tmp_path):
    llm, backend = fake_llm(tmp_path, "timeout=@0&server_error=@1", timeout_s=0.1)
    llm.generate(SPEC, ADA)
    assert backend.calls == 3 and llm.usage_summary().total.retries == 2


def test_transport_retries_are_bounded(tmp_path):
    llm, backend = fake_llm(tmp_path, "server_error=1", max_retries=2)
    with pytest.raises(CallFailed, match="transport failed after 3 tries"):
        llm.generate(SPEC, ADA)
    assert backend.calls == 3


def test_cache_only_fails_on_a_miss_and_serves_hits(tmp_path):
    llm, _ = fake_llm(tmp_path)
    llm.generate(SPEC, ADA)
    cached, backend = fake_llm(tmp_path, cache_only=True)
    assert isinstance(cached.generate(SPEC, ADA), TopicNote)
    with pytest.raises(CacheMiss, match="cache-only: no cached response for test.topic"):
        cached.generate(SPEC, TopicContext(name="Bob", topic="tea"))
    assert backend.calls == 0


def test_usage_per_stage_and_model_with_prices(tmp_path):
    llm, _ = fake_llm(tmp_path, prices={"fake": Price(input_per_mtok=1_000_000, output_per_mtok=2_000_000)})
    llm.generate(SPEC, ADA)
    llm.generate(SPEC, TopicContext(name="Bob", topic="tea"), stage="custom")
    usage = llm.usage_summary()
    assert set(usage.by_stage) == {"test", "custom"} and set(usage.by_model) == {"fake:fake"}
    total = usage.total
    assert total.input_tokens > 0 and total.output_tokens > 0
    assert total.cost_usd == pytest.approx(total.input_tokens + 2 * total.output_tokens)


def test_generate_many_respects_the_concurrency_limit(tmp_path):
    llm, backend = fake_llm(tmp_path, "latency_s=0.05", max_concurrency=3)
    contexts = [TopicContext(name=f"p{i}", topic="tea") for i in range(12)]
    results = llm.generate_many(SPEC, contexts)
    assert len(results) == 12 and backend.calls == 12
    assert backend.max_in_flight == 3


def test_generate_from_many_threads_and_inside_running_loops(tmp_path):
    llm, backend = fake_llm(tmp_path, "latency_s=0.01")
    results = {}

    def worker(i: int) -> None:
        async def inside_loop():
            sync = llm.generate(SPEC, TopicContext(name=f"s{i}", topic="tea"))
            awaited = await llm.agenerate(SPEC, TopicContext(name=f"a{i}", topic="tea"))
            return sync, awaited

        results[i] = asyncio.run(inside_loop())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and backend.calls == 16


def test_sample_index_changes_the_answer_seed(tmp_path):
    llm, backend = fake_llm(tmp_path)
    llm.generate(SPEC, ADA, sample_index=0)
    llm.generate(SPEC, ADA, sample_index=1)
    assert backend.calls == 2
    assert [r.seed for r in backend.requests] == [0, 1]


def test_bucket_waits_once_the_budget_is_spent():
    async def spend() -> float:
        bucket = Bucket(per_minute=600)
        await bucket.take(600)
        started = time.monotonic()
        await bucket.take(3)
        return time.monotonic() - started

    assert 0.25 <= asyncio.run(spend()) < 1.0


def test_rpm_budget_throttles_requests(tmp_path):
    llm, backend = fake_llm(tmp_path, rpm=600)
    started = time.monotonic()
    llm.generate_many(SPEC, [TopicContext(name=f"p{i}", topic="tea") for i in range(603)])
    assert time.monotonic() - started >= 0.25


def test_backend_string_resolution(monkeypatch):
    monkeypatch.delenv("LLM", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert resolve_backend_string(LLMSettings()) == "local"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert resolve_backend_string(LLMSettings()) == "openai:gpt-4o-mini"
    monkeypatch.setenv("LLM", "fake")
    assert resolve_backend_string(LLMSettings()) == "fake"
    assert resolve_backend_string(LLMSettings(llm="openai:x")) == "openai:x"


@pytest.mark.parametrize("spec", ["gemini:pro", "openai", "fakeish", "bogus"])
def test_unknown_backend_is_one_line_config_error(spec, tmp_path):
    with pytest.raises(ConfigError) as info:
        LLM(settings(tmp_path, llm=spec))
    assert "\n" not in str(info.value) and spec in str(info.value)


def test_fake_string_builds_a_fault_plan():
    backend = make_backend("fake?rate_limit=@1", LLMSettings())
    assert backend.plan.faults[0].calls == [1]


def test_gateway_loop_runs_default_executor_work_inline_but_resolves_names_on_threads():
    runtime = Runtime.get()

    async def where() -> tuple[str, str, str]:
        loop = asyncio.get_running_loop()
        inline = await loop.run_in_executor(None, lambda: threading.current_thread().name)
        with pytest.raises(ZeroDivisionError):
            await loop.run_in_executor(None, lambda: 1 / 0)
        resolved = await loop.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM)
        return inline, threading.current_thread().name, resolved[0][4][0]

    inline, loop_thread, address = runtime.run(where())
    assert inline == loop_thread == "llm-gateway" and address == "127.0.0.1"


def test_many_calls_prepare_within_a_window(tmp_path):
    """generate_many starts each call just before it can use a slot (window = 2 x concurrency), not all up front."""
    llm, backend = fake_llm(tmp_path, "latency_s=0.01", max_concurrency=2)
    active = {"now": 0, "peak": 0}
    original = llm._generate

    async def counted(*args):
        active["now"] += 1
        active["peak"] = max(active["peak"], active["now"])
        try:
            return await original(*args)
        finally:
            active["now"] -= 1

    llm._generate = counted
    contexts = [TopicContext(name=f"p{i}", topic="tea") for i in range(12)]
    assert len(llm.generate_many(SPEC, contexts)) == 12
    assert active["peak"] == 4 and backend.calls == 12


def test_a_stopping_run_makes_no_more_model_calls(tmp_path):
    from pipeline.llm.errors import Interrupted

    llm, backend = fake_llm(tmp_path)
    llm.runtime.stop("test")
    try:
        with pytest.raises(Interrupted):
            llm.generate_each(SPEC, [TopicContext(name="Ada", topic="tea")])  # not turned into a code fallback
    finally:
        llm.runtime.resume()
    assert backend.calls == 0


def test_each_fresh_sample_carries_only_the_latest_reason(tmp_path):
    llm, backend = fake_llm(tmp_path, "truncation=@0&malformed_json=@1", reask=2)
    backend.reask_with_reply = False
    assert isinstance(llm.generate(SPEC, ADA), TopicNote)
    first, _, third = backend.requests
    assert third.messages[-1]["content"].count("An earlier answer") == 1
    assert "not valid JSON" in third.messages[-1]["content"]
    assert third.messages[-1]["content"].startswith(first.messages[-1]["content"])


def test_identical_calls_in_flight_at_once_reach_the_backend_once(tmp_path):
    llm, backend = fake_llm(tmp_path, "latency_s=0.2")
    notes = llm.generate_many(SPEC, [ADA, ADA, ADA, TopicContext(name="Bo", topic="tea")])
    assert notes[0] == notes[1] == notes[2] and notes[0] is not notes[1]
    assert backend.calls == 2
    total = llm.usage_summary().total
    assert (total.calls, total.cache_hits, total.backend_calls) == (4, 2, 2)
    replies = llm.runtime.run(_chat_twice(llm))
    assert [r.cached for r in replies] == [False, True] and replies[0].text == replies[1].text
    assert backend.calls == 3


async def _chat_twice(llm):
    messages = [{"role": "user", "content": "Say hello."}]
    return await asyncio.gather(llm.achat(messages), llm.achat(messages))


def test_a_failure_in_flight_is_every_waiters_failure_and_is_retried_next_run(tmp_path):
    llm, backend = fake_llm(tmp_path, "schema_violation=1&latency_s=0.1", reask=0)
    results = llm.generate_each(SPEC, [ADA, ADA])
    assert results == [None, None] and backend.calls == 1
    rerun, backend = fake_llm(tmp_path)
    assert isinstance(rerun.generate(SPEC, ADA), TopicNote) and backend.calls == 1


def test_a_waiter_whose_call_is_cancelled_asks_itself(tmp_path):
    llm, backend = fake_llm(tmp_path, "latency_s=0.3")

    async def first_cancelled():
        first = asyncio.ensure_future(llm.agenerate(SPEC, ADA))
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(llm.agenerate(SPEC, ADA))
        await asyncio.sleep(0.05)
        first.cancel()
        return await second

    assert isinstance(llm.runtime.run(first_cancelled()), TopicNote)
    assert backend.calls == 2


def test_a_day_long_retry_after_is_capped_and_said(tmp_path, monkeypatch):
    import pipeline.llm.transport as transport
    from pipeline.llm import listen_notices
    from pipeline.llm.limits import Throttle

    paused: list[float] = []
    original = Throttle.pause
    monkeypatch.setattr(Throttle, "pause", lambda self, s: (paused.append(s), original(self, s))[1])
    monkeypatch.setattr(transport, "NOTICE_WAIT_S", 0.01)
    said: list[str] = []
    stop = listen_notices(said.append)
    try:
        llm, backend = fake_llm(tmp_path, "rate_limit=@0", max_retry_after_s=0.05)
        backend.plan.faults[0].retry_after_s = 86400
        llm.generate(SPEC, ADA)
    finally:
        stop()
    assert paused == [0.05] and backend.calls == 2
    assert len(said) == 1 and "HTTP 429" in said[0] and "86400" in said[0] and "max_retry_after_s" in said[0]


def test_a_whole_call_is_bounded_not_only_each_try(tmp_path):
    llm, backend = fake_llm(tmp_path, "timeout=1.0", timeout_s=0.05, call_timeout_s=0.2, max_retries=100,
                            backoff_s=0)
    with pytest.raises(CallFailed, match=r"no answer within llm.call_timeout_s \(0.2 s\)"):
        llm.generate(SPEC, ADA)
    assert 1 <= backend.calls < 100  # stopped by the call's bound, long before its tries ran out


def test_the_openai_client_bounds_the_connect_apart(monkeypatch):
    from pipeline.llm.openai import OpenAIBackend

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    chat = OpenAIBackend("m", LLMSettings(timeout_s=30, connect_timeout_s=3)).chat
    assert chat.request_timeout.connect == 3 and chat.request_timeout.read == 30


def test_a_reask_echoes_an_overlong_reply_cut_to_the_token_cap(tmp_path):
    """A server that ignores max_tokens: the re-ask shows at most the cap's worth of the rejected reply."""
    from pipeline.llm.backends import BackendReply

    llm, backend = fake_llm(tmp_path, max_tokens=100)
    sent = []
    original = backend.complete

    async def overlong_first(request):
        sent.append(request)
        if len(sent) == 1:
            return BackendReply(text="{" + "x" * 1_000_000, finish_reason="stop")
        return await original(request)

    backend.complete = overlong_first
    assert isinstance(llm.generate(SPEC, ADA), TopicNote)
    echoed = [m["content"] for m in sent[1].messages if m["role"] == "assistant"]
    assert len(echoed) == 1 and len(echoed[0]) < 500 and "more characters cut" in echoed[0]
