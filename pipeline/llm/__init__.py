"""The only code that talks to a model: the gateway (`LLM`), its backends, cache, limits and errors."""

from pipeline.llm.asks import REASK, RESAMPLE, call_label, first_ask
from pipeline.llm.gateway import (
    CHAT_FINGERPRINT,
    LLM,
    CacheMiss,
    CallFailed,
    ChatReply,
    ConfigError,
    LLMError,
    LLMSettings,
    UsageSummary,
)
from pipeline.llm.notices import listen, listen_notices

__all__ = ["LLM", "LLMError", "ConfigError", "CacheMiss", "CallFailed", "LLMSettings", "UsageSummary", "ChatReply",
           "call_label", "first_ask", "listen", "listen_notices", "REASK", "RESAMPLE", "CHAT_FINGERPRINT"]
