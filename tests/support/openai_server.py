"""A loopback OpenAI-compatible server for tests and benchmarks (stdlib only, threaded, keep-alive).

    with OpenAIServer(latency_s=0.2) as server:      # server.base_url -> http://127.0.0.1:PORT/v1
        server.schedule(0, "rate_limit")              # fault on the first chat request
        ...
        assert server.requests == 3

Answers are valid instances of the request's json_schema response format (seeded by the request body).
Faults: rate_limit (429 + Retry-After), server_error (500), malformed (content is not JSON),
length (finish_reason=length), slow (sleeps `slow_s` before answering).
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

from pipeline.llm_fake import SchemaFaker

ServerFault = Literal["rate_limit", "server_error", "malformed", "length", "slow"]


def schema_answer(body: dict) -> str:
    """A JSON instance of the body's response_format schema, seeded by the body."""
    schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {"type": "object"})
    seed = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).digest()
    return json.dumps(SchemaFaker(schema, random.Random(seed)).build(schema))


class OpenAIServer:
    """Serves /v1/chat/completions and /v1/models on 127.0.0.1; counts chat requests."""

    def __init__(self, *, latency_s: float = 0.0, models: tuple[str, ...] = ("test-model",),
                 retry_after_s: float = 0.1, slow_s: float = 5.0, api_key: str | None = None,
                 responder: Callable[[dict], str] = schema_answer) -> None:
        self.latency_s = latency_s
        self.models = models
        self.retry_after_s = retry_after_s
        self.slow_s = slow_s
        self.api_key = api_key
        self.responder = responder
        self.requests = 0
        self.bodies: list[dict] = []
        self.faults: dict[int, ServerFault] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        """The URL to use as OPENAI_BASE_URL."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def schedule(self, index: int, fault: ServerFault) -> None:
        """Inject `fault` on the chat request with this 0-based index."""
        self.faults[index] = fault

    def start(self) -> OpenAIServer:
        """Start serving in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def next_request(self, body: dict) -> ServerFault | None:
        """Count one chat request and return the fault scheduled for it."""
        with self._lock:
            index = self.requests
            self.requests += 1
            self.bodies.append(body)
        return self.faults.get(index)


def _completion(body: dict, content: str, finish_reason: str) -> dict:
    """A chat.completion object."""
    prompt = sum(len(m.get("content") or "") for m in body.get("messages", [])) // 4 + 1
    return {
        "id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", "test-model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": finish_reason, "logprobs": None}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": len(content) // 4 + 1,
                  "total_tokens": prompt + len(content) // 4 + 1},
    }


def _handler_for(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to `server`'s state."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args) -> None:  # noqa: A002 - stdlib signature
            """Keep test output quiet."""

        def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _authorised(self) -> bool:
            if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                self._send(401, {"error": {"message": "invalid api key", "type": "invalid_request_error"}})
                return False
            return True

        def do_GET(self) -> None:
            if not self._authorised():
                return
            if self.path.rstrip("/").endswith("/models"):
                data = [{"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in server.models]
                self._send(200, {"object": "list", "data": data})
            else:
                self._send(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if not self._authorised():
                return
            fault = server.next_request(body)
            time.sleep(server.latency_s + (server.slow_s if fault == "slow" else 0))
            if fault == "rate_limit":
                self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}},
                           {"Retry-After": str(server.retry_after_s)})
            elif fault == "server_error":
                self._send(500, {"error": {"message": "boom", "type": "server_error"}})
            else:
                self._answer(body, fault)

        def _answer(self, body: dict, fault: ServerFault | None) -> None:
            content = server.responder(body)
            if fault == "malformed":
                content = content[: len(content) // 2] + ' "unterminated'
            finish = "length" if fault == "length" else "stop"
            if fault == "length":
                content = content[: len(content) // 2]
            self._send(200, _completion(body, content, finish))

    return Handler
