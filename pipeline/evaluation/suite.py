"""`personagen eval --suite`: the model-free references and every configured mode on the same placements,
in one table (accuracy per mode x type with persona-bootstrap intervals) and the memory gap per type (each
mode with history minus `no-context`, a paired bootstrap over personas).

References, none of which calls a model: chance, the longest option, the option sharing the most words with
the question, and the retrieval reader (BM25 over the user turns before the question, for the text of
the question and its options, the best-matching turn, the option sharing the most words with it:
pipeline.evaluation.retrieval). A model below the reader is visibly not using its memory.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
from pydantic import BaseModel

from pipeline.baselines import expected_hit
from pipeline.dataset import Dataset, eval_folder, load, write_eval
from pipeline.evaluation.evaluate import (
    EvalItem,
    EvalSettings,
    Views,
    agreement,
    default_window,
    evaluate,
    rows_table,
    run_name,
    select_items,
    summarize,
)
from pipeline.evaluation.history import Mode
from pipeline.evaluation.retrieval import reader_score
from pipeline.evaluation.summary import (
    REFERENCES,
    Accuracy,
    EvalRow,
    Gap,
    SuiteSummary,
    accuracy,
    artifact_key,
    publish_artifact,
    render_suite,
)
from pipeline.llm import LLM
from pipeline.words import keywords
from schemas.query import QUERY_TYPES

SUITE_MODES: tuple[Mode, ...] = ("no-context", "mcq", "oracle", "recent", "rag")


class ReferenceRow(BaseModel):
    """The model-free references' expected accuracy on one placement."""

    persona_id: str
    query_id: str
    context_id: str
    type: str
    budget_tokens: int
    chance: float
    longest_option: float
    lexical_overlap: float
    retrieval_reader: float


class SuiteRun(BaseModel):
    """Where a suite was written and its summary."""

    path: Path
    summary: SuiteSummary
    markdown: str


class _Scored(BaseModel):
    persona_id: str
    correct: float


def references(ds: Dataset, items: list[EvalItem]) -> list[ReferenceRow]:
    """The four model-free references on every item; none reads anything after the question."""
    views, out = Views(ds), []
    for item in items:
        q = item.query
        texts = [o.text for o in q.options]
        question = keywords(q.question)
        turns = views.get(item.placement.context_id).user_terms(item.placement.end_index)
        out.append(ReferenceRow(
            persona_id=q.persona_id, query_id=q.query_id, context_id=item.placement.context_id, type=q.type,
            budget_tokens=item.budget_tokens, chance=1 / len(texts),
            longest_option=expected_hit([len(t) for t in texts], q.correct_index),
            lexical_overlap=expected_hit([len(question & keywords(t)) for t in texts], q.correct_index),
            retrieval_reader=reader_score(q.question, texts, q.correct_index, turns)))
    return out


def reference_accuracies(rows: list[ReferenceRow], *, n_boot: int, seed: int) -> dict[str, list[Accuracy]]:
    """Each reference's accuracy overall and per type, with persona-bootstrap CIs."""
    out = {}
    for name in REFERENCES:
        scored = [(r.type, _Scored(persona_id=r.persona_id, correct=getattr(r, name))) for r in rows]
        out[name] = _by_type(scored, n_boot=n_boot, seed=seed)
    return out


def _by_type(scored: list[tuple[str, _Scored]], *, n_boot: int, seed: int) -> list[Accuracy]:
    groups: dict[str, list[_Scored]] = defaultdict(list)
    for kind, row in scored:
        groups[kind].append(row)
    return [accuracy("overall", [r for _, r in scored], n_boot=n_boot, seed=seed)] + [
        accuracy(f"type={t}", groups[t], n_boot=n_boot, seed=seed) for t in QUERY_TYPES if t in groups]


