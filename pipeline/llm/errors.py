"""Exceptions of the LLM gateway; each str() is one line a user can act on."""

from __future__ import annotations

from pipeline.errors import UserError


class LLMError(Exception):
    """Base class of every gateway error."""


class ConfigError(LLMError, UserError):
    """The backend cannot work as configured (missing key, unreachable server, unknown model)."""


class CacheError(LLMError, UserError):
    """The response cache file cannot be used (not a cache, damaged, unwritable)."""


class CacheMiss(LLMError, UserError):
    """cache_only mode and the request is not cached."""


class CallFailed(LLMError):
    """A call exhausted its retries and re-asks; it is stored as a failure and retried next run."""


class TransportFailed(CallFailed):
    """A call the model never answered: its transport failed on every try (or the server refused it)."""


class PromptTooLong(CallFailed):
    """The prompt does not fit the model's context, counted in the model's own tokens: no retry can help."""


class ContentRejected(CallFailed):
    """The model answered, but no reply passed the checks after every re-ask."""


class TransientError(LLMError):
    """A transport failure worth retrying (5xx, timeout, dropped connection)."""


class RateLimited(TransientError):
    """HTTP 429: the backend pauses for `retry_after_s` before anyone sends again."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Interrupted(BaseException):
    """The run is stopping (Ctrl-C, SIGTERM): no further model calls are made.

    Not an LLMError (nor an Exception), so no stage falls back to code-written text, no task retries,
    and no half-finished persona is checkpointed; every call that completed is already in the cache.
    """
