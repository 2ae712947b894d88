"""`personagen eval`: PersonaMem's discriminative protocol over a published dataset version, with context
modes that measure memory (pipeline.evaluation.history) and open answers graded by a judge.

Each placement becomes one call per mode: the history the mode keeps (all of it before the placement's
end_index in `mcq`, none in `no-context`, the evidence sessions in `oracle`, the last tokens in `recent`,
what BM25 retrieves for the question in `rag`), then a user message. With `--answer choice` it holds the
question, the options "(a) ... (d)" and an instruction to answer after `<final_answer>`, and the reply is
parsed by pipeline.evaluation.answer_parse; with `--answer open` it is the question alone, and a judge
model grades the reply against the key (pipeline.evaluation.judge). Replies come through the gateway
(`LLM.achat`: cached, throttled, retried, so a rerun resumes). A prompt that does not fit the window is
skipped and counted, never truncated. A call that fails (transport, or a judge with no valid verdict) is
reported apart, never scored; a rerun asks it again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from pipeline.dataset import Dataset, eval_folder, load, write_eval
from pipeline.errors import UserError
from pipeline.evaluation.answer_parse import letters, parse_answer
from pipeline.evaluation.history import (
    ContextView,
    Granularity,
    HistorySettings,
    Mode,
    context_view,
    history_indices,
    history_messages,
    history_tokens,
)
from pipeline.evaluation.judge import ajudge, ajudge_agreement
from pipeline.evaluation.summary import (
    EvalRow,
    EvalSummary,
    JudgeAgreement,
    accuracy,
    artifact_key,
    baselines,
    distance_bucket,
    group_accuracies,
    publish_artifact,
    render_markdown,
)
from pipeline.llm import LLM, CallFailed
from pipeline.llm.errors import PromptTooLong
from pipeline.tokens import message_tokens
from schemas.context import ChatMessage, Placement
from schemas.query import Query

Answer = Literal["choice", "open"]
INSTRUCTION = ("Find the most appropriate response to my question above and give your final answer "
               "{choices} after the special token <final_answer>.")
OPENAI_WINDOW = 128_000
FAKE_WINDOW = 1_000_000
BATCH = 64


class EvalSettings(BaseModel):
    """Which placements to ask and how; `window` None = the backend's default window."""

    model_config = ConfigDict(extra="forbid")

    mode: Mode = "mcq"
    answer: Answer = Field(default="choice", description="choice: lettered options; open: a judge grades free text")
    retriever: Literal["bm25"] = "bm25"
    granularity: Granularity = Field(default="session", description="rag retrieves whole sessions or exchanges")
    k: int = Field(default=5, ge=1, description="rag: units retrieved; the retrieval reader: top turns it reads")
    recent_tokens: int = Field(default=4000, ge=1, description="recent: the last this many tokens of turns")
    budget: int | None = Field(default=None, gt=0, description="only contexts of this token budget")
    limit: int | None = Field(default=None, ge=1, description="at most this many placements")
    window: int | None = Field(default=None, ge=1, description="the model's context window in tokens")
    judge_sample: int = Field(default=40, ge=1, description="queries whose options the judge grades for agreement")
    n_boot: int = Field(default=1000, ge=10)
    seed: int = 0

    def history(self) -> HistorySettings:
        """The history settings of the non-mcq modes."""
        return HistorySettings(granularity=self.granularity, k=self.k, recent_tokens=self.recent_tokens)

    def history_label(self, mode: Mode) -> dict[str, int | str]:
        """The settings that shape ``mode``'s history, as the summary names them."""
        if mode == "rag":
            return {"retriever": self.retriever, "granularity": self.granularity, "k": self.k}
        return {"recent_tokens": self.recent_tokens} if mode == "recent" else {}


class AnswerKey(BaseModel):
    """The call context of an eval call: only the fake backend's scripts read it (never the cache key)."""

    correct_letter: str
    options: list[str] = Field(default_factory=list)
    open: bool = False


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