def memory_gaps(rows: list[EvalRow], modes: Sequence[str], *, n_boot: int, seed: int) -> list[Gap]:
    """Every history mode minus `no-context`, overall and per type, over the placements both scored."""
    scored = [r for r in rows if r.status in ("answered", "unparsed")]
    base = {(r.query_id, r.context_id): r for r in scored if r.mode == "no-context"}
    if not base:
        return []
    gaps = []
    for mode in (m for m in modes if m != "no-context"):
        pairs = [(r, base[(r.query_id, r.context_id)]) for r in scored
                 if r.mode == mode and (r.query_id, r.context_id) in base]
        by_type: dict[str, list] = defaultdict(list)
        for pair in pairs:
            by_type[pair[0].type].append(pair)
        gaps.append(paired_gap("overall", mode, pairs, n_boot=n_boot, seed=seed))
        gaps += [paired_gap(f"type={t}", mode, by_type[t], n_boot=n_boot, seed=seed) for t in QUERY_TYPES
                 if t in by_type]
    return gaps


def paired_gap(key: str, mode: str, pairs: list[tuple[EvalRow, EvalRow]], *, n_boot: int, seed: int) -> Gap:
    """Accuracy of the first rows minus the second's; CI: the same personas resampled for both."""
    if not pairs:
        return Gap(key=key, mode=mode, n=0, gap=0.0, ci_low=0.0, ci_high=0.0)
    per_persona: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for a, b in pairs:
        per_persona[a.persona_id][0] += int(a.correct) - int(b.correct)
        per_persona[a.persona_id][1] += 1
    clusters = [per_persona[p] for p in sorted(per_persona)]
    rng = random.Random(f"{seed}:gap:{mode}:{key}")
    stats = sorted(sum(c[0] for c in d) / sum(c[1] for c in d)
                   for d in (rng.choices(clusters, k=len(clusters)) for _ in range(n_boot)))
    gap = sum(c[0] for c in clusters) / len(pairs)
    return Gap(key=key, mode=mode, n=len(pairs), gap=gap, ci_low=stats[int(0.025 * (n_boot - 1))],
               ci_high=stats[int(round(0.975 * (n_boot - 1)))])


def run_suite(dataset: Path | str, *, llm: LLM, settings: EvalSettings, modes: Sequence[Mode] = SUITE_MODES,
              judge: LLM | None = None, name: str | None = None, outputs: Path | None = None,
              progress: Callable[[int, int], None] | None = None) -> SuiteRun:
    """References and every mode on the same placements; writes `<version>/evals/<name>/` (results,
    references, summary), checked before any call."""
    ds = load(dataset)
    name = name or run_name(llm.name, settings, prefix="suite")
    folder = eval_folder(ds.path, name, outputs=outputs)
    items = select_items(ds, settings)
    refs = references(ds, items)
    rows = evaluate(ds, llm=llm, settings=settings, modes=modes, judge=judge, progress=progress)
    agreed = agreement(judge, settings, items) if settings.answer == "open" else None
    window = settings.window or default_window(llm)
    runs = {m: summarize(ds, [r for r in rows if r.mode == m], run=f"{name}/{m}", llm=llm.name, settings=settings,
                         window=window, mode=m, judge=judge.name if judge else None) for m in modes}
    summary = SuiteSummary(
        dataset=ds.manifest.dataset, version=ds.manifest.version, run=name, llm=llm.name, answer=settings.answer,
        judge=judge.name if judge else None, judge_agreement=agreed, modes=list(modes), n_items=len(items),
        runs=runs, references=reference_accuracies(refs, n_boot=settings.n_boot, seed=settings.seed),
        gaps=memory_gaps(rows, modes, n_boot=settings.n_boot, seed=settings.seed), k=settings.k,
        n_boot=settings.n_boot, seed=settings.seed)
    markdown = render_suite(summary)
    tables = {"results.parquet": rows_table(rows),
              "references.parquet": pa.Table.from_pylist([r.model_dump() for r in refs])}
    path = write_eval(folder, tables, markdown, summary)
    publish_artifact(artifact_key("eval", ds.manifest.dataset, ds.manifest.version, name), markdown, f"suite {name}")
    return SuiteRun(path=path, summary=summary, markdown=markdown)
