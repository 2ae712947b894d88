"""The gateway and backends that set their own limits: a reply cut at its token cap is re-asked only with a
larger cap, a backend without a transport timeout is never timed out, and the cache key names the engine."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from pipeline.llm import LLM, CallFailed
from pipeline.llm.backends import BackendReply, BackendRequest
from pipeline.llm.cache import CacheKey
from pipeline.llm.fake import FakeBackend, FaultPlan
from tests.support.llm_helpers import SPEC, TopicContext, settings, write_prompts

ADA = TopicContext(name="Ada", topic="tea")
VALID = '{"title": "Green tea", "score": 3}'


class CappedBackend:
    """Cut at the cap (finish_reason length, broken JSON) until a request's cap reaches ``needs`` tokens.

    ``limit``: the most tokens it ever applies (``effective_max_tokens``), as the embedded model lowers the cap
    to what a valid reply to the schema can need; None: it applies the request's cap. ``delay_s``: how long
    each reply takes; ``transport_timeout``: whether the gateway may time it out.
    """

    provider = "capped"
    model = "capped"

    def __init__(self, needs: int = 10**9, limit: int | None = None, delay_s: float = 0.0,
                 transport_timeout: bool = True) -> None:
        self.needs, self.limit, self.delay_s = needs, limit, delay_s
        self.transport_timeout = transport_timeout
        self.requests: list[BackendRequest] = []

    def preflight(self) -> None:
        """Always works."""

    def effective_max_tokens(self, request: BackendRequest) -> int:
        return request.max_tokens if self.limit is None else min(request.max_tokens, self.limit)

    async def complete(self, request: BackendRequest) -> BackendReply:
        self.requests.append(request)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        cap = self.effective_max_tokens(request)
        if cap >= self.needs:
            return BackendReply(text=VALID, finish_reason="stop", input_tokens=20, output_tokens=12)
        return BackendReply(text='{"title": "Green tea and its long hist', finish_reason="length",
                            input_tokens=20, output_tokens=cap)


def _llm(tmp_path, backend, **overrides) -> LLM:
    return LLM(settings(tmp_path, **overrides), backend=backend, prompts=write_prompts(tmp_path / "prompts"))


@pytest.mark.parametrize(("backend", "overrides"), [
    (CappedBackend(limit=100), {"max_tokens": 100}),  # the backend caps every request at 100 tokens
    (CappedBackend(), {"max_tokens": 4096, "max_tokens_ceiling": 4096}),  # already at the ceiling
    (CappedBackend(), {"max_tokens": 5000, "max_tokens_ceiling": 4096}),  # above it: never lowered, not raised
], ids=["backend-limit", "at-ceiling", "above-ceiling"])
def test_a_reply_cut_at_a_cap_that_cannot_grow_is_asked_once_and_fails(tmp_path, backend, overrides):
    llm = _llm(tmp_path, backend, reask=2, **overrides)
    with pytest.raises(CallFailed, match="ran to the token cap .*cannot be raised"):
        llm.generate(SPEC, ADA)
    assert len(backend.requests) == 1
    total = llm.usage_summary().total
    assert (total.backend_calls, total.reasks, total.failures) == (1, 0, 1)
    assert llm.cache.count("failed") == 1  # stored like any failed call: the next run asks again


def test_a_reply_cut_at_the_cap_is_reasked_with_twice_the_cap(tmp_path):
    backend = CappedBackend(needs=400)
    llm = _llm(tmp_path, backend, max_tokens=100, reask=2)
    assert llm.generate(SPEC, ADA).title == "Green tea"
    assert [r.max_tokens for r in backend.requests] == [100, 200, 400]
    assert "finish_reason=length" in backend.requests[1].messages[-1]["content"]  # the re-ask still says why
    assert llm.usage_summary().total.reasks == 2


def test_a_raised_cap_stops_at_the_ceiling_and_then_fails(tmp_path):
    backend = CappedBackend(needs=400)
    llm = _llm(tmp_path, backend, max_tokens=100, max_tokens_ceiling=150, reask=3)
    with pytest.raises(CallFailed, match=r"token cap \(150\)"):
        llm.generate(SPEC, ADA)
    assert [r.max_tokens for r in backend.requests] == [100, 150]


def test_a_raised_cap_counts_only_where_the_backend_applies_it(tmp_path):
    backend = CappedBackend(needs=400, limit=250)  # doubling helps up to 250 tokens, then no more
    llm = _llm(tmp_path, backend, max_tokens=100, reask=5)
    with pytest.raises(CallFailed, match=r"token cap \(250\)"):
        llm.generate(SPEC, ADA)
    assert [r.max_tokens for r in backend.requests] == [100, 200, 400]


def _fake(tmp_path, plan: str):
    backend = FakeBackend(FaultPlan.parse(plan))
    return _llm(tmp_path, backend, max_tokens=100), backend


def test_a_reply_that_is_invalid_for_another_reason_is_reasked_at_the_same_cap(tmp_path):
    llm, backend = _fake(tmp_path, "malformed_json=@0")
    assert llm.generate(SPEC, ADA).title
    assert [r.max_tokens for r in backend.requests] == [100, 100]


def test_a_backend_without_transport_timeout_is_not_timed_out(tmp_path):
    backend = CappedBackend(needs=0, delay_s=0.2, transport_timeout=False)
    llm = _llm(tmp_path, backend, timeout_s=0.05, max_retries=0)
    assert llm.generate(SPEC, ADA).title == "Green tea"
    total = llm.usage_summary().total
    assert (total.backend_calls, total.retries) == (1, 0)


def test_a_backend_with_transport_timeout_is_timed_out(tmp_path):  # the control of the test above
    backend = CappedBackend(needs=0, delay_s=0.2)
    llm = _llm(tmp_path, backend, timeout_s=0.05, max_retries=1)
    with pytest.raises(CallFailed, match="transport failed after 2 tries"):
        llm.generate(SPEC, ADA)
    assert len(backend.requests) == 2


def _key(**overrides) -> CacheKey:
    values = {"provider": "local", "model": "m.gguf", "messages": [{"role": "user", "content": "hi"}],
              "output_schema": {"type": "object"}, "temperature": 0.7, "top_p": 0.95, "max_tokens": 64, "seed": 3,
              "sample_index": 0, "template_fingerprint": "abc"}
    return CacheKey(**(values | overrides))


def test_an_empty_engine_leaves_the_key_digest_as_it_was():
    key = _key()
    data = key.model_dump(mode="json")
    data.pop("engine")
    old = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert key.engine == "" and key.digest() == old == _key(engine="").digest()
    assert _key(engine="batch1").digest() != old
    assert _key(engine="batch1").digest() != _key(engine="batch2").digest()


def test_the_gateway_keys_name_the_backend_engine(tmp_path):
    plain = _llm(tmp_path, FakeBackend())
    engined_backend = FakeBackend()
    engined_backend.engine = "batch1"
    engined = _llm(tmp_path, engined_backend)
    assert plain.cache_key(SPEC, ADA) != engined.cache_key(SPEC, ADA)
    messages = [{"role": "user", "content": "hi"}]
    assert plain.chat_key(messages).engine == "" and engined.chat_key(messages).engine == "batch1"
    assert plain.chat_key(messages).digest() != engined.chat_key(messages).digest()