def question_message(query: Query, answer: Answer = "choice") -> ChatMessage:
    """The user turn that asks the query: the question alone (open), or with lettered options and the
    answer instruction (choice)."""
    if answer == "open":
        return ChatMessage(role="user", content=query.question)
    marks = letters(len(query.options))
    options = "\n".join(f"({m}) {o.text}" for m, o in zip(marks, query.options, strict=True))
    choices = ", ".join(f"({m})" for m in marks[:-1]) + f" or ({marks[-1]})"
    return ChatMessage(role="user", content=f"{query.question}\n\n{options}\n\n{INSTRUCTION.format(choices=choices)}")


def base_row(item: EvalItem, status: str = "skipped", **fields) -> EvalRow:
    """The row of `item` before (or without) a model answer."""
    q, p = item.query, item.placement
    return EvalRow(persona_id=q.persona_id, query_id=q.query_id, context_id=p.context_id, type=q.type,
                   topic=q.topic, voicing=q.voicing or "none", budget_tokens=item.budget_tokens, distance_tokens=p.distance_tokens,
                   distance_bucket=distance_bucket(p.distance_tokens), correct_letter=letters(26)[q.correct_index],
                   correct_position=q.correct_index, status=status, **fields)


@dataclass
class Call:
    """A prepared call: the item, its mode and the messages it sends."""

    item: EvalItem
    mode: Mode
    messages: list[dict]
    tokens: int
    n_history: int


class Views:
    """Context views built on first use, the latest few kept: items come sorted by context, so a long run
    holds one or two materialized histories at a time, never the whole dataset's."""

    KEEP = 2

    def __init__(self, ds: Dataset) -> None:
        self.ds = ds
        self.views: dict[str, ContextView] = {}

    def get(self, context_id: str) -> ContextView:
        """The view of ``context_id``."""
        if context_id not in self.views:
            if len(self.views) >= self.KEEP:
                del self.views[next(iter(self.views))]
            self.views[context_id] = context_view(self.ds, context_id)
        return self.views[context_id]


def evaluate(ds: Dataset, *, llm: LLM, settings: EvalSettings, modes: Sequence[Mode] | None = None,
             judge: LLM | None = None, progress: Callable[[int, int], None] | None = None) -> list[EvalRow]:
    """Ask every selected placement in every mode (skipping those that do not fit the window); one row each,
    ordered by item, then mode."""
    if settings.answer == "open" and judge is None:
        raise UserError("--answer open needs --judge <llm>: the model that grades the answers")
    items = select_items(ds, settings)
    modes = list(modes or [settings.mode])
    window = settings.window or default_window(llm)
    rows: list[EvalRow] = []
    views = Views(ds)
    total = len(items) * len(modes)
    if progress:
        progress(0, total)
    for start in range(0, len(items), BATCH):
        jobs = [prepare(views, item, mode, settings, window, llm.settings.max_tokens)
                for item in items[start:start + BATCH] for mode in modes]
        finished = [0]
        batch = asyncio.run_coroutine_threadsafe(_ask_all(llm, judge, jobs, settings.answer, finished), llm.runtime.loop)
        # the bar moves every POLL_S with the calls finished (drawn from this thread, not the loop's)
        while not concurrent.futures.wait([batch], timeout=POLL_S).done:
            if progress:
                progress(len(rows) + finished[0], total)
        rows.extend(batch.result())
        if progress:
            progress(len(rows), total)
    return rows


POLL_S = 1.0  # seconds between two moves of the eval's progress bar inside a batch
QUESTION_ROOM = 32  # tokens of slack when a recent history is sized to the window (a turn's message overhead)


def window_fit(ds: Dataset, settings: EvalSettings, modes: Sequence[Mode], window: int,
               max_tokens: int) -> tuple[int, dict[str, int]]:
    """The selected queries, and per mode how many of them are longer than the window (prompt and answer budget):
    what a run would skip, counted before it asks anything."""
    items = select_items(ds, settings)
    views = Views(ds)
    return len(items), {m: sum(isinstance(prepare(views, item, m, settings, window, max_tokens), EvalRow)
                               for item in items) for m in modes}


