"""The embedded engine's bookkeeping: a request (Job), a sequence of the context with its KV stream (Slot), what a
request returns (Completion), the engine's counters, and the loop guard that ends a degenerate reply."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field


def looping(generated: list[int], window: int = 64, min_distinct: int = 16, max_period: int = 40,
            min_loop: int = 48) -> bool:
    """Whether the end of ``generated`` is degenerate: a window of very few distinct tokens (counting,
    one repeated character), or one unit of up to ``max_period`` tokens repeated 3+ times over ``min_loop``.

    Calibrated on 66 SmolLM2 replies of 64+ tokens from real runs: every 64-token window with fewer than 24
    distinct tokens was a loop ("teim", "teim", ...; "1, 2, 3, ..."; one clause over and over), some of them
    inside replies that had passed validation; the other replies' least diverse windows ran 25-52 (median 40).
    """
    if len(generated) >= window and len(set(generated[-window:])) < min_distinct:
        return True
    for period in range(1, max_period + 1):
        unit, repeats = generated[-period:], 1
        while len(generated) >= (repeats + 1) * period and \
                generated[-(repeats + 1) * period:-repeats * period] == unit:
            repeats += 1
        if repeats >= 3 and repeats * period >= min_loop:
            return True
    return False


@dataclass
class Completion:
    """What the engine returns for one request."""

    text: str
    finish_reason: str  # stop | length | repetition
    prompt_tokens: int
    completion_tokens: int
    prompt_evaluated: int  # prompt tokens the engine computed (the rest came from the slot's cached prefix)


@dataclass
class Job:
    """One request: its prompt tokens, its sampling settings, and where it stands."""

    prompt: list[int]
    grammar: str | None
    temperature: float
    top_p: float
    seed: int
    max_tokens: int
    future: Future = field(default_factory=Future)
    generated: list[int] = field(default_factory=list)
    evaluated: int = 0
    chain: object = None
    gsampler: object = None
    pending: int | None = None  # the last sampled token, not yet in the KV cache
    abandoned: bool = False  # its caller stopped waiting: the slot is freed at the next step


@dataclass
class Slot:
    """A sequence of the context: the tokens its KV stream holds, and the job using it (None: free)."""

    seq: int
    tokens: list[int] = field(default_factory=list)
    job: Job | None = None
    used_at: float = 0.0


@dataclass
class EngineStats:
    """Counters since the engine started (for benchmarks and the run's notes)."""

    prompt_tokens: int = 0
    prompt_evaluated: int = 0
    generated: int = 0
    decode_steps: int = 0
    grammar_resamples: int = 0  # tokens the grammar rejected: resampled among the tokens it allows
    grammar_full: int = 0  # of those, resampled over the whole vocabulary
    prefix_copies: int = 0
    moves: int = 0  # running sequences moved down to close a gap in the slots (see BatchEngine._compact)
    ubatches: int = 0  # graph evaluations of the decoding steps: one per run of consecutive slots
    prefill_s: float = 0.0  # evaluating prompts
    decode_s: float = 0.0  # decoding and sampling the sequences under way
    busy_s: float = 0.0
    widths: int = 0  # sequences decoded, summed over the decoding passes (their mean width: widths / decode_steps)

    def since(self, earlier: EngineStats) -> EngineStats:
        """The counts made after ``earlier`` (a copy taken before a run, in a process that serves several)."""
        return self.plus(earlier, sign=-1)

    def plus(self, other: EngineStats, sign: int = 1) -> EngineStats:
        return EngineStats(**{name: getattr(self, name) + sign * getattr(other, name)
                              for name in self.__dataclass_fields__})

    def figures(self) -> dict[str, float]:
        """The counters a run's manifest keeps, with the ratios a reader wants: prompt tokens evaluated per token
        sent and per token generated, the mean sequences per decoding pass, generated tokens per second of
        decoding."""
        return {"generated": self.generated, "prompt_sent": self.prompt_tokens,
                "prompt_evaluated": self.prompt_evaluated,
                "evaluated_per_sent": round(self.prompt_evaluated / max(self.prompt_tokens, 1), 3),
                "evaluated_per_generated": round(self.prompt_evaluated / max(self.generated, 1), 3),
                "decode_passes": self.decode_steps,
                "mean_width": round(self.widths / max(self.decode_steps, 1), 2),
                "generated_per_decode_s": round(self.generated / self.decode_s, 1) if self.decode_s else 0.0,
                "prefill_s": round(self.prefill_s, 1), "decode_s": round(self.decode_s, 1),
                "busy_s": round(self.busy_s, 1)}


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
