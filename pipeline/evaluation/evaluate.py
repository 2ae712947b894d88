"""`personagen eval`: PersonaMem's discriminative protocol over a published dataset version.

Each placement becomes one call: the history up to the placement's end_index (none in `no-context`
mode, the leakage baseline), then a user message with the question, the options "(a) ... (d)" and
an instruction to answer after `<final_answer>`. Replies are free text through the gateway
(`LLM.achat`: cached, throttled, retried, so a rerun resumes) and parsed by pipeline.evaluation.answer_parse.
A prompt that does not fit the window is skipped and counted, never truncated.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from pipeline.dataset import Dataset, load, write_eval
from pipeline.dataset.budget import message_tokens
from pipeline.errors import UserError
from pipeline.evaluation.answer_parse import letters, parse_answer
from pipeline.evaluation.summary import (
    EvalRow,
    EvalSummary,
    accuracy,
    artifact_key,
    baselines,
    distance_bucket,
    group_accuracies,
    publish_artifact,
    render_markdown,
)
from pipeline.llm import LLM, CallFailed
from schemas.context import ChatMessage, Placement
from schemas.query import Query

Mode = Literal["mcq", "no-context"]
INSTRUCTION = ("Find the most appropriate response to my question above and give your final answer "
               "{choices} after the special token <final_answer>.")
OPENAI_WINDOW = 128_000
FAKE_WINDOW = 1_000_000
BATCH = 64


class EvalSettings(BaseModel):
    """Which placements to ask and how; `window` None = the backend's default window."""

    model_config = ConfigDict(extra="forbid")

    mode: Mode = "mcq"
    budget: int | None = Field(default=None, gt=0, description="only contexts of this token budget")
    limit: int | None = Field(default=None, ge=1, description="at most this many placements")
    window: int | None = Field(default=None, ge=1, description="the model's context window in tokens")
    n_boot: int = Field(default=1000, ge=10)
    seed: int = 0


class AnswerKey(BaseModel):
    """The call context of an eval call: only the fake backend's `answer=correct` script reads it."""

    correct_letter: str


class EvalItem(BaseModel):
    """One placement to ask, with its query and budget."""

    query: Query
    placement: Placement
    budget_tokens: int


class EvalRun(BaseModel):
    """Where a run was written and its summary."""

    path: Path
    summary: EvalSummary
    markdown: str


def default_window(llm: LLM) -> int:
    """The model's context window: the embedded model's n_ctx, 128k for OpenAI-compatible models."""
    provider = llm.backend.provider
    if provider == "local":
        return llm.settings.n_ctx
    return FAKE_WINDOW if provider == "fake" else OPENAI_WINDOW


def select_items(ds: Dataset, settings: EvalSettings) -> list[EvalItem]:
    """Placements joined with their queries and budgets, in a stable order, filtered and limited."""
    queries = {q.query_id: q for q in ds.queries}
    budgets = {c.context_id: c.budget_tokens for c in ds.contexts}
    items = [EvalItem(query=queries[p.query_id], placement=p, budget_tokens=budgets[p.context_id])
             for p in sorted(ds.placements, key=lambda p: (budgets[p.context_id], p.context_id, p.end_index,
                                                          p.query_id))
             if settings.budget is None or budgets[p.context_id] == settings.budget]
    if not items:
        found = sorted(set(budgets.values()))
        raise UserError(f"{ds.path}: no placements at budget {settings.budget} (budgets: {found})")
    return _spread(items, settings.limit) if settings.limit else items


def _spread(items: list[EvalItem], limit: int) -> list[EvalItem]:
    """`limit` items taken evenly across the ordered list, so a small run sees every budget."""
    if limit >= len(items):
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