def fitting_recent(ds: Dataset, settings: EvalSettings, window: int, max_tokens: int) -> int | None:
    """A ``recent_tokens`` with which every selected query fits the window, or None where none was found: the
    window less the answer and the longest question, shrunk by what a recent history carries besides its turns
    (the profile, session dates)."""
    items = select_items(ds, settings)
    views = Views(ds)
    longest = max((message_tokens(question_message(i.query, settings.answer).content) for i in items), default=0)
    recent = max(1, window - max_tokens - longest - QUESTION_ROOM)
    for _ in range(3):
        sized = settings.model_copy(update={"recent_tokens": recent})
        over = max([r.prompt_tokens + max_tokens - window for i in items
                    if isinstance(r := prepare(views, i, "recent", sized, window, max_tokens), EvalRow)], default=0)
        if over <= 0:
            return recent
        if recent <= 1:
            return None
        recent = max(1, recent - over - QUESTION_ROOM)
    return None


def prepare(views: Views, item: EvalItem, mode: Mode, settings: EvalSettings, window: int,
            max_tokens: int) -> Call | EvalRow:
    """The call of (item, mode), or a skipped row when its prompt plus the answer budget exceeds the window."""
    question = question_message(item.query, settings.answer)
    indices: list[int] = []
    view = None
    if mode != "no-context":
        view = views.get(item.placement.context_id)
        indices = history_indices(view, item.placement, item.query, mode, settings.history())
    tokens = (history_tokens(view, indices) if view else 0) + message_tokens(question.content)
    if tokens + max_tokens > window:
        reason = f"prompt {tokens:,} + answer {max_tokens:,} tokens > window {window:,}"
        return base_row(item, mode=mode, answer=settings.answer, prompt_tokens=tokens, skipped_reason=reason,
                        history_messages=len(indices))
    history = history_messages(view, indices) if view else []
    return Call(item=item, mode=mode, messages=[m.model_dump() for m in (*history, question)], tokens=tokens,
                n_history=len(indices))


async def _ask_all(llm: LLM, judge: LLM | None, jobs: list[Call | EvalRow], answer: Answer,
                   finished: list[int] | None = None) -> list[EvalRow]:
    """Every job's row, in order; ``finished[0]`` counts the rows done so far."""
    finished = finished if finished is not None else [0]

    async def one(job: Call | EvalRow) -> EvalRow:
        row = await (_ask(llm, judge, job, answer) if isinstance(job, Call) else _done(job))
        finished[0] += 1
        return row

    return list(await asyncio.gather(*(one(job) for job in jobs)))


async def _done(row: EvalRow) -> EvalRow:
    return row


async def _ask(llm: LLM, judge: LLM | None, call: Call, answer: Answer) -> EvalRow:
    """One gateway call (and, for open answers, its judge call) and the scored row; a failed call is
    recorded as failed, never scored."""
    query = call.item.query
    key = AnswerKey(correct_letter=letters(26)[query.correct_index], options=[o.text for o in query.options],
                    open=answer == "open")
    common = {"mode": call.mode, "answer": answer, "prompt_tokens": call.tokens, "history_messages": call.n_history}
    try:
        reply = await llm.achat(call.messages, stage="evaluate", context=key)
    except PromptTooLong as exc:  # the window was checked in o200k tokens; the model's own tokenizer said more
        return base_row(call.item, "skipped", skipped_reason=f"longer than the window in the model's tokens: {exc}",
                        **common)
    except CallFailed as exc:
        return base_row(call.item, "failed", skipped_reason=f"call failed: {exc}", **common)
    usage = {"prediction": reply.text, "input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens,
             "latency_s": reply.latency_s, "cached": reply.cached}
    if answer == "open":
        try:
            verdict = await ajudge(judge, query, reply.text)
        except CallFailed as exc:
            return base_row(call.item, "failed", skipped_reason=f"judge call failed: {exc}", **common, **usage)
        return base_row(call.item, "answered", verdict=verdict, correct=verdict == "correct", **common, **usage)
    parsed = parse_answer(reply.text, [o.text for o in query.options])
    return base_row(call.item, "answered" if parsed.letter else "unparsed", parsed_letter=parsed.letter,
                    parse_rule=parsed.rule, correct=parsed.letter == key.correct_letter, **common, **usage)


