"""The filler pool: persona-neutral sessions used to reach token budgets.

By default they are real conversations (ShareGPT, :mod:`pipeline.s3_text.sharegpt`), picked in a seeded order
and conflict-filtered against every persona item, with no model call; ``filler.source: llm`` has the
model write them on seeded everyday subjects instead.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel

from pipeline.checks.safety import safety_problem
from pipeline.checks.verdicts import heard
from pipeline.llm import LLM
from pipeline.rng import derive_rng
from pipeline.s3_text.sharegpt import DATASET, SOURCE, TERMS, Conversation, sharegpt_pool
from pipeline.specs import FILLER
from pipeline.tokens import with_token_counts
from pipeline.words import content_words, mentioned
from schemas.config import RunConfig
from schemas.conversation import Session, SessionWithTurns, Turn
from schemas.drafts import FillerContext, small_talk_draft
from schemas.ids import stable_id

SUBJECTS = Path(__file__).parents[1] / "data" / "filler_subjects.yaml"


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
    sessions = [(draft, filler_session(index, subject, draft, config=config, model=llm.name))
                for index, subject, draft in zip(indices, subjects, drafts, strict=True) if draft is not None]
    return [s for draft, s in sessions if heard(draft, hostility_problem(s)) is None]


def hostility_problem(session: SessionWithTurns) -> str | None:
    """Why a filler session is hostile (:mod:`pipeline.checks.safety`), if any turn is: such a session is left out."""
    return next((p for t in session.turns if (p := safety_problem(t.content))), None)


def hostile(session: SessionWithTurns) -> bool:
    """Whether any turn of a filler session is hostile: such a session is left out."""
    return hostility_problem(session) is not None


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
    session = Session(session_id=sid, persona_id=None, topic=f"filler: {subject}", period=None, time=None,
                      kind="filler", n_turns=len(turns), n_tokens=0, provenance={"source": "llm", "model": model, "subject": subject, "index": str(index)})
    return with_token_counts(SessionWithTurns(session=session, turns=turns))


SHAREGPT_BATCH = 64  # conversations conflict-filtered at a time
SHAREGPT_GRAIN = 4  # a kept conversation is at most this fraction of the smallest budget ...
SHAREGPT_SPARE = 20  # ... and the pool holds at least this many of the largest allowed size, so budgets fill exactly


def sharegpt_session(conversation: Conversation, *, config: RunConfig) -> SessionWithTurns:
    """Pure: one ShareGPT conversation -> a stored filler session (no persona, kind filler, counted)."""
    sid = stable_id("fil", SOURCE, conversation.conversation_id)
    turns = []
    for user, assistant in conversation.exchanges:
        for role, text in (("user", user), ("assistant", assistant)):
            turns.append(Turn(session_id=sid, turn_index=len(turns), role=role, content=text))
    session = Session(session_id=sid, persona_id=None, topic=f"filler: {SOURCE}", period=None, time=None,
                      kind="filler", n_turns=len(turns), n_tokens=0,
                      provenance={"source": SOURCE, "conversation_id": conversation.conversation_id})
    return with_token_counts(SessionWithTurns(session=session, turns=turns))


def sharegpt_filler(config: RunConfig, items: set[str], need: int) -> tuple[list[SessionWithTurns], int]:
    """ShareGPT sessions in a seeded order, none naming a dataset item, until they hold ``need`` tokens.

    Returns (kept, dropped); dropped counts conflicting, hostile and over-long conversations. A conversation may
    take at most a quarter of the smallest budget, and the pool holds some spare, so that assembly can
    fill every budget to within its tolerance.
    """
    f = config.filler
    cap = min(f.max_session_tokens, max(200, min(config.assembly.budgets) // SHAREGPT_GRAIN))
    need = max(need, SHAREGPT_SPARE * cap)
    pool = sharegpt_pool(f.min_exchanges, f.max_exchanges, f.max_turn_chars)
    order = list(range(len(pool)))
    derive_rng(config.seed, "filler", SOURCE).shuffle(order)
    kept: list[SessionWithTurns] = []
    dropped, have = 0, 0
    for start in range(0, len(order), SHAREGPT_BATCH):
        if have >= need:
            break
        batch = [sharegpt_session(pool[i], config=config) for i in order[start:start + SHAREGPT_BATCH]]
        fitting = [s for s in batch if s.session.n_tokens <= cap and not hostile(s)]
        clean, conflicting = filter_filler(fitting, items)
        dropped += conflicting + len(batch) - len(fitting)
        for swt in clean:
            if have >= need:
                break
            kept.append(swt)
            have += swt.session.n_tokens
    return kept, dropped


def filler_sources(sessions: list[SessionWithTurns]) -> dict:
    """What the manifest and card record about the filler: its source(s), terms, and ShareGPT conversation ids."""
    ids = sorted(s.session.provenance["conversation_id"] for s in sessions if s.session.provenance.get("source") == SOURCE)
    sources = sorted({s.session.provenance.get("source", "llm") for s in sessions})
    out: dict = {"filler_source": ", ".join(sources) or "none"}
    if ids:
        out |= {"filler_dataset": DATASET, "filler_terms": TERMS, "filler_conversation_ids": ids}
    return out


def filter_filler(pool: list[SessionWithTurns], items: set[str]) -> tuple[list[SessionWithTurns], int]:
    """Drop filler sessions that mention any of the dataset's preference items; returns (kept, dropped).

    "Mention" is :func:`pipeline.s3_text.beats.mentioned` over the whole session (a substring inside a longer
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