def question_message(query: Query) -> ChatMessage:
    """The user turn that asks the query: question, lettered options, answer instruction."""
    marks = letters(len(query.options))
    options = "\n".join(f"({m}) {o.text}" for m, o in zip(marks, query.options, strict=True))
    choices = ", ".join(f"({m})" for m in marks[:-1]) + f" or ({marks[-1]})"
    return ChatMessage(role="user", content=f"{query.question}\n\n{options}\n\n{INSTRUCTION.format(choices=choices)}")


def base_row(item: EvalItem, status: str = "skipped", **fields) -> EvalRow:
    """The row of `item` before (or without) a model answer."""
    q, p = item.query, item.placement
    return EvalRow(persona_id=q.persona_id, query_id=q.query_id, context_id=p.context_id, type=q.type,
                   topic=q.topic, budget_tokens=item.budget_tokens, distance_tokens=p.distance_tokens,
                   distance_bucket=distance_bucket(p.distance_tokens), correct_letter=letters(26)[q.correct_index],
                   correct_position=q.correct_index, status=status, **fields)


def prompt_tokens(item: EvalItem, mode: Mode) -> int:
    """Tokens of the prompt under the dataset's token rule (history up to the placement + the question)."""
    history = item.placement.context_tokens if mode == "mcq" else 0
    return history + message_tokens(question_message(item.query).content)


def evaluate(ds: Dataset, *, llm: LLM, settings: EvalSettings,
             progress: Callable[[int, int], None] | None = None) -> list[EvalRow]:
    """Ask every selected placement (skipping those that do not fit the window); one row each."""
    items = select_items(ds, settings)
    window = settings.window or default_window(llm)
    rows: list[EvalRow] = []
    for start in range(0, len(items), BATCH):
        batch = items[start:start + BATCH]
        jobs = _prepare(ds, batch, settings.mode, window, llm.settings.max_tokens)
        rows.extend(llm.runtime.run(_ask_all(llm, jobs)))
        if progress:
            progress(len(rows), len(items))
    return rows


Job = EvalRow | tuple[EvalItem, list[dict], int]


def _prepare(ds: Dataset, batch: list[EvalItem], mode: Mode, window: int, max_tokens: int) -> list[Job]:
    """Per item: a skipped row when the prompt plus the answer budget exceeds the window, else its messages."""
    histories: dict[str, list[ChatMessage]] = {}
    jobs: list[Job] = []
    for item in batch:
        tokens = prompt_tokens(item, mode)
        if tokens + max_tokens > window:
            reason = f"prompt {tokens:,} + answer {max_tokens:,} tokens > window {window:,}"
            jobs.append(base_row(item, prompt_tokens=tokens, skipped_reason=reason))
        else:
            jobs.append((item, _messages(ds, histories, item, mode), tokens))
    return jobs


async def _ask_all(llm: LLM, jobs: list[Job]) -> list[EvalRow]:
    return list(await asyncio.gather(*(_ask(llm, *job) if isinstance(job, tuple) else _done(job) for job in jobs)))


async def _done(row: EvalRow) -> EvalRow:
    return row


def _messages(ds: Dataset, histories: dict[str, list[ChatMessage]], item: EvalItem, mode: Mode) -> list[dict]:
    """The history up to the placement (materialized once per context per batch) plus the question."""
    history: list[ChatMessage] = []
    if mode == "mcq":
        cid = item.placement.context_id
        if cid not in histories:
            histories[cid] = ds.materialize_context(cid)
        history = histories[cid][:item.placement.end_index]
    return [m.model_dump() for m in (*history, question_message(item.query))]


async def _ask(llm: LLM, item: EvalItem, messages: list[dict], tokens: int) -> EvalRow:
    """One gateway call and its parsed, scored row; a call that fails after retries is scored wrong."""
    key = AnswerKey(correct_letter=letters(26)[item.query.correct_index])
    try:
        reply = await llm.achat(messages, stage="evaluate", context=key)
    except CallFailed as exc:
        return base_row(item, "failed", prompt_tokens=tokens, skipped_reason=f"call failed: {exc}")
    parsed = parse_answer(reply.text, [o.text for o in item.query.options])
    return base_row(item, "answered" if parsed.letter else "unparsed", prompt_tokens=tokens, prediction=reply.text,
                    parsed_letter=parsed.letter, parse_rule=parsed.rule, correct=parsed.letter == key.correct_letter,
                    input_tokens=reply.input_tokens, output_tokens=reply.output_tokens, latency_s=reply.latency_s,
                    cached=reply.cached)


