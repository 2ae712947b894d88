"""Throughput limits shared by every caller of one backend in a process, and the gateway's event loop."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ClassVar, TypeVar

from pipeline.llm.errors import Interrupted

T = TypeVar("T")


class Bucket:
    """A token bucket refilled at `per_minute / 60` per second; charges may drive it negative."""

    def __init__(self, per_minute: int) -> None:
        self.capacity = float(per_minute)
        self.level = float(per_minute)
        self.rate = per_minute / 60.0
        self.stamp = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    async def take(self, amount: float) -> None:
        """Wait until `amount` (capped at capacity) is available, then take it."""
        amount = min(amount, self.capacity)
        while True:
            self._refill()
            if self.level >= amount:
                self.level -= amount
                return
            await asyncio.sleep((amount - self.level) / self.rate)

    def charge(self, amount: float) -> None:
        """Take `amount` without waiting (tokens that turned out to be used)."""
        self._refill()
        self.level -= amount


class Throttle:
    """Concurrency slots, request and token budgets, and 429 pauses for one backend."""

    def __init__(self, max_concurrency: int, rpm: int | None, tpm: int | None) -> None:
        self.slots = asyncio.Semaphore(max_concurrency)
        self.requests = Bucket(rpm) if rpm else None
        self.tokens = Bucket(tpm) if tpm else None
        self.paused_until = 0.0

    async def ready(self, estimated_tokens: int) -> None:
        """Wait out any pause, then take one request and the estimated tokens from the budgets."""
        while (delay := self.paused_until - time.monotonic()) > 0:
            await asyncio.sleep(delay)
        if self.requests:
            await self.requests.take(1)
        if self.tokens:
            await self.tokens.take(estimated_tokens)

    def pause(self, seconds: float) -> None:
        """Stop every caller of this backend from sending for `seconds` (after a 429)."""
        self.paused_until = max(self.paused_until, time.monotonic() + seconds)

    def charge(self, tokens: int) -> None:
        """Account tokens beyond the estimate taken in `ready`."""
        if self.tokens and tokens > 0:
            self.tokens.charge(tokens)


class InlineExecutor(ThreadPoolExecutor):
    """The gateway loop's default executor: runs submitted work at once, on the loop thread.

    Libraries push short CPU work to the default executor (LangChain converts every chat response
    there); on the gateway loop that costs two GIL hand-offs per call, which at 16 concurrent calls
    shows up as latency. Blocking name resolution (asyncio's getaddrinfo/getnameinfo) still goes to
    real threads.
    """

    _BLOCKING = (socket.getaddrinfo, socket.getnameinfo)

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if fn in self._BLOCKING:
            return super().submit(fn, *args, **kwargs)
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the awaiting caller, as a thread would
            future.set_exception(exc)
        return future


class Runtime:
    """One background event loop per process that runs every gateway call; owns the throttles."""

    _instance: ClassVar[Runtime | None] = None
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(InlineExecutor(max_workers=4, thread_name_prefix="llm-gateway-dns"))
        self.throttles: dict[tuple, Throttle] = {}
        self.stopped: str | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, name="llm-gateway", daemon=True)
        self.thread.start()

    @classmethod
    def get(cls) -> Runtime:
        """The process's runtime, started on first use (and again after a fork)."""
        with cls._guard:
            if cls._instance is None or cls._instance.pid != os.getpid():
                cls._instance = cls()
            return cls._instance

    def throttle(self, key: tuple, max_concurrency: int, rpm: int | None, tpm: int | None) -> Throttle:
        """The shared throttle for `key` (backend identity plus limits); call on the loop thread."""
        full_key = (*key, max_concurrency, rpm, tpm)
        if full_key not in self.throttles:
            self.throttles[full_key] = Throttle(max_concurrency, rpm, tpm)
        return self.throttles[full_key]

    def stop(self, reason: str) -> None:
        """Refuse every call from now on (queued ones included) with `Interrupted`; the run is ending."""
        self.stopped = reason

    def resume(self) -> None:
        """Accept calls again (a long-lived process starting a new run after an interrupted one)."""
        self.stopped = None

    def check(self) -> None:
        """Raise `Interrupted` once the run is stopping."""
        if self.stopped is not None:
            raise Interrupted(self.stopped)

    def on_loop(self) -> bool:
        """True when the caller runs on the gateway loop's thread."""
        return threading.current_thread() is self.thread

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the gateway loop and block until it finishes (any thread but the loop's)."""
        if self.on_loop():
            coro.close()
            raise RuntimeError("blocking gateway call from the gateway loop; await agenerate() instead")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` on the gateway loop from any event loop."""
        if self.on_loop():
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))
