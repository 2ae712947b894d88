"""The only code that talks to a model: the gateway (`LLM`), its backends, cache, limits and errors."""

from pipeline.llm.gateway import (
    CHAT_FINGERPRINT,
    LLM,
    REASK,
    RESAMPLE,
    CacheMiss,
    CallFailed,
    ChatReply,
    ConfigError,
    LLMError,
    LLMSettings,
    UsageSummary,
    call_label,
    first_ask,
    listen,
    listen_notices,
)

__all__ = ["LLM", "LLMError", "ConfigError", "CacheMiss", "CallFailed", "LLMSettings", "UsageSummary", "ChatReply",
           "call_label", "first_ask", "listen", "listen_notices", "REASK", "RESAMPLE", "CHAT_FINGERPRINT"]
