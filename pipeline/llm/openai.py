"""The `openai:<model>` backend: LangChain's ChatOpenAI with a json_schema response format.

Honours OPENAI_BASE_URL, so the same path serves OpenAI, vLLM, Ollama or a llama.cpp server.
Retries are the gateway's job, so the OpenAI client is built with max_retries=0.
"""

from __future__ import annotations

import os
import re
from functools import cached_property

import httpx
import openai
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI

from pipeline.errors import key_form_problem, redact
from pipeline.llm.backends import BackendReply, BackendRequest
from pipeline.llm.errors import CallFailed, ConfigError, RateLimited, TransientError
from schemas.llm import LLMSettings

DEFAULT_BASE_URL = "https://api.openai.com/v1"
NO_KEY = "sk-no-key-required"  # sent to an OPENAI_BASE_URL server when OPENAI_API_KEY is unset


class _PlainTextChatOpenAI(ChatOpenAI):
    """ChatOpenAI that hands plain-text messages to the SDK as `extra_body`.

    The SDK deep-walks `messages` against its TypedDicts on every call (about 1 ms of event-loop
    CPU per call here, a fifth of the whole client cost); for role/content string messages that
    walk changes nothing. Moving them to `extra_body`, which the SDK merges over the body unchanged,
    puts the same JSON on the wire. (The same work-around is reported upstream for the Anthropic
    SDK, anthropics/anthropic-sdk-python#1195.)
    """

    def _get_request_payload(self, input_, *, stop=None, **kwargs) -> dict:
        payload = super()._get_request_payload(input_, stop=stop, **kwargs)
        messages = payload.get("messages")
        if messages and all(set(m) <= {"role", "content"} and isinstance(m.get("content"), str) for m in messages):
            payload["extra_body"] = {**(payload.get("extra_body") or {}), "messages": messages}
            payload["messages"] = []
        return payload


