"""The filler pool's top-up: drop filler that names a dataset item, then add sessions until the pool can fill
the largest budget, in rounds sized by the shortfall."""

from __future__ import annotations

import math

from pipeline.llm import LLM
from pipeline.run.checkpoint import PersonaResult
from pipeline.run.estimate import OUTPUT_TOKENS
from pipeline.run.spec import RunSpec
from pipeline.s3_text.filler import (
    filler_need,
    filter_filler,
    sharegpt_filler,
    write_filler_pool,
)
from schemas.config import RunConfig
from schemas.conversation import SessionWithTurns
from schemas.llm import UsageSummary

FILLER_BATCH_MAX = 64  # most filler calls one top-up round asks for


def top_up_size(shortfall: int, kept: list[SessionWithTurns], config: RunConfig) -> int:
    """Filler calls for one top-up round: the shortfall over the mean kept session, a quarter more for
    calls that fail or name a dataset item; at least 1, at most ``FILLER_BATCH_MAX``."""
    sizes = [s.session.n_tokens for s in kept]
    # before any session is kept, the plan's typical exchange size (pipeline.run.estimate) is the guess
    per_session = sum(sizes) / len(sizes) if sizes else OUTPUT_TOKENS["small_talk"] * config.text.filler_exchanges
    return max(1, min(FILLER_BATCH_MAX, math.ceil(1.25 * shortfall / max(per_session, 1.0))))


def complete_filler(spec: RunSpec, pool: list[SessionWithTurns], items: set[str],
                    own_tokens: list[int]) -> tuple[list[SessionWithTurns], int, UsageSummary]:
    """Drop filler that names any dataset item, then add sessions until the pool can fill the largest budget.

    Filler session i is the same whatever the pool size, so a grown pool is as reproducible as the first one.
    Each round asks for about as many sessions as the shortfall needs (not a fixed batch): on the embedded
    model a filler call takes seconds, and a round of calls nobody needs held up the whole run.
    """
    need = filler_need(spec.config, own_tokens)
    if spec.config.filler.source == "sharegpt":
        return (*sharegpt_filler(spec.config, items, need), UsageSummary())
    llm = LLM(spec.llm)
    kept, dropped = filter_filler(pool, items)
    start = max([spec.config.text.filler_pool_size] + [int(s.session.provenance["index"]) + 1 for s in pool])
    while (shortfall := need - sum(s.session.n_tokens for s in kept)) > 0:
        count = top_up_size(shortfall, kept, spec.config)
        fresh = write_filler_pool(llm=llm, config=spec.config, start=start, count=count)
        start += count
        if not fresh:
            break  # the model fails every filler call; assembly will say the pool is too small
        more, more_dropped = filter_filler(fresh, items)
        kept, dropped = kept + more, dropped + more_dropped
    return kept, dropped, llm.usage_summary()


def filler_inputs(results: list[PersonaResult]) -> tuple[set[str], list[int]]:
    """What the filler top-up needs from the personas: every item (filler may name none) and each one's own tokens."""
    items = {p.item for r in results for p in r.text.timeline.preferences}
    own = [sum(s.session.n_tokens for s in r.text.sessions) for r in results]
    return items, own