def summarize(ds: Dataset, rows: list[EvalRow], *, run: str, llm: str, settings: EvalSettings,
              window: int) -> EvalSummary:
    """Accuracy overall and per slice (skipped rows excluded; unparsed and failed count wrong), and baselines."""
    scored = [r for r in rows if r.status != "skipped"]
    queries = {q.query_id: q for q in ds.queries}
    status = [r.status for r in rows]
    return EvalSummary(
        dataset=ds.manifest.dataset, version=ds.manifest.version, run=run, llm=llm, mode=settings.mode,
        window=window, n_items=len(rows), n_scored=len(scored), n_skipped=status.count("skipped"),
        n_unparsed=status.count("unparsed"), n_failed=status.count("failed"),
        overall=accuracy("overall", scored, n_boot=settings.n_boot, seed=settings.seed),
        groups=group_accuracies(scored, n_boot=settings.n_boot, seed=settings.seed),
        baselines=baselines([queries[r.query_id] for r in rows]),
        input_tokens=sum(r.input_tokens for r in rows), output_tokens=sum(r.output_tokens for r in rows),
        n_boot=settings.n_boot, seed=settings.seed,
    )


ROW_SCHEMA = pa.schema([
    ("persona_id", pa.string()), ("query_id", pa.string()), ("context_id", pa.string()), ("type", pa.string()),
    ("topic", pa.string()), ("budget_tokens", pa.int64()), ("distance_tokens", pa.int64()),
    ("distance_bucket", pa.string()), ("correct_letter", pa.string()), ("correct_position", pa.int32()),
    ("status", pa.string()), ("prediction", pa.string()), ("parsed_letter", pa.string()),
    ("parse_rule", pa.string()), ("correct", pa.bool_()), ("prompt_tokens", pa.int64()),
    ("input_tokens", pa.int64()), ("output_tokens", pa.int64()), ("latency_s", pa.float64()),
    ("cached", pa.bool_()), ("skipped_reason", pa.string()),
])


def rows_table(rows: list[EvalRow]) -> pa.Table:
    """Eval rows as an Arrow table with an explicit schema."""
    return pa.Table.from_pylist([r.model_dump() for r in rows], schema=ROW_SCHEMA)


def run_name(llm: str, settings: EvalSettings) -> str:
    """A default run folder name: mode, model and (when set) budget, e.g. `mcq-openai-gpt-4o-mini-32k`."""
    parts = [settings.mode, llm] + ([f"{settings.budget // 1000}k"] if settings.budget else [])
    return re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(parts)).strip("-.")[:100]


def run_eval(dataset: Path | str, *, llm: LLM, settings: EvalSettings, name: str | None = None,
             progress: Callable[[int, int], None] | None = None) -> EvalRun:
    """Evaluate, score and write `<version>/evals/<name>/`; also posts a Prefect artifact inside a flow."""
    ds = load(dataset)
    name = name or run_name(llm.name, settings)
    rows = evaluate(ds, llm=llm, settings=settings, progress=progress)
    summary = summarize(ds, rows, run=name, llm=llm.name, settings=settings,
                        window=settings.window or default_window(llm))
    markdown = render_markdown(summary)
    path = write_eval(ds.path, name, rows_table(rows), markdown, summary)
    publish_artifact(artifact_key("eval", ds.manifest.dataset, ds.manifest.version, name), markdown, f"eval {name}")
    return EvalRun(path=path, summary=summary, markdown=markdown)