def agreement(judge: LLM, settings: EvalSettings, items: list[EvalItem]) -> JudgeAgreement:
    """The judge's agreement with the key on a seeded sample of the selected queries."""
    queries = [i.query for i in items]
    return judge.runtime.run(ajudge_agreement(judge, queries, n=settings.judge_sample, seed=settings.seed))


def summarize(ds: Dataset, rows: list[EvalRow], *, run: str, llm: str, settings: EvalSettings, window: int,
              mode: Mode | None = None, judge: str | None = None,
              judge_agreement: JudgeAgreement | None = None) -> EvalSummary:
    """Accuracy overall and per slice over the scored rows (answered and unparsed; unparsed count wrong),
    the skipped and failed rows counted apart, and the model-free baselines."""
    scored = [r for r in rows if r.status in ("answered", "unparsed")]
    queries = {q.query_id: q for q in ds.queries}
    status = [r.status for r in rows]
    mode = mode or settings.mode
    return EvalSummary(
        dataset=ds.manifest.dataset, version=ds.manifest.version, run=run, llm=llm, mode=mode,
        answer=settings.answer, judge=judge, judge_agreement=judge_agreement, history=settings.history_label(mode),
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
    ("status", pa.string()), ("mode", pa.string()), ("answer", pa.string()), ("history_messages", pa.int64()),
    ("prediction", pa.string()), ("parsed_letter", pa.string()), ("parse_rule", pa.string()),
    ("verdict", pa.string()), ("correct", pa.bool_()), ("prompt_tokens", pa.int64()),
    ("input_tokens", pa.int64()), ("output_tokens", pa.int64()), ("latency_s", pa.float64()),
    ("cached", pa.bool_()), ("skipped_reason", pa.string()),
])


def rows_table(rows: list[EvalRow]) -> pa.Table:
    """Eval rows as an Arrow table with an explicit schema."""
    return pa.Table.from_pylist([r.model_dump() for r in rows], schema=ROW_SCHEMA)


def run_name(llm: str, settings: EvalSettings, prefix: str | None = None) -> str:
    """A default run folder name: mode (or `prefix`), answers when open, model and (when set) budget,
    e.g. `mcq-openai-gpt-4o-mini-32k`."""
    parts = [prefix or settings.mode] + (["open"] if settings.answer == "open" else []) + [llm]
    parts += [f"{settings.budget // 1000}k"] if settings.budget else []
    return re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(parts)).strip("-.")[:100]


def run_eval(dataset: Path | str, *, llm: LLM, settings: EvalSettings, name: str | None = None,
             judge: LLM | None = None, outputs: Path | None = None,
             progress: Callable[[int, int], None] | None = None) -> EvalRun:
    """Evaluate, score and write `<version>/evals/<name>/` (beside it under `outputs` when the version is
    read-only; checked before any call); also posts a Prefect artifact inside a flow."""
    ds = load(dataset)
    name = name or run_name(llm.name, settings)
    folder = eval_folder(ds.path, name, outputs=outputs)
    rows = evaluate(ds, llm=llm, settings=settings, judge=judge, progress=progress)
    agreed = agreement(judge, settings, select_items(ds, settings)) if settings.answer == "open" else None
    summary = summarize(ds, rows, run=name, llm=llm.name, settings=settings,
                        window=settings.window or default_window(llm), judge=judge.name if judge else None,
                        judge_agreement=agreed)
    markdown = render_markdown(summary)
    path = write_eval(folder, {"results.parquet": rows_table(rows)}, markdown, summary)
    publish_artifact(artifact_key("eval", ds.manifest.dataset, ds.manifest.version, name), markdown, f"eval {name}")
    return EvalRun(path=path, summary=summary, markdown=markdown)
