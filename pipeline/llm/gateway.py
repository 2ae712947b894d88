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
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from pydantic import BaseModel, ValidationError

from pipeline.errors import redact
from pipeline.llm.backends import Backend, BackendReply, BackendRequest
from pipeline.llm.cache import CacheKey, CallRecord, LLMCache
from pipeline.llm.errors import (
    CacheMiss,
    CallFailed,
    ConfigError,
    ContentRejected,
    LLMError,
    RateLimited,
    TransientError,
    TransportFailed,
)
from pipeline.llm.factory import make_backend, resolve_backend_string
from pipeline.llm.limits import Runtime, Throttle
from pipeline.prompting import PromptEnv, PromptSpec
from pipeline.tokens import count_tokens
from schemas.llm import LLMSettings, TokenCount, UsageSummary

__all__ = ["LLM", "LLMError", "ConfigError", "CacheMiss", "CallFailed", "LLMSettings", "UsageSummary", "ChatReply"]

# Called with (stage, count) as each call finishes, cached or not, from whichever thread ran it: a live
# progress display listens here (see `listen`).
_LISTENERS: list[Callable[[str, TokenCount], None]] = []
# Called with one line when a call waits long (a 429's Retry-After): the CLI's display shows it above its
# bars; with no listener it goes to stderr.
_NOTICES: list[Callable[[str], None]] = []
NOTICE_WAIT_S = 5.0
REASK = "Your previous reply was rejected: {problem}\nReply again with a corrected answer to the request above."
RESAMPLE = "(An earlier answer to this was rejected: {problem}.)"
CHAT_FINGERPRINT = "free-text-chat"


class ChatReply(BaseModel):
    """A free-text reply: text, usage, latency of the call that produced it, and whether it was cached."""

    text: str
    finish_reason: str = "stop"
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    cached: bool = False


class LLM:
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

    @property
    def name(self) -> str:
        """`provider:model` of the backend."""
        return f"{self.backend.provider}:{self.backend.model}"

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
        if hit is not None:
            self._record(stage, TokenCount(calls=1, cache_hits=1))
            return spec.output.model_validate_json(hit.output)
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
                output, problem = _validate(reply, spec.output)
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
                        request = _reasked(request, reply, problem, ask + 1)
                    else:
                        request = _resampled(request, problem, ask + 1)
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

    async def _send(self, request: BackendRequest, count: TokenCount) -> BackendReply:
        """One answer from the backend, retrying transport failures with backoff and jitter."""
        throttle = self._throttle()
        # The estimate only feeds a tokens-per-minute budget; without one, skip the tokenizer pass.
        estimate = count_tokens("\n".join(m["content"] for m in request.messages)) if throttle.tokens else 0
        error: Exception | None = None
        bound = self.settings.call_timeout_s if self._timeout() is not None else None
        deadline = time.monotonic() + bound if bound else None
        for retry in range(self.settings.max_retries + 1):
            if retry:
                delay = self._delay(retry, error)
                if deadline is not None and time.monotonic() + max(delay, throttle.paused_until - time.monotonic()) \
                        >= deadline:
                    raise TransportFailed(f"no answer within llm.call_timeout_s ({bound:g} s) after {retry} "
                                          f"tries: {_describe(error)}")
                count.retries += 1
                await asyncio.sleep(delay)
            self.runtime.check()
            await throttle.ready(estimate)
            attempt = _with_attempt(request, retry)
            async with throttle.slots:
                self.runtime.check()  # a call that waited for its slot while the run was stopped
                count.backend_calls += 1
                timeout = self._timeout()
                if deadline is not None:
                    timeout = max(0.001, min(timeout, deadline - time.monotonic()))
                try:
                    reply = await asyncio.wait_for(self.backend.complete(attempt), timeout)
                except RateLimited as exc:
                    self._pause(throttle, exc, retry)
                    error = exc
                    continue
                except (TransientError, TimeoutError) as exc:
                    error = exc
                    continue
            count.input_tokens += reply.input_tokens
            count.output_tokens += reply.output_tokens
            throttle.charge(reply.input_tokens + reply.output_tokens - estimate)
            return reply
        raise TransportFailed(f"transport failed after {self.settings.max_retries + 1} tries: {_describe(error)}")

    def _pause(self, throttle: Throttle, exc: RateLimited, retry: int) -> None:
        """Pause the backend for a 429: its Retry-After, capped at ``max_retry_after_s``; a long wait is said."""
        asked = exc.retry_after_s
        wait = min(asked if asked is not None else self._delay(retry + 1, exc), self.settings.max_retry_after_s)
        before = max(throttle.paused_until, time.monotonic())  # the end of the pause in force, if any
        throttle.pause(wait)
        if throttle.paused_until - before >= NOTICE_WAIT_S:  # a long new wait: once per pause, not per caller
            capped = f" (it asked for {asked:g} s; llm.max_retry_after_s caps it)" if asked and asked > wait else ""
            notice(f"{self.name}: the server is rate-limiting (HTTP 429): waiting {wait:.0f} s before sending "
                   f"again{capped}")

    def _timeout(self) -> float | None:
        """The transport timeout of one try; a backend with ``transport_timeout = False`` (the embedded model,
        bounded by its token cap) has none."""
        return self.settings.timeout_s if getattr(self.backend, "transport_timeout", True) else None

    def _delay(self, retry: int, error: Exception | None) -> float:
        """Exponential backoff with jitter; a 429 already paused the backend, so it adds only jitter."""
        if isinstance(error, RateLimited) and error.retry_after_s is not None:
            return self._jitter.uniform(0, 0.01)
        base = min(self.settings.backoff_max_s, self.settings.backoff_s * 2 ** (retry - 1))
        return base * self._jitter.uniform(0.5, 1.0)

    def _throttle(self) -> Throttle:
        s = self.settings
        identity = (self.backend.provider, self.backend.model, getattr(self.backend, "base_url", None))
        return self.runtime.throttle(identity, s.max_concurrency, s.rpm, s.tpm)

    def _cost(self, count: TokenCount) -> float:
        price = self.settings.prices.get(self.backend.model) or self.settings.prices.get(self.name)
        if price is None:
            return 0.0
        return (count.input_tokens * price.input_per_mtok + count.output_tokens * price.output_per_mtok) / 1e6

    def _record(self, stage: str, count: TokenCount) -> None:
        count.cost_usd = self._cost(count)
        with self._usage_lock:
            self._usage.record(stage, self.name, count)
        for listener in list(_LISTENERS):
            listener(stage, count)

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


