"""Exports other tools read unchanged: PersonaMem's released CSV + JSONL, and self-contained JSONL.

PersonaMem format (one pair of files per budget, ``<size>`` = 32k, 128k, 1M):
``questions_<size>.csv`` with the 15 columns of PersonaMem's released ``questions_*.csv``, in their
order and value formats, then ``stereotypical`` (Yes/No), which older versions of its
``inference_standalone_openai.py`` read for every row (csv.DictReader ignores a column it does not
read); and ``shared_contexts_<size>.jsonl`` with one ``{context_id: [messages]}`` object per line.
A harness slices ``shared_context[:end_index]`` and asks the question after it. ``persona_id`` is
the persona's row index (PersonaMem uses integers); ``all_options`` is a JSON list, which
PersonaMem's ``ast.literal_eval`` and adapters' ``json.loads`` both read.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterator
from itertools import accumulate
from pathlib import Path
from shlex import quote

from pydantic import BaseModel

from pipeline.dataset.files import check_export_file, export_unit, write_csv, write_jsonl, write_text
from pipeline.dataset.reading import Dataset
from pipeline.errors import UserError
from pipeline.s5_assembly import fit
from pipeline.s5_assembly.fit import letter
from schemas.context import Context, Placement
from schemas.ids import parse_version_key
from schemas.query import Query

RELEASED_COLUMNS = [
    "persona_id", "question_id", "question_type", "topic", "context_length_in_tokens",
    "context_length_in_letters", "distance_to_ref_in_blocks", "distance_to_ref_in_tokens",
    "num_irrelevant_tokens", "distance_to_ref_proportion_in_context", "user_question_or_message",
    "correct_answer", "all_options", "shared_context_id", "end_index_in_shared_context",
]
QUESTION_COLUMNS = [*RELEASED_COLUMNS, "stereotypical"]


class ExportedFile(BaseModel):
    path: Path
    rows: int


def size_label(budget: int) -> str:
    """32_000 -> '32k', 128_000 -> '128k', 1_000_000 -> '1M' (PersonaMem's file suffixes)."""
    if budget >= 1_000_000:
        return f"{budget / 1_000_000:g}M"
    return f"{round(budget / 1000)}k"


def size_labels(budgets: set[int] | list[int]) -> dict[int, str]:
    """Each budget's file label: the rounded one, or the exact token count where two would round alike."""
    rounded = defaultdict(list)
    for budget in sorted(set(budgets)):
        rounded[size_label(budget)].append(budget)
    return {b: (label if len(group) == 1 else str(b)) for label, group in rounded.items() for b in group}


def option_strings(query: Query) -> list[str]:
    """The query's options as PersonaMem writes them: '(a) ...'."""
    return fit.option_strings([o.text for o in query.options])


def export_personamem(ds: Dataset, out: Path) -> list[ExportedFile]:
    """Write ``questions_<size>.csv`` and ``shared_contexts_<size>.jsonl`` for every budget."""
    files = []
    labels = size_labels({c.budget_tokens for c in ds.contexts})
    names = [f"{kind}_{label}.{ext}" for label in labels.values()
             for kind, ext in (("shared_contexts", "jsonl"), ("questions", "csv"))] + ["README.md"]
    with export_unit(out, names) as stage:
        for budget, label in sorted(labels.items()):
            contexts = [c for c in ds.contexts if c.budget_tokens == budget]
            shared = f"shared_contexts_{label}.jsonl"
            rows = write_jsonl(stage / shared, ({c.context_id: [m.model_dump() for m in
                                                                ds.materialize_context(c.context_id)]}
                                                for c in contexts))
            files.append(ExportedFile(path=out / shared, rows=rows))
            questions = f"questions_{label}.csv"
            files.append(ExportedFile(path=out / questions, rows=write_csv(stage / questions, QUESTION_COLUMNS,
                                                                           personamem_rows(ds, contexts))))
        readme = personamem_readme(ds, out, sorted(labels.values()))
        files.append(ExportedFile(path=out / "README.md", rows=write_text(stage / "README.md", readme)))
    return files


def personamem_readme(ds: Dataset, out: Path, labels: list[str]) -> str:
    """The export folder's README.md: what the files are, the command that reads them, how a row is counted."""
    first = labels[0] if labels else "32k"
    where = Path(os.path.abspath(out))  # the script runs in PersonaMem's checkout: an absolute path finds the files
    return (
        f"# PersonaMem format: {ds.path.parent.name} {ds.path.name}\n\n"
        "Written by `personagen export personamem`, in the format of PersonaMem's released data "
        "(github.com/bowen-upenn/PersonaMem). Per budget (`<size>`: " + ", ".join(labels) + "):\n\n"
        "- `questions_<size>.csv`: one row per placed question, PersonaMem's 15 columns then `stereotypical`; "
        "`all_options` is a JSON list, `correct_answer` the letter; the three distance columns are blank for a "
        "question without evidence (an abstention).\n"
        "- `shared_contexts_<size>.jsonl`: one `{context_id: [messages]}` object per line; a row's history is "
        "`messages[:end_index_in_shared_context]`.\n\n"
        "Read by PersonaMem's script, in its checkout (with its `config.yaml` and `api_tokens/openai_key.txt`):\n\n"
        f"    python inference_standalone_openai.py --step evaluate --model gpt-4o --question_path "
        f"{quote(str(where / f'questions_{first}.csv'))} --context_path "
        f"{quote(str(where / f'shared_contexts_{first}.jsonl'))} --result_path results_{first}.csv\n\n"
        "Each row as that script sends it (history, then the question, instruction and options; system "
        f"messages folded in for o-family models) plus {fit.PM_ANSWER_RESERVE:,} tokens for the answer is at "
        "most the budget (`o200k_base`, 4 tokens a message). The version's README.md has the field glossary.\n"
    )


def personamem_rows(ds: Dataset, contexts: list[Context]) -> Iterator[dict]:
    """One PersonaMem question row per placement in ``contexts`` (each context materialized once)."""
    queries = {q.query_id: q for q in ds.queries}
    persona_index = {p.persona_id: i for i, p in enumerate(ds.personas)}
    filler = {s.session_id: s.n_tokens for s in ds.sessions if s.kind == "filler"}
    stereotyped = {(p.pref_id, p.version) for p in ds.preferences if p.stereotypical}
    by_context = placements_by_context(ds)
    for context in contexts:
        messages = ds.materialize_context(context.context_id)
        letters = list(accumulate((len(m.content) for m in messages), initial=0))
        for p in by_context.get(context.context_id, []):
            q = queries[p.query_id]
            far = reference_distances(q, p)
            yield {
                "persona_id": persona_index[q.persona_id],
                "question_id": q.query_id,
                "question_type": q.type,
                "topic": q.topic,
                "context_length_in_tokens": p.context_tokens,
                "context_length_in_letters": letters[p.end_index],
                "distance_to_ref_in_blocks": _blank(far["distance_sessions"]),
                "distance_to_ref_in_tokens": _blank(far["distance_tokens"]),
                "num_irrelevant_tokens": _filler_before(context, q.anchor_session_id, filler),
                "distance_to_ref_proportion_in_context": "" if far["distance_tokens"] is None else
                f"{100 * p.distance_tokens / max(p.context_tokens, 1):.2f}%",
                "user_question_or_message": q.question,
                "correct_answer": letter(q.correct_index),
                "all_options": json.dumps(option_strings(q), ensure_ascii=False),
                "shared_context_id": context.context_id,
                "end_index_in_shared_context": p.end_index,
                "stereotypical": "Yes" if _grounded_versions(q) & stereotyped else "No",
            }


def reference_distances(q: Query, p: Placement) -> dict[str, int | float | None]:
    """How far the evidence lies, or None for each distance when the query has no evidence turn (an
    abstention: nothing was said, so no reference is near or far)."""
    if not q.evidence:
        return {"distance_tokens": None, "distance_sessions": None, "evidence_position": None}
    return {"distance_tokens": p.distance_tokens, "distance_sessions": p.distance_sessions,
            "evidence_position": p.evidence_position}


def _blank(value: int | None) -> int | str:
    """A CSV cell: the number, or empty for no value."""
    return "" if value is None else value


def _grounded_versions(q: Query) -> set[tuple[str, int]]:
    """The preference versions the correct option is built from (its grounding also names events)."""
    return {parse_version_key(g) for g in q.options[q.correct_index].grounding if "@" in g}


def placements_by_context(ds: Dataset) -> dict[str, list[Placement]]:
    out: dict[str, list[Placement]] = defaultdict(list)
    for p in ds.placements:
        out[p.context_id].append(p)
    return out


def _filler_before(context: Context, anchor: str | None, filler: dict[str, int]) -> int:
    """Filler tokens in the part of the context a model sees before the question."""
    total = 0
    for sid in context.session_ids:
        if sid == anchor:
            break
        total += filler.get(sid, 0)
    return total


def check_budget(ds: Dataset, budget: int | None) -> None:
    """A ``--budget`` the version has no contexts of is refused in one line, naming the budgets it has."""
    budgets = {c.budget_tokens for c in ds.contexts}
    if budget is not None and budget not in budgets:
        known = ", ".join(f"{b:,}" for b in sorted(budgets)) or "none"
        raise UserError(f"--budget {budget:,}: {ds.path} has no contexts of that budget (budgets: {known})")


def export_jsonl(ds: Dataset, out: Path, budget: int | None = None) -> ExportedFile:
    """One self-contained record per (query, context): the question, options, answer and its history."""
    check_budget(ds, budget)
    check_export_file(out, JSONL_KEYS)
    return ExportedFile(path=out, rows=write_jsonl(out, jsonl_records(ds, budget), allow_empty=False))


JSONL_KEYS = {"query_id", "context_id", "budget_tokens", "messages"}  # what proves a file is an earlier export


def jsonl_records(ds: Dataset, budget: int | None = None) -> Iterator[dict]:
    """Records for :func:`export_jsonl`, context by context (each materialized once)."""
    queries = {q.query_id: q for q in ds.queries}
    by_context = placements_by_context(ds)
    for context in ds.contexts:
        if budget is not None and context.budget_tokens != budget:
            continue
        messages = [m.model_dump() for m in ds.materialize_context(context.context_id)]
        for p in by_context.get(context.context_id, []):
            q = queries[p.query_id]
            yield {
                "query_id": q.query_id,
                "persona_id": q.persona_id,
                "context_id": context.context_id,
                "budget_tokens": context.budget_tokens,
                "type": q.type,
                "topic": q.topic,
                "question": q.question,
                "options": [o.text for o in q.options],
                "option_roles": [o.role for o in q.options],
                "correct_index": q.correct_index,
                "correct_answer": letter(q.correct_index),
                "evidence": [e.model_dump() for e in q.evidence],
                **p.model_dump(exclude={"context_id", "query_id"}),
                **reference_distances(q, p),
                "messages": messages[: p.end_index],
            }
