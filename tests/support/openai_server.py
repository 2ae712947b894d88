"""A loopback OpenAI-compatible server for tests and benchmarks (stdlib asyncio, keep-alive).

    with OpenAIServer(latency_s=0.2) as server:      # server.base_url -> http://127.0.0.1:PORT/v1
        server.schedule(0, "rate_limit")              # fault on the first chat request
        ...
        assert server.requests == 3

It runs its own event loop in a background thread, so injected latency costs no thread per request.
Answers are valid instances of the request's json_schema response format (seeded by the request body).
Faults: rate_limit (429 + Retry-After), server_error (500), malformed (content is not JSON),
length (finish_reason=length), slow (sleeps `slow_s` before answering), and bad 200 replies: empty_body,
not_json (a JSON content type on a body that is not), no_choices (a completion without `choices`); `html=True` answers every
request 200 with an HTML page (a proxy's or a captive portal's page instead of the API).
`python -m tests.support.openai_server 0.2` serves in the foreground and prints the base URL.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Literal

from pipeline.llm.fake import SchemaFaker

ServerFault = Literal["rate_limit", "server_error", "malformed", "length", "slow", "empty_body", "not_json",
                      "no_choices"]


class RawJSON(str):
    """A body sent as-is with a JSON content type (to serve replies that only claim to be JSON)."""


BAD_200 = {"empty_body": RawJSON(""), "not_json": RawJSON("upstream said: oops"),
           "no_choices": RawJSON('{"id": "x", "object": "chat.completion", "created": 0, "model": "test-model"}')}


def schema_answer(body: dict) -> str:
    """A JSON instance of the body's response_format schema, seeded by the body."""
    schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {"type": "object"})
    seed = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).digest()
    return json.dumps(SchemaFaker(schema, random.Random(seed)).build(schema))


class OpenAIServer:
    """Serves /v1/chat/completions and /v1/models on 127.0.0.1; counts chat requests."""

    def __init__(self, *, latency_s: float = 0.0, models: tuple[str, ...] = ("test-model",),
                 retry_after_s: float = 0.1, slow_s: float = 5.0, api_key: str | None = None,
                 responder: Callable[[dict], str] = schema_answer, html: bool = False) -> None:
        self.latency_s = latency_s
        self.models = models
        self.retry_after_s = retry_after_s
        self.slow_s = slow_s
        self.api_key = api_key
        self.responder = responder
        self.html = html
        self.requests = 0
        self.bodies: list[dict] = []
        self.faults: dict[int, ServerFault] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def base_url(self) -> str:
        """The URL to use as OPENAI_BASE_URL."""
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    def schedule(self, index: int, fault: ServerFault) -> None:
        """Inject `fault` on the chat request with this 0-based index."""
        self.faults[index] = fault

    def start(self) -> OpenAIServer:
        """Start serving in a background thread."""
        self._thread.start()
        start = asyncio.start_server(self._connection, "127.0.0.1", 0, backlog=256)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result()
        return self

    def stop(self) -> None:
        """Stop serving, drop open connections and end the loop thread."""
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    async def _shutdown(self) -> None:
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve HTTP/1.1 requests on one keep-alive connection."""
        try:
            while request := await _read_request(reader):
                status, payload, headers = await self._route(*request)
                writer.write(_response(status, payload, headers))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return  # client went away, or the server is stopping
        finally:
            writer.close()

    async def _route(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple:
        """(status, payload, extra headers) for one request."""
        if self.html:
            return 200, HTML_PAGE, {}
        if self.api_key and headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, {"error": {"message": "invalid api key", "type": "invalid_request_error"}}, {}
        if method == "GET" and path.rstrip("/").endswith("/models"):
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in self.models]
            return 200, {"object": "list", "data": data}, {}
        if method == "POST" and path.rstrip("/").endswith("/chat/completions"):
            return await self._chat(json.loads(body or b"{}"))
        return 404, {"error": {"message": f"no route for {method} {path}"}}, {}

    async def _chat(self, body: dict) -> tuple:
        """Count the request, wait the latency, answer or inject the scheduled fault."""
        index = self.requests
        self.requests += 1
        self.bodies.append(body)
        fault = self.faults.get(index)
        await asyncio.sleep(self.latency_s + (self.slow_s if fault == "slow" else 0))
        if fault == "rate_limit":
            return 429, {"error": {"message": "rate limited", "type": "rate_limit"}}, {"Retry-After": str(self.retry_after_s)}
        if fault == "server_error":
            return 500, {"error": {"message": "boom", "type": "server_error"}}, {}
        if fault in BAD_200:
            return 200, BAD_200[fault], {}
        content = self.responder(body)
        if fault in ("malformed", "length"):
            content = content[: len(content) // 2] + (' "unterminated' if fault == "malformed" else "")
        return 200, _completion(body, content, "length" if fault == "length" else "stop"), {}


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    """(method, path, lower-cased headers, body) of the next request, or None at end of stream."""
    line = await reader.readline()
    if not line.strip():
        return None
    method, path, _version = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", 0)))
    return method, path, headers, body


HTML_PAGE = "<!DOCTYPE html><html><head><title>Sign in</title></head><body><p>Please sign in.</p></body></html>"


def _response(status: int, payload: dict | str, headers: dict[str, str]) -> bytes:
    """One complete HTTP/1.1 response (JSON, or HTML for a str payload), written in a single send."""
    data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
    kind = "text/html; charset=utf-8" if isinstance(payload, str) and not isinstance(payload, RawJSON) \
        else "application/json"
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", f"Content-Type: {kind}",
             f"Content-Length: {len(data)}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data


def _completion(body: dict, content: str, finish_reason: str) -> dict:
    """A chat.completion object."""
    prompt = sum(len(m.get("content") or "") for m in body.get("messages", [])) // 4 + 1
    completion = len(content) // 4 + 1
    return {
        "id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", "test-model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": finish_reason, "logprobs": None}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def main() -> None:
    """Serve in the foreground (`python -m tests.support.openai_server 0.2`); prints the base URL."""
    import sys

    latency = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    server = OpenAIServer(latency_s=latency).start()
    print(server.base_url, flush=True)
    try:
        sys.stdin.read()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
