"""The LLM gateway, the only module that talks to a model: render, cache, throttle, retry, re-ask, validate.

    llm = LLM(settings)                 # backend from settings.llm / $LLM / auto
    llm.preflight()                     # one-line ConfigError before any work
    draft = llm.generate(SPEC, context, sample_index=0)   # or: await llm.agenerate(...)
    reply = llm.chat(messages, stage="evaluate")          # free text (no schema): ChatReply

Every call runs on one background event loop per process (pipeline.llm.limits.Runtime), so the sync
API works from any thread, Prefect task threads and threads that run their own loop included.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import replace

from pydantic import BaseModel, ValidationError

from pipeline.errors import first_validation_error, redact
from pipeline.llm.asks import call_label, reasked, resampled, validate_reply
from pipeline.llm.backends import Backend, BackendReply, BackendRequest
from pipeline.llm.cache import CacheKey, CallRecord, LLMCache
from pipeline.llm.errors import (
    CacheMiss,
    CallFailed,
    ConfigError,
    ContentRejected,
    LLMError,
)
from pipeline.llm.factory import make_backend, resolve_backend_string
from pipeline.llm.limits import Runtime
from pipeline.llm.notices import finished, notice
from pipeline.llm.transport import Transport
from pipeline.prompting import PromptEnv, PromptSpec
from schemas.llm import LLMSettings, TokenCount, UsageSummary

__all__ = ["LLM", "LLMError", "ConfigError", "CacheMiss", "CallFailed", "LLMSettings", "UsageSummary", "ChatReply"]

CHAT_FINGERPRINT = "free-text-chat"


class ChatReply(BaseModel):
    """A free-text reply: text, usage, latency of the call that produced it, and whether it was cached."""

    text: str
    finish_reason: str = "stop"
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    cached: bool = False


class LLM(Transport):
    """A gateway bound to one backend, one cache and one prompts folder; records usage per instance."""

    def __init__(
        self,
        settings: LLMSettings | None = None,
        *,
        backend: Backend | None = None,
        cache: LLMCache | None = None,
        prompts: PromptEnv | None = None,
        fingerprints: dict[str, str] | None = None,
    ) -> None:
        self.settings = settings or LLMSettings()
        self.backend = backend or make_backend(resolve_backend_string(self.settings), self.settings)
        self.cache = cache or LLMCache(self.settings.cache_path)
        self.prompts = prompts or PromptEnv()
        self.fingerprints = dict(fingerprints or {})
        self._schemas: dict[type[BaseModel], dict] = {}
        self.runtime = Runtime.get()
        self._usage = UsageSummary()
        self._usage_lock = threading.Lock()
        self._jitter = random.Random()
        self._inflight: dict[str, asyncio.Future] = {}  # digest -> the call in flight (on the Runtime's loop)
        self.setup_bound_s: float | None = None  # set by `bounded`: set-up calls give up sooner
        self._heard_at = 0.0  # when a long wait was last said (Transport._said)
        self._said_unparsed: set[str] = set()  # specs whose damaged cached replies were said

    @property
    def name(self) -> str:
        """`provider:model` of the backend."""
        return f"{self.backend.provider}:{self.backend.model}"

    @contextmanager
    def bounded(self, seconds: float):
        """Calls made in the block (the plan's measuring calls) give up after ``seconds``, retries included,
        where that is sooner than ``llm.call_timeout_s``: a server that does not answer fails the start soon."""
        previous, self.setup_bound_s = self.setup_bound_s, seconds
        try:
            yield self
        finally:
            self.setup_bound_s = previous

    def preflight(self) -> None:
        """Raise one-line ConfigError if the backend cannot work (skipped in cache-only mode)."""
        if not self.settings.cache_only:
            self.backend.preflight()

    def generate(self, spec: PromptSpec, context: BaseModel, *, sample_index: int = 0,
                 stage: str | None = None) -> BaseModel:
        """Blocking `agenerate`, usable from any thread."""
        return self.runtime.run(self._generate(spec, context, sample_index, stage))

    async def agenerate(self, spec: PromptSpec, context: BaseModel, *, sample_index: int = 0,
                        stage: str | None = None) -> BaseModel:
        """The validated output model for `context` rendered through `spec` (cached, retried)."""
        return await self.runtime.run_async(self._generate(spec, context, sample_index, stage))

    def generate_many(self, spec: PromptSpec, contexts: Sequence[BaseModel], *, sample_index: int = 0,
                      stage: str | None = None) -> list[BaseModel]:
        """Run many calls concurrently (within the limits); every call finishes before the first error is raised."""
        return self.runtime.run(self._generate_many(spec, contexts, sample_index, stage))

    def chat(self, messages: Sequence[dict[str, str]], *, stage: str = "evaluate", sample_index: int = 0,
             context: BaseModel | None = None) -> ChatReply:
        """Blocking `achat`, usable from any thread."""
        return self.runtime.run(self._chat([dict(m) for m in messages], stage, sample_index, context))

    async def achat(self, messages: Sequence[dict[str, str]], *, stage: str = "evaluate", sample_index: int = 0,
                    context: BaseModel | None = None) -> ChatReply:
        """A free-text reply (no output schema), cached, throttled and retried like `agenerate`.

        `context` reaches the backend only (the fake backend's scripted answers read it), never the key.
        """
        return await self.runtime.run_async(self._chat([dict(m) for m in messages], stage, sample_index, context))

    def chat_key(self, messages: list[dict[str, str]], *, sample_index: int = 0) -> CacheKey:
        """The cache key of a free-text call: provider, model, messages, sampling, sample index."""
        s = self.settings
        return CacheKey(provider=self.backend.provider, model=self.backend.model, messages=messages,
                        output_schema={}, temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens,
                        seed=s.seed, sample_index=sample_index, template_fingerprint=CHAT_FINGERPRINT,
                        engine=getattr(self.backend, "engine", ""))

    def usage_summary(self) -> UsageSummary:
        """A copy of this gateway's totals: overall, per stage, per model."""
        with self._usage_lock:
            return self._usage.model_copy(deep=True)

    def fingerprint(self, spec: PromptSpec) -> str:
        """The template fingerprint used in keys (pinned by `fingerprints=` or computed once)."""
        if spec.template not in self.fingerprints:
            self.fingerprints[spec.template] = self.prompts.fingerprint(spec.template)
        return self.fingerprints[spec.template]

    def cache_key(self, spec: PromptSpec, context: BaseModel, *, sample_index: int = 0) -> str:
        """The cache key digest a call would use."""
        return self._key(spec, self._messages(spec, context), sample_index).digest()

    def generate_each(self, spec: PromptSpec | Sequence[PromptSpec], contexts: Sequence[BaseModel], *,
                      sample_index: int | Sequence[int] = 0, stage: str | None = None) -> list[BaseModel | None]:
        """Like `generate_many`, but a context whose call fails gets None (callers fall back to code).

        `sample_index` may be one index for every call or one per context; so may `spec` (the calls still
        run concurrently, as one batch for the embedded model).
        """
        results = self.runtime.run(self._gather(spec, contexts, sample_index, stage))
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, LLMError):
                raise r
        return [None if isinstance(r, LLMError) else r for r in results]

    def close(self) -> None:
        """Close the cache connection."""
        self.cache.close()

    async def _gather(self, spec, contexts, sample_index, stage) -> list[BaseModel | BaseException]:
        # A window of twice the concurrency: each call renders, hashes and looks up its key just before it
        # needs a slot, instead of every call doing so up front while the first responses wait on the loop.
        window = asyncio.Semaphore(2 * self.settings.max_concurrency)

        async def admitted(one: PromptSpec, context: BaseModel, index: int) -> BaseModel:
            async with window:
                return await self._generate(one, context, index, stage)

        indices = [sample_index] * len(contexts) if isinstance(sample_index, int) else list(sample_index)
        specs = [spec] * len(contexts) if isinstance(spec, PromptSpec) else list(spec)
        if not len(indices) == len(specs) == len(contexts):
            raise ValueError(f"{len(indices)} sample indices and {len(specs)} specs for {len(contexts)} contexts")
        return await asyncio.gather(*(admitted(p, c, i) for p, c, i in zip(specs, contexts, indices, strict=True)),
                                    return_exceptions=True)

    async def _generate_many(self, spec, contexts, sample_index, stage) -> list[BaseModel]:
        results = await self._gather(spec, contexts, sample_index, stage)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]
        return results

    def _messages(self, spec: PromptSpec, context: BaseModel) -> list[dict[str, str]]:
        return [m.model_dump() for m in self.prompts.render_located(spec, context)]

    def _schema(self, output: type[BaseModel]) -> dict:
        if output not in self._schemas:
            self._schemas[output] = output.model_json_schema()
        return self._schemas[output]

    def _key(self, spec: PromptSpec, messages: list[dict[str, str]], sample_index: int) -> CacheKey:
        s = self.settings
        return CacheKey(
            provider=self.backend.provider, model=self.backend.model, messages=messages,
            output_schema=self._schema(spec.output), temperature=s.temperature, top_p=s.top_p,
            max_tokens=s.max_tokens, seed=s.seed, sample_index=sample_index,
            template_fingerprint=self.fingerprint(spec), engine=getattr(self.backend, "engine", ""),
        )

    async def _generate(self, spec: PromptSpec, context: BaseModel, sample_index: int,
                        stage: str | None) -> BaseModel:
        stage = stage or spec.stage
        messages = self._messages(spec, context)
        key = self._key(spec, messages, sample_index)
        digest = key.digest()
        hit = self.cache.get(digest)
        if hit is not None and (cached := self._cached_output(spec, hit)) is not None:
            self._record(stage, TokenCount(calls=1, cache_hits=1))
            return cached
        if self.settings.cache_only:  # an unanswered call like any other: the run counts it
            self._record(stage, TokenCount(calls=1, failures=1, transport_failures=1))
            raise CacheMiss(f"cache-only: no cached response for {spec.name} (key {digest[:16]})")
        request = BackendRequest(
            messages=messages, output=spec.output, schema=key.output_schema, context=context,
            temperature=key.temperature, top_p=key.top_p, max_tokens=key.max_tokens,
            seed=key.seed + sample_index, timeout_s=self.settings.timeout_s, key=digest,
        )
        output, _ = await self._once(digest, stage, lambda: self._call(spec, request, stage))
        return output.model_copy(deep=True)

    def _cached_output(self, spec: PromptSpec, hit) -> BaseModel | None:
        """A cached reply as ``spec``'s output, or None (a miss, said once) when the stored output no longer
        parses as it: a row edited by hand, or one another version of the schema wrote."""
        try:
            return spec.output.model_validate_json(hit.output or "")
        except ValidationError as exc:
            if spec.name not in self._said_unparsed:
                self._said_unparsed.add(spec.name)
                notice(f"{self.cache.path}: a cached reply of {spec.name} does not parse as {spec.output.__name__} "
                       f"({first_validation_error(exc, 'output')}); such replies count as not cached")
            return None

    async def _once(self, digest: str, stage: str, call: Callable) -> tuple[object, bool]:
        """(result, shared): ``call()``'s result for a key not in the cache, or, when the same key is already in
        flight, that call's result (shared, counted as a cache hit): identical concurrent calls reach the model
        once. A waiter whose call was cancelled asks itself; a failure is every waiter's failure."""
        while (running := self._inflight.get(digest)) is not None:
            try:
                result = await asyncio.shield(running)
            except asyncio.CancelledError:
                if not running.cancelled():
                    raise  # this waiter itself is cancelled
                continue
            self._record(stage, TokenCount(calls=1, cache_hits=1))
            return result, True
        future = asyncio.get_running_loop().create_future()
        self._inflight[digest] = future
        try:
            result = await call()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # marked retrieved: a failure nobody waited for is no asyncio warning
            raise
        else:
            future.set_result(result)
            return result, False
        finally:
            del self._inflight[digest]

    async def _chat(self, messages: list[dict[str, str]], stage: str, sample_index: int,
                    context: BaseModel | None) -> ChatReply:
        key = self.chat_key(messages, sample_index=sample_index)
        digest = key.digest()
        hit = self.cache.get(digest)
        if hit is not None:
            self._record(stage, TokenCount(calls=1, cache_hits=1))
            return ChatReply(text=hit.raw or "", finish_reason=hit.finish_reason or "stop", cached=True,
                             input_tokens=hit.input_tokens, output_tokens=hit.output_tokens, latency_s=hit.latency_s)
        if self.settings.cache_only:
            self._record(stage, TokenCount(calls=1, failures=1, transport_failures=1))
            raise CacheMiss(f"cache-only: no cached response for chat.{stage} (key {digest[:16]})")
        request = BackendRequest(
            messages=messages, output=ChatReply, schema={}, context=context or ChatReply(text=""),
            temperature=key.temperature, top_p=key.top_p, max_tokens=key.max_tokens,
            seed=key.seed + sample_index, timeout_s=self.settings.timeout_s, key=digest, free_text=True,
        )
        reply, shared = await self._once(digest, stage, lambda: self._chat_call(request, stage))
        return reply.model_copy(update={"cached": True} if shared else {})

    async def _chat_call(self, request: BackendRequest, stage: str) -> ChatReply:
        count, started = TokenCount(calls=1), time.monotonic()
        try:
            reply = await self._send(request, count)
        except LLMError as exc:
            count.failures += 1
            count.transport_failures += not isinstance(exc, ContentRejected)
            self._record(stage, count)
            self._store_chat(request, stage, None, count, started, error=redact(exc))
            raise
        self._record(stage, count)
        self._store_chat(request, stage, reply, count, started)
        return ChatReply(text=reply.text, finish_reason=reply.finish_reason, input_tokens=count.input_tokens,
                         output_tokens=count.output_tokens, latency_s=time.monotonic() - started)

    def _store_chat(self, request: BackendRequest, stage: str, reply: BackendReply | None, count: TokenCount,
                    started: float, error: str | None = None) -> None:
        self.cache.put(CallRecord(
            key=request.key, status="ok" if reply else "failed", spec=f"chat.{stage}", provider=self.backend.provider,
            model=self.backend.model, request=json.dumps(request.messages), raw=reply.text if reply else None,
            output=reply.text if reply else None, finish_reason=reply.finish_reason if reply else None,
            input_tokens=count.input_tokens, output_tokens=count.output_tokens,
            latency_s=time.monotonic() - started, attempts=count.backend_calls,
            error=error,
        ))

    async def _call(self, spec: PromptSpec, request: BackendRequest, stage: str) -> BaseModel:
        """Ask, validate, re-ask with the error; store the outcome either way."""
        count = TokenCount(calls=1)
        started = time.monotonic()
        reply, problem = None, "no reply"
        try:
            for ask in range(self.settings.reask + 1):
                reply = await self._send(request, count)
                output, problem = validate_reply(reply, spec.output)
                if output is not None:
                    self._store(spec, request, reply, output, count, started)
                    self._record(stage, count)
                    return output
                if reply.finish_reason == "length":  # cut at the cap: only a larger cap can change that
                    raised = self._raised_cap(request)
                    if raised is None:
                        raise ContentRejected(f"{spec.name}: the reply ran to the token cap "
                                         f"({self._cap(request)}), which cannot be raised: {problem}")
                    request = raised
                if ask < self.settings.reask:
                    count.reasks += 1
                    if getattr(self.backend, "reask_with_reply", True):
                        request = reasked(request, reply, problem, ask + 1)
                    else:
                        request = resampled(request, problem, ask + 1)
            raise ContentRejected(f"{spec.name}: no valid output after {ask + 1} asks: {problem}")
        except LLMError as exc:
            count.failures += 1
            count.transport_failures += not isinstance(exc, ContentRejected)  # the model never answered
            self._record(stage, count)
            self._store_failure(spec, request, reply, exc, count, started)
            raise

    def _cap(self, request: BackendRequest) -> int:
        """The token cap the backend really applies to ``request`` (the embedded model lowers it per schema)."""
        effective = getattr(self.backend, "effective_max_tokens", None)
        return effective(request) if effective else request.max_tokens

    def _raised_cap(self, request: BackendRequest) -> BackendRequest | None:
        """``request`` with twice the token cap, up to ``max_tokens_ceiling``; None when that cannot raise the
        cap the backend applies (asking again at the same cap would be cut at the same place)."""
        ceiling = max(self.settings.max_tokens_ceiling, request.max_tokens)
        raised = replace(request, max_tokens=min(2 * request.max_tokens, ceiling))
        return raised if self._cap(raised) > self._cap(request) else None

    def _cost(self, count: TokenCount) -> float:
        price = self.settings.prices.get(self.backend.model) or self.settings.prices.get(self.name)
        if price is None:
            return 0.0
        return (count.input_tokens * price.input_per_mtok + count.output_tokens * price.output_per_mtok) / 1e6

    def _record(self, stage: str, count: TokenCount) -> None:
        count.cost_usd = self._cost(count)
        with self._usage_lock:
            self._usage.record(stage, self.name, count)
        finished(stage, count)

    def _store(self, spec, request, reply, output, count, started) -> None:
        self.cache.put(CallRecord(
            key=request.key, status="ok", spec=call_label(spec), provider=self.backend.provider,
            model=self.backend.model, request=json.dumps(request.messages), raw=reply.text,
            output=output.model_dump_json(), finish_reason=reply.finish_reason,
            input_tokens=count.input_tokens, output_tokens=count.output_tokens,
            latency_s=time.monotonic() - started, attempts=count.backend_calls,
        ))

    def _store_failure(self, spec, request, reply, error, count, started) -> None:
        self.cache.put(CallRecord(
            key=request.key, status="failed", spec=call_label(spec), provider=self.backend.provider,
            model=self.backend.model, request=json.dumps(request.messages), raw=reply.text if reply else None,
            finish_reason=reply.finish_reason if reply else None, input_tokens=count.input_tokens,
            output_tokens=count.output_tokens, latency_s=time.monotonic() - started,
            attempts=count.backend_calls, error=redact(error),
        ))


