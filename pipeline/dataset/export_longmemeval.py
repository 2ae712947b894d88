"""LongMemEval's JSON format (``longmemeval_s``-style), as its retrieval, generation and QA scripts read it.

One JSON list per budget, ``longmemeval_<size>.json``, one entry per query placed in that budget's
contexts. The haystack is the history a model sees before the question (``context[:end_index]``):
the sessions before the anchor and the anchor session's turns before the anchor turn, so no later
turn leaks. PersonaMem's profile system message is left out (LongMemEval's turns are user and
assistant only). What the upstream code requires, and how it is met:

- evidence sessions are ``answer_<session_id>`` and every turn of one carries a boolean
  ``has_answer`` (true on the evidence turns); no other id contains ``answer`` (ours are hex);
- ``question_type`` is one of LongMemEval's six (``evaluate_qa.py`` has no branch for any other);
  our own type is kept in ``personamem_question_type``, the options in ``options``;
- a query without evidence turns (an abstention: the evidence is that nothing was said) gets the
  ``_abs`` suffix LongMemEval uses for abstention, and an empty ``answer_session_ids``;
- dates are ``YYYY/MM/DD (Ddd) HH:MM`` with English weekdays whatever the locale; a filler session
  (it has no time of its own) takes the date of the slot it fills, as in the context's date messages
  (``assemble_contexts.slot_dates``), so dates never decrease.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from shlex import quote

from pipeline.dataset.export import (
    ExportedFile,
    check_budget,
    letter,
    option_strings,
    placements_by_context,
    size_labels,
)
from pipeline.dataset.files import export_unit, write_json_list, write_text
from pipeline.dataset.lme_questions import assistant_question, temporal_question
from pipeline.dataset.reading import Dataset
from pipeline.s5_assembly.budget import slot_dates
from pipeline.s5_assembly.fit import lme_history_cap
from schemas.context import Context, Placement
from schemas.conversation import SessionWithTurns
from schemas.query import Query

WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
# Our 7 types onto LongMemEval's 6 (the judge prompt it picks): recall and reasons are single-session-user,
# or multi-session when the evidence spans sessions; recommendations are judged like its preference rubric.
LONGMEMEVAL_TYPES = {
    "recall_user_shared_facts": "single-session-user",
    "revisit_reasons_behind_preference_updates": "single-session-user",
    "acknowledge_latest_preferences": "knowledge-update",
    "track_full_preference_evolution": "multi-session",
    "suggest_new_ideas": "single-session-preference",
    "provide_preference_aligned_recommendations": "single-session-preference",
    "generalize_to_new_scenarios": "single-session-preference",
}
ENTRY_KEYS = ["question_id", "question_type", "question", "answer", "question_date", "haystack_dates",
              "haystack_session_ids", "haystack_sessions", "answer_session_ids"]


def lme_date(t: datetime) -> str:
    """LongMemEval's date format, e.g. '2023/05/30 (Tue) 23:40'."""
    return f"{t:%Y/%m/%d} ({WEEKDAYS[t.weekday()]}) {t:%H:%M}"


def export_longmemeval(ds: Dataset, out: Path, budget: int | None = None) -> list[ExportedFile]:
    """Write ``longmemeval_<size>.json`` for every budget (or only ``budget``) into the folder ``out``."""
    check_budget(ds, budget)
    labels = size_labels({c.budget_tokens for c in ds.contexts})
    files = []
    with export_unit(out, [f"longmemeval_{label}.json" for size, label in labels.items()
                           if budget in (None, size)] + ["README.md"]) as stage:
        for size, label in sorted(labels.items()):
            if budget is None or size == budget:
                contexts = [c for c in ds.contexts if c.budget_tokens == size]
                name = f"longmemeval_{label}.json"
                files.append(ExportedFile(path=out / name, rows=write_json_list(
                    stage / name, longmemeval_entries(ds, contexts), allow_empty=budget is None)))
        readme = longmemeval_readme(ds, files)
        files.append(ExportedFile(path=out / "README.md", rows=write_text(stage / "README.md", readme)))
    return files


def longmemeval_readme(ds: Dataset, files: list[ExportedFile]) -> str:
    """The export folder's README.md: what the files are, the commands that read them, the history cap."""
    names = [f.path.name for f in files]
    first = quote(os.path.abspath(files[0].path)) if files else "DIR/longmemeval_32k.json"  # run in its checkout
    caps = ", ".join(f"{lme_history_cap(b):,} for {label}"
                     for b, label in sorted(size_labels({c.budget_tokens for c in ds.contexts}).items()))
    return (
        f"# LongMemEval format: {ds.path.parent.name} {ds.path.name}\n\n"
        "Written by `personagen export longmemeval`, in the format of `longmemeval_s` "
        "(github.com/xiaowu0162/LongMemEval): " + ", ".join(f"`{n}`" for n in names) + ", one JSON list per budget, "
        "one entry per placed question. The haystack is the history before the question; evidence sessions are "
        "`answer_<id>` with `has_answer` on their turns; a question without evidence is an `_abs` entry; our type "
        "is in `personamem_question_type`, the choices in `options`.\n\n"
        "Read by LongMemEval's reader, in its `src/generation`:\n\n"
        f"    mkdir -p out && python run_generation.py --in_file {first} --out_dir out --model_name gpt-4o --model_alias gpt-4o "
        "--openai_key KEY --retriever_type orig-session --topk_context 1000 --history_format json --useronly false "
        "--cot true\n\n"
        "then `src/evaluation/evaluate_qa.py` and `print_qa_metrics.py` on its output. Our 7 types map onto "
        + ", ".join(sorted(set(LONGMEMEVAL_TYPES.values()) | {"multi-session"})) + "; beside each placed question, "
        f"up to {DERIVED_PER_CONTEXT} per context of each of the other two, decided in code over the same haystack "
        "(`derived_from` names the question): temporal-reasoning (how many days passed between the first sessions "
        "voicing an item's older and newer stance; the answer is the difference of those sessions' dates) and "
        "single-session-assistant (what the assistant replied when the user voiced a preference on a date; the "
        "answer is that reply), so all six types occur and its Task-averaged Accuracy is a number. Each entry's history, in "
        "the reader's JSON format and `o200k_base` tokens, is within its cap for a model of the budget's length "
        f"(its length less 1,800: {caps}), so the reader never truncates it.\n"
    )


