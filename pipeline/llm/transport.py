"""Sending one request to the backend: retries with backoff and jitter, the throttle (concurrency, requests and
tokens per minute), a 429's pause, the transport timeout and the call's overall bound."""

from __future__ import annotations

import asyncio
import time

from pipeline.errors import redact
from pipeline.llm.asks import describe_error, with_attempt
from pipeline.llm.backends import BackendReply, BackendRequest
from pipeline.llm.errors import RateLimited, TransientError, TransportFailed
from pipeline.llm.limits import Throttle
from pipeline.llm.notices import notice
from pipeline.tokens import count_tokens
from schemas.llm import TokenCount

NOTICE_WAIT_S = 5.0
# While a call waits longer than this for a server's answer or a rate limit's end, the terminal is told what
# it waits for, again every HEARTBEAT_S (once per gateway, however many calls wait together).
HEARTBEAT_S = 30.0


class Transport:
    """The gateway's transport half (mixed into :class:`pipeline.llm.gateway.LLM`, whose ``settings``,
    ``backend``, ``runtime``, ``_jitter`` and ``name`` it uses)."""

    async def _send(self, request: BackendRequest, count: TokenCount) -> BackendReply:
        """One answer from the backend, retrying transport failures with backoff and jitter."""
        throttle = self._throttle()
        # The estimate only feeds a tokens-per-minute budget; without one, skip the tokenizer pass.
        estimate = count_tokens("\n".join(m["content"] for m in request.messages)) if throttle.tokens else 0
        error: Exception | None = None
        bound = self.settings.call_timeout_s if self._timeout() is not None else None
        bound_name = "llm.call_timeout_s"
        if bound is not None and self.setup_bound_s is not None and self.setup_bound_s < bound:
            bound, bound_name = self.setup_bound_s, "the plan's measuring calls' bound"  # they give up sooner
        deadline = time.monotonic() + bound if bound else None
        for retry in range(self.settings.max_retries + 1):
            if retry:
                delay = self._delay(retry, error)
                if deadline is not None and time.monotonic() + max(delay, throttle.paused_until - time.monotonic()) \
                        >= deadline:
                    raise TransportFailed(f"no answer within {bound_name} ({bound:g} s) after {retry} "
                                          f"tries: {describe_error(error)}")
                count.retries += 1
                await asyncio.sleep(delay)
            self.runtime.check()
            await self._said(throttle.ready(estimate), "the server's rate limit (HTTP 429) to pass", deadline)
            attempt = with_attempt(request, retry)
            async with throttle.slots:
                self.runtime.check()  # a call that waited for its slot while the run was stopped
                count.backend_calls += 1
                timeout = self._timeout()
                if deadline is not None:
                    timeout = max(0.001, min(timeout, deadline - time.monotonic()))
                try:
                    answer = asyncio.wait_for(self.backend.complete(attempt), timeout)
                    reply = await (answer if timeout is None else self._said(answer, "the server's answer", deadline))
                except RateLimited as exc:
                    self._pause(throttle, exc, retry)
                    error = exc
                    continue
                except (TransientError, TimeoutError) as exc:
                    error = exc
                    continue
            if (text := redact(reply.text)) != reply.text:  # a server that echoes the key never gets it stored
                reply = reply.model_copy(update={"text": text})
            count.input_tokens += reply.input_tokens
            count.output_tokens += reply.output_tokens
            throttle.charge(reply.input_tokens + reply.output_tokens - estimate)
            return reply
        raise TransportFailed(f"transport failed after {self.settings.max_retries + 1} tries: {describe_error(error)}")

    async def _said(self, awaitable, what: str, deadline: float | None):
        """Await ``awaitable``; while it takes longer than ``HEARTBEAT_S``, say what the call waits for (one line
        per gateway each period, not one per waiting call)."""
        task = asyncio.ensure_future(awaitable)
        started = time.monotonic()
        try:
            while not (await asyncio.wait({task}, timeout=HEARTBEAT_S))[0]:
                now = time.monotonic()
                if now - self._heard_at >= HEARTBEAT_S * 0.9:
                    self._heard_at = now
                    limit = f"; gives up in {deadline - now:.0f} s" if deadline is not None else ""
                    notice(f"{self.name}: still waiting for {what} ({now - started:.0f} s so far{limit})")
            return task.result()
        finally:
            task.cancel()

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