def call_label(spec: PromptSpec) -> str:
    """What the cache records as a call's spec: its name and output model, e.g.
    ``expand_persona.inventory/InventoryDraft10`` (sized outputs carry their size, so the plan can tell
    a 10-item inventory call from a 4-item one)."""
    return f"{spec.name}/{spec.output.__name__}"


def first_ask(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The messages of a call's first ask, from those of any later ask (`_reasked`, `_resampled`)."""
    if any(m["role"] == "assistant" for m in messages):
        messages = messages[:next(i for i, m in enumerate(messages) if m["role"] == "assistant")]
    note = "\n\n" + RESAMPLE.split("{problem}")[0]
    last = messages[-1]["content"] if messages else ""
    if note in last:
        messages = [*messages[:-1], {**messages[-1], "content": last[:last.index(note)]}]
    return messages


def notice(text: str) -> None:
    """Say ``text`` (one line) to whoever watches: the notice listeners, else stderr."""
    if _NOTICES:
        for listener in list(_NOTICES):
            listener(text)
    else:
        print(text, file=sys.stderr, flush=True)


def listen_notices(listener: Callable[[str], None]) -> Callable[[], None]:
    """Send the gateway's notices (long waits) to ``listener``; returns the function that stops it."""
    _NOTICES.append(listener)
    return lambda: _NOTICES.remove(listener) if listener in _NOTICES else None


def listen(listener: Callable[[str, TokenCount], None]) -> Callable[[], None]:
    """Call ``listener(stage, count)`` for every call any gateway in this process finishes; returns the
    function that stops it. Listeners must be quick and thread-safe (calls finish on the gateway loop)."""
    _LISTENERS.append(listener)
    return lambda: _LISTENERS.remove(listener) if listener in _LISTENERS else None


def _validate(reply: BackendReply, output: type[BaseModel]) -> tuple[BaseModel | None, str]:
    """The parsed output, or None and a one-paragraph reason to feed back."""
    if reply.finish_reason in ("length", "content_filter"):
        return None, f"the reply stopped early (finish_reason={reply.finish_reason}); answer more briefly"
    if reply.finish_reason == "repetition":
        return None, "the reply fell into repeating itself and was cut off; write each part once, briefly"
    try:
        # strict=False: raw newlines inside strings (small models under a grammar write them) are accepted
        data = json.loads(reply.text, strict=False)
    except json.JSONDecodeError as exc:
        return None, f"it is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    try:
        return output.model_validate(data), ""
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors()[:8])
        return None, f"it did not match the required schema ({details})"


def _reasked(request: BackendRequest, reply: BackendReply, problem: str, ask: int) -> BackendRequest:
    """The request extended with the rejected reply (cut to what the token cap allows: a server that ignores
    ``max_tokens`` must not have its whole reply echoed back, re-ask after re-ask) and the reason."""
    messages = [*request.messages, {"role": "assistant", "content": _echo(reply.text, request.max_tokens)},
                {"role": "user", "content": REASK.format(problem=problem)}]
    return replace(request, messages=messages, attempt=100 * ask)


ECHO_CHARS_PER_TOKEN = 4


def _echo(text: str, max_tokens: int) -> str:
    """``text`` as a re-ask shows it: at most about ``max_tokens`` tokens, the cut said."""
    limit = ECHO_CHARS_PER_TOKEN * max_tokens
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit:,} more characters cut]"


def _resampled(request: BackendRequest, problem: str, ask: int) -> BackendRequest:
    """The original request, the reason added to its last message and a new seed: a fresh sample for
    backends whose rejected replies only mislead the next ask (a small local model copies its own loop)."""
    messages = [dict(m) for m in first_ask(request.messages)]  # one note, the latest, however many asks
    messages[-1]["content"] = f"{messages[-1]['content']}\n\n{RESAMPLE.format(problem=problem)}"
    return replace(request, messages=messages, seed=request.seed + 1000 * ask, attempt=100 * ask)


def _with_attempt(request: BackendRequest, retry: int) -> BackendRequest:
    """`attempt` numbers tries as 100 * re-ask + transport retry (seeds the fake backend's faults)."""
    return replace(request, attempt=request.attempt - request.attempt % 100 + retry)


def _describe(error: Exception | None) -> str:
    """One line naming a transport error."""
    if isinstance(error, TimeoutError):
        return "timed out"
    return redact(str(error).splitlines()[0]) if error and str(error) else type(error).__name__
