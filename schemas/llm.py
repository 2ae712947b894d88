"""Settings and accounting models of the LLM gateway (pipeline/llm.py)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class Price(BaseModel):
    """USD per million tokens for one model."""

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


class LLMSettings(BaseModel):
    """Everything the gateway needs; only sampling fields and `llm` reach the cache key."""

    model_config = ConfigDict(extra="forbid")

    llm: str | None = Field(
        default=None,
        description="Backend string: 'openai:<model>', 'local', 'local:<path.gguf>' or 'fake[?faults]'. "
        "None: the LLM environment variable, else openai when OPENAI_API_KEY is set, else local.",
    )
    temperature: float = Field(default=0.7, ge=0, le=2)
    top_p: float = Field(default=0.95, gt=0, le=1)
    max_tokens: int = Field(default=1024, ge=1)
    max_tokens_ceiling: int = Field(default=4096, ge=1, description="The largest cap a re-ask of a reply cut at "
                                    "its token cap may ask for (each such re-ask doubles the cap).")
    seed: int = Field(default=0, description="Sampling seed; the backend gets seed + sample_index.")
    timeout_s: float = Field(default=120.0, gt=0, description="Transport timeout of one try (the embedded model "
                             "has none: its token cap bounds a call).")
    max_concurrency: int = Field(default=16, ge=1, description="In-flight requests per backend, per process, and "
                                 "by default the personas a run processes at once; the embedded model decodes that "
                                 "many together (on 2 cores 16 sequences a pass is llama.cpp's best width; `make "
                                 "bench`). rpm and tpm bound a hosted API further.")
    rpm: int | None = Field(default=None, ge=1, description="Requests per minute budget per backend.")
    tpm: int | None = Field(default=None, ge=1, description="Tokens per minute budget per backend.")
    max_retries: int = Field(default=5, ge=0, description="Transport retries (429, 5xx, timeouts).")
    max_retry_after_s: float = Field(default=60.0, ge=0, description="Longest wait a 429's Retry-After may ask "
                                     "for (a longer one is cut to this, and every wait of 5 s or more is said).")
    call_timeout_s: float = Field(default=300.0, gt=0, description="Bound of one whole call, its retries and "
                                  "waits included (the embedded model has none: its token cap bounds a call).")
    connect_timeout_s: float = Field(default=10.0, gt=0, description="Seconds to open a connection to the server.")
    max_failed_share: float = Field(default=0.05, ge=0, le=1, description="Largest share of a run's calls that "
                                    "may go unanswered (transport failures, server errors, cache-only misses; not "
                                    "replies the checks rejected) before the run fails closed and publishes nothing.")
    reask: int = Field(default=2, ge=0, description="Re-asks that feed a validation error back.")
    backoff_s: float = Field(default=0.5, ge=0, description="First retry delay; doubles, with jitter.")
    backoff_max_s: float = Field(default=30.0, ge=0)
    cache_path: Path = Path("outputs/.cache/llm.sqlite")
    cache_only: bool = Field(default=False, description="Fail on any cache miss instead of calling a model.")
    n_ctx: int = Field(default=2048, ge=256, description="Context window of the embedded model, per call in "
                       "flight: each of its max_concurrency slots holds this many tokens. 2048 fits the longest "
                       "generation request (prompt and token cap, about 1,400) with room. `personagen eval "
                       "--window` sets it.")
    n_threads: int | None = Field(default=None, ge=1, description="Embedded model threads; None = all cores.")
    prices: dict[str, Price] = Field(default_factory=dict, description="Model name -> price.")


class TokenCount(BaseModel):
    """Token and cost totals for one slice of the calls (a stage, a model, or everything)."""

    calls: int = 0
    cache_hits: int = 0
    backend_calls: int = 0
    retries: int = 0
    reasks: int = 0
    failures: int = 0
    transport_failures: int = 0  # of the failures, calls the model never answered (transport, server, cache-only miss)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, other: TokenCount) -> None:
        """Accumulate `other` into self."""
        for name in type(self).model_fields:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class UsageSummary(BaseModel):
    """Totals for the run manifest: overall, per stage and per model."""

    total: TokenCount = Field(default_factory=TokenCount)
    by_stage: dict[str, TokenCount] = Field(default_factory=dict)
    by_model: dict[str, TokenCount] = Field(default_factory=dict)

    def record(self, stage: str, model: str, count: TokenCount) -> None:
        """Add one call's counts to the total, its stage and its model."""
        self.total.add(count)
        self.by_stage.setdefault(stage, TokenCount()).add(count)
        self.by_model.setdefault(model, TokenCount()).add(count)

    def merge(self, other: UsageSummary) -> None:
        """Add another summary (e.g. from a second gateway instance) into this one."""
        self.total.add(other.total)
        for stage, count in other.by_stage.items():
            self.by_stage.setdefault(stage, TokenCount()).add(count)
        for model, count in other.by_model.items():
            self.by_model.setdefault(model, TokenCount()).add(count)


class PingContext(BaseModel):
    """Input of the gateway's self-test prompt (prompts/gateway/ping.jinja)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"persona": "A retired teacher in Lisbon who walks by the river every morning.", "topic": "books"},
    ]})

    persona: str
    topic: str


class PingReply(BaseModel):
    """A one-item answer, small enough for the embedded model to write in about a second."""

    item: str = Field(min_length=2, max_length=60, description="One concrete thing this person would enjoy.")

    @classmethod
    def fake_output(cls, context: PingContext, rng) -> PingReply:
        """Fake-backend hook: an item that names the topic."""
        return cls(item=f"a {context.topic} pick no. {rng.randint(1, 99)}")