class OpenAIBackend:
    """An OpenAI-compatible chat completions endpoint with structured output."""

    provider = "openai"

    def __init__(self, model: str, settings: LLMSettings) -> None:
        self.model = model
        self.settings = settings
        self.base_url = (os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        try:
            url = httpx.URL(self.base_url)
            url.port  # noqa: B018 -- a bad port is only found when read
        except (httpx.InvalidURL, ValueError, TypeError) as exc:
            raise ConfigError(f"OPENAI_BASE_URL {redact(self.base_url)!r}: not a URL ({exc})") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ConfigError(f"OPENAI_BASE_URL {redact(self.base_url)!r}: not an http(s) URL with a host")

    def _api_key(self) -> str:
        """OPENAI_API_KEY; a server of one's own (OPENAI_BASE_URL set) may need none, so it gets a placeholder."""
        key = os.environ.get("OPENAI_API_KEY")
        if not key and self.base_url != DEFAULT_BASE_URL:
            return NO_KEY
        if not key:
            raise ConfigError(f"OPENAI_API_KEY is not set (needed for LLM=openai:{self.model}); "
                              "set it, or use LLM=local for the embedded model")
        problem = key_form_problem(key)
        if problem:  # it could not go into a header: say so before any request, never showing the value
            raise ConfigError(f"OPENAI_API_KEY {problem} (a stray newline or a pasted quote?); "
                              "set it to the key alone")
        return key

    @cached_property
    def chat(self) -> ChatOpenAI:
        """The LangChain chat model; built on first use, on the gateway loop."""
        s = self.settings
        # connect bounded on its own; a try as a whole (first byte and total) by the gateway's timeout.
        # openai.Timeout is the SDK's own HTTP library's class (httpx before openai 3.x's move to httpx2,
        # httpx2 after): an httpx.Timeout is refused by the newer SDK with a TypeError on every call.
        timeout = openai.Timeout(s.timeout_s, connect=min(s.connect_timeout_s, s.timeout_s))
        return _PlainTextChatOpenAI(model=self.model, api_key=self._api_key(), base_url=self.base_url,
                                    timeout=timeout, max_retries=0, temperature=s.temperature, top_p=s.top_p,
                                    max_completion_tokens=s.max_tokens)

    def preflight(self) -> None:
        """Check the key, that the server answers, and that it serves the model."""
        client = openai.OpenAI(api_key=self._api_key(), base_url=self.base_url, timeout=10, max_retries=0)
        try:
            raw = client.models.with_raw_response.list()
            kind = raw.headers.get("content-type", "")
            if "json" not in kind:
                raise ConfigError(f"{self.base_url}/models answered HTTP {raw.status_code} with {kind or 'no type'}"
                                  f"{_html_hint(raw.text)}, not the OpenAI API: check OPENAI_BASE_URL")
            served = [m.id for m in raw.parse()]
        except (ValueError, TypeError, AttributeError) as exc:  # JSON in name only: empty, not JSON, no `data`
            raise ConfigError(f"{self.base_url}/models answered HTTP 200 with a body that is not a model list "
                              f"({type(exc).__name__}): check OPENAI_BASE_URL") from None
        except openai.AuthenticationError as exc:
            raise ConfigError(f"{self.base_url} rejected OPENAI_API_KEY (HTTP {exc.status_code})") from None
        except openai.APIConnectionError as exc:
            raise ConfigError(f"cannot reach OPENAI_BASE_URL {self.base_url}: {_reason(exc)}") from None
        except openai.APIStatusError:
            return  # some OpenAI-compatible servers do not list models; the first call will tell
        finally:
            client.close()
        if served and self.model not in served:
            shown = ", ".join(sorted(served)[:8])
            raise ConfigError(f"model {self.model!r} is not served by {self.base_url} (it serves: {shown})")

    async def complete(self, request: BackendRequest) -> BackendReply:
        """One chat completion constrained by the output model's JSON schema."""
        response_format = {"type": "json_schema", "json_schema": {
            "name": request.output.__name__, "schema": request.schema, "strict": False}}
        chat = self.chat  # built outside the try: a fault of our own client is no bad reply of the server's
        try:
            # Sent as extra_body: the same request on the wire, without the SDK's per-call type walk over
            # response_format (about 1 ms of event-loop CPU per call, which caps throughput at high concurrency).
            extra_body = {} if request.free_text else {"response_format": response_format}
            message = await chat.ainvoke(request.messages, extra_body=extra_body,
                                              seed=request.seed, temperature=request.temperature,
                                              top_p=request.top_p, max_completion_tokens=request.max_tokens)
        except openai.LengthFinishReasonError as exc:
            return _reply_from_completion(exc.completion, "length")
        except openai.ContentFilterFinishReasonError:
            return BackendReply(text="", finish_reason="content_filter")
        except openai.APIError as exc:
            raise _map_error(exc) from None
        except ValueError as exc:  # LangChain's "Unexpected response type": a 200 that is not a completion
            if "Unexpected response type" in str(exc):
                raise ConfigError(f"{self.base_url}/chat/completions answered with something that is not a "
                                  f"completion{_html_hint(str(exc))}: check OPENAI_BASE_URL") from None
            raise _bad_reply(self.base_url, exc) from None  # an empty or non-JSON body (JSONDecodeError)
        except (TypeError, KeyError, AttributeError, IndexError) as exc:  # a JSON body without `choices`
            raise _bad_reply(self.base_url, exc) from None
        return _reply(message)


def _bad_reply(base_url: str, exc: Exception) -> TransientError:
    """A 200 whose body is not a usable completion (empty, not JSON, no choices): worth another try."""
    what = "a body that is not JSON" if isinstance(exc, ValueError) else "JSON that is not a chat completion"
    return TransientError(f"{base_url}/chat/completions answered 200 with {what} "
                          f"({type(exc).__name__}: {redact(str(exc).splitlines()[0][:120]) if str(exc) else ''})")


def _reply(message: AIMessage) -> BackendReply:
    """Text, finish reason and usage of a LangChain AI message."""
    usage = message.usage_metadata or {}
    content = message.content if isinstance(message.content, str) else str(message.content)
    return BackendReply(text=content, finish_reason=message.response_metadata.get("finish_reason") or "stop",
                        input_tokens=usage.get("input_tokens", 0), output_tokens=usage.get("output_tokens", 0))


def _reply_from_completion(completion, finish_reason: str) -> BackendReply:
    """The partial reply carried by the SDK's LengthFinishReasonError."""
    text = completion.choices[0].message.content or "" if completion.choices else ""
    usage = completion.usage
    return BackendReply(text=text, finish_reason=finish_reason,
                        input_tokens=usage.prompt_tokens if usage else 0,
                        output_tokens=usage.completion_tokens if usage else 0)


def _map_error(exc: openai.APIError) -> Exception:
    """The gateway error for an OpenAI SDK error."""
    if isinstance(exc, openai.RateLimitError):
        return RateLimited(f"429 from server: {redact(exc.message)}", retry_after_s=_retry_after(exc.response))
    if isinstance(exc, openai.APITimeoutError):
        return TransientError("request timed out")
    if isinstance(exc, openai.APIConnectionError):
        return TransientError(f"connection failed: {_reason(exc)}")
    if isinstance(exc, openai.APIStatusError) and exc.status_code >= 500:
        return TransientError(f"HTTP {exc.status_code} from server")
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError | openai.NotFoundError):
        return ConfigError(f"HTTP {exc.status_code}: {redact(exc.message)}")
    return CallFailed(f"request rejected: {redact(exc.message)}")


def _html_hint(text: str) -> str:
    """' (an HTML page titled "...")' when a reply is HTML, else ''."""
    match = re.search(r"<title>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    if match:
        return f' (an HTML page titled "{" ".join(match.group(1).split())[:80]}")'
    return " (an HTML page)" if "<html" in text.lower() else ""


def _retry_after(response) -> float | None:
    """Seconds from a Retry-After (or retry-after-ms) header, when present and numeric."""
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        try:
            return float(headers[name]) * scale
        except (KeyError, ValueError):
            continue
    return None


def _reason(exc: Exception) -> str:
    """The innermost cause of a connection error, in one line."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return redact(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