def longmemeval_entries(ds: Dataset, contexts: list[Context], derived: bool = True) -> Iterator[dict]:
    """One LongMemEval entry per placement in ``contexts``, each followed by the temporal-reasoning and
    single-session-assistant entries its haystack supports (``lme_questions``) when ``derived``."""
    queries = {q.query_id: q for q in ds.queries}
    versions = {v.key: v for v in ds.preferences}
    by_context = placements_by_context(ds)
    for context in contexts:
        sessions = [ds.session(sid) for sid in context.session_ids]
        slots = slot_dates(context.session_ids, {s.session.session_id: s.session for s in sessions})
        asked: dict[str, set[str]] = {kind: set() for _, kind, _ in DERIVED}  # per context, each question once
        for p in by_context.get(context.context_id, []):
            q = queries[p.query_id]
            shown = haystack(context, sessions, p.end_index)
            dates = [when or q.as_of for when in slots[: len(shown)]]
            yield longmemeval_entry(q, p, context, sessions)
            for suffix, kind, make in DERIVED if derived else ():
                found = make(q, shown, dates, versions) if len(asked[kind]) < DERIVED_PER_CONTEXT else None
                if found is not None and found[0]["question"] not in asked[kind]:
                    fields, refs = found
                    asked[kind].add(fields["question"])
                    marks = {(shown[i].session.session_id, shown[i].turns[j].turn_index) for i, j in refs}
                    yield _ordered(_entry(q, context, shown, dates, marks) | fields | {
                        "question_id": f"{q.query_id}_{suffix}", "question_type": kind,
                        "personamem_question_type": None, "options": [], "correct_option": None,
                        "derived_from": q.query_id})


DERIVED_PER_CONTEXT = 2  # of each derived kind: LongMemEval's own mix has them beside, not above, the others
DERIVED = (("temporal", "temporal-reasoning", temporal_question),
           ("assistant", "single-session-assistant", assistant_question))


def haystack(context: Context, sessions: list[SessionWithTurns], end_index: int) -> list[SessionWithTurns]:
    """The sessions (the last one cut at the anchor) that fill the context's first ``end_index`` messages."""
    position = 1 if context.profile_mode == "once" else 0
    out = []
    for swt in sessions:
        if context.profile_mode == "per_session" and swt.session.kind == "topic":
            position += 1
        position += context.session_dates  # the system message that opens the session with its date
        visible = swt.turns[: max(0, end_index - position)]
        if not visible:
            break
        out.append(swt if len(visible) == len(swt.turns) else SessionWithTurns.model_construct(
            session=swt.session, turns=visible))
        position += len(swt.turns)
    return out


def longmemeval_entry(q: Query, placement: Placement, context: Context, sessions: list[SessionWithTurns]) -> dict:
    """The entry of one placed query: its haystack, dates and evidence labels."""
    slots = slot_dates(context.session_ids, {s.session.session_id: s.session for s in sessions})
    shown = haystack(context, sessions, placement.end_index)
    dates = [when or q.as_of for when in slots[: len(shown)]]
    entry = _entry(q, context, shown, dates, {(e.session_id, e.turn_index) for e in q.evidence})
    return _ordered(entry | {
        "question_id": q.query_id if q.evidence else f"{q.query_id}_abs",
        "question_type": _lme_type(q, entry["answer_session_ids"]),
        "question": q.question,
        "answer": q.options[q.correct_index].text,
        "personamem_question_type": q.type,
        "options": option_strings(q),
        "correct_option": letter(q.correct_index),
    })


KEY_ORDER = [*ENTRY_KEYS, "personamem_question_type", "options", "correct_option", "persona_id", "context_id",
             "derived_from"]


def _ordered(entry: dict) -> dict:
    """LongMemEval's keys in its order, then ours."""
    return {k: entry[k] for k in KEY_ORDER if k in entry}


def _entry(q: Query, context: Context, shown: list[SessionWithTurns], dates: list[datetime],
           evidence: set[tuple[str, int]]) -> dict:
    """The haystack fields of an entry, with ``has_answer`` on the ``evidence`` turns' sessions."""
    ids, turns, answer_ids = [], [], []
    for swt in shown:
        sid = swt.session.session_id
        marks = [(sid, t.turn_index) in evidence for t in swt.turns]
        if any(marks):
            sid = f"answer_{sid}"
            answer_ids.append(sid)
        ids.append(sid)
        turns.append([{"role": t.role, "content": t.content, **({"has_answer": m} if any(marks) else {})}
                      for t, m in zip(swt.turns, marks, strict=True)])
    return {
        "question_date": lme_date(q.as_of),
        "haystack_dates": [lme_date(d) for d in dates],
        "haystack_session_ids": ids,
        "haystack_sessions": turns,
        "answer_session_ids": answer_ids,
        "persona_id": q.persona_id,
        "context_id": context.context_id,
    }


def _lme_type(q: Query, answer_ids: list[str]) -> str:
    kind = LONGMEMEVAL_TYPES[q.type]
    return "multi-session" if kind == "single-session-user" and len(answer_ids) > 1 else kind
