"""The filler pool: persona-neutral sessions generated once per dataset, used to reach token budgets."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel

from pipeline.beats import content_words, mentioned
from pipeline.budget import with_token_counts
from pipeline.llm import LLM
from pipeline.rng import derive_rng
from pipeline.specs import FILLER
from schemas.config import RunConfig
from schemas.conversation import Session, SessionWithTurns, Turn
from schemas.drafts import FillerContext, small_talk_draft
from schemas.ids import stable_id

SUBJECTS = Path(__file__).parent / "data" / "filler_subjects.yaml"


@cache
def filler_subjects() -> tuple[str, ...]:
    return tuple(yaml.safe_load(SUBJECTS.read_text(encoding="utf-8"))["subjects"])


def write_filler_pool(*, llm: LLM, config: RunConfig, start: int = 0, count: int | None = None) -> list[SessionWithTurns]:
    """Filler sessions ``start .. start+count`` (default: the configured pool) on seeded everyday subjects.

    Session i is the same whatever ``count`` is, so a pool can grow; failed calls are skipped, not faked.
    """
    n = config.text.filler_exchanges
    count = config.text.filler_pool_size if count is None else count
    spec = replace(FILLER, output=small_talk_draft(n))
    indices = range(start, start + count)
    subjects = [filler_subject(config.seed, index) for index in indices]
    drafts = llm.generate_each(spec, [FillerContext(subject=s, n_exchanges=n) for s in subjects],
                               sample_index=list(indices))
    return [filler_session(index, subject, draft, config=config, model=llm.name)
            for index, subject, draft in zip(indices, subjects, drafts, strict=True) if draft is not None]


def filler_subject(run_seed: int, index: int) -> str:
    """The subject of filler session ``index``: a seeded permutation, cycled."""
    subjects = list(filler_subjects())
    cycle, offset = divmod(index, len(subjects))
    derive_rng(run_seed, "filler", cycle).shuffle(subjects)
    return subjects[offset]


def filler_session(index: int, subject: str, draft: BaseModel, *, config: RunConfig, model: str) -> SessionWithTurns:
    """Pure: a filler draft -> a stored session (no persona, kind filler)."""
    sid = stable_id("fil", config.seed, index, subject)
    turns = []
    for ex in draft.exchanges:
        for role, text in (("user", ex.user), ("assistant", ex.assistant)):
            turns.append(Turn(session_id=sid, turn_index=len(turns), role=role, content=" ".join(text.split())))
    session = Session(session_id=sid, persona_id=None, topic=f"filler: {subject}", period=None, time=config.start_date,
                      kind="filler", n_turns=len(turns), n_tokens=0, provenance={"model": model, "subject": subject, "index": str(index)})
    return with_token_counts(SessionWithTurns(session=session, turns=turns))


def filter_filler(pool: list[SessionWithTurns], items: set[str]) -> tuple[list[SessionWithTurns], int]:
    """Drop filler sessions that mention any of the dataset's preference items; returns (kept, dropped).

    "Mention" is :func:`pipeline.beats.mentioned` over the whole session (a substring inside a longer
    word does not count for items with content words). An inverted index from words to
    sessions keeps this fast when thousands of items meet hundreds of sessions.
    """
    texts = [" ".join(t.content for t in swt.turns) for swt in pool]
    folded = [t.casefold() for t in texts]
    words = [content_words(t) for t in texts]
    postings: dict[str, set[int]] = defaultdict(set)
    for i, ws in enumerate(words):
        for w in ws:
            postings[w].add(i)
    offending: set[int] = set()
    for item in items:
        item_words, item_folded = content_words(item), item.casefold()
        candidates = set().union(*(postings.get(w, set()) for w in item_words)) if item_words else range(len(pool))
        offending.update(i for i in candidates
                         if i not in offending and mentioned(folded[i], words[i], item_folded, item_words))
    kept = [swt for i, swt in enumerate(pool) if i not in offending]
    return kept, len(pool) - len(kept)


def filler_need(config: RunConfig, own_tokens: list[int]) -> int:
    """Filler tokens the largest context needs: its budget minus the smallest persona's own share of it,
    plus a margin for packing whole sessions (a tenth of the budget, at most 1,000 tokens)."""
    budget = max(config.assembly.budgets)
    own = min(own_tokens, default=0)
    return budget - min(own, int(budget * config.assembly.max_persona_fraction)) + min(1000, budget // 10)
