"""The two LongMemEval question types our seven do not map onto, decided in code from a placed query's
own haystack, so every type of LongMemEval's six occurs in an export and its ``print_qa_metrics.py``
prints a task average.

- ``temporal-reasoning``: how many days passed between the session where the user first voiced the
  older stance on an item and the first session where they voiced the newer one. Both sessions lie in
  the haystack and carry their dates there; the answer is the difference of those two dates in days.
- ``single-session-assistant``: what the assistant replied right after the user voiced a preference on
  a given date. The answer is that assistant turn's stored text, in the haystack.

Each comes from one placed query (its id plus ``_temporal`` / ``_assistant``), over exactly that query's
haystack, so it fits the reader's cap as the query does; the turns it rests on carry ``has_answer``.
"""

from __future__ import annotations

from datetime import datetime

from pipeline.words import PAST, PRESENT
from schemas.conversation import SessionWithTurns
from schemas.ids import parse_version_key
from schemas.query import Query
from schemas.timeline import PreferenceVersion

Ref = tuple[int, int]  # (haystack session position, turn position)


def _voiced(shown: list[SessionWithTurns], key: str) -> Ref | None:
    """The first user turn of the haystack that voices the version ``key``."""
    for i, swt in enumerate(shown):
        for j, turn in enumerate(swt.turns):
            if turn.role == "user" and key in turn.pref_versions:
                return i, j
    return None


def temporal_question(q: Query, shown: list[SessionWithTurns], dates: list[datetime],
                      versions: dict[str, PreferenceVersion]) -> tuple[dict, list[Ref]] | None:
    """(question fields, the two turns it rests on) about the newest change voiced before the question, or None:
    a change of the query's own preference first, else of any preference the haystack voices."""
    voiced = {k for swt in shown for t in swt.turns if t.role == "user" for k in t.pref_versions if k in versions}
    focal = _focal_pref(q)
    own = sorted(k for k in voiced if k.startswith(focal))
    rest = sorted(k for k in voiced if not k.startswith(focal))
    for key in [*sorted(own, key=lambda k: -parse_version_key(k)[1]), *sorted(rest, key=lambda k: -parse_version_key(k)[1])]:
        pref, number = parse_version_key(key)
        older = f"{pref}@{number - 1}"
        new_ref, old_ref = _voiced(shown, key), _voiced(shown, older) if older in versions else None
        if new_ref is None or old_ref is None:
            continue
        days = (dates[new_ref[0]].date() - dates[old_ref[0]].date()).days
        if days <= 0:
            continue
        old, new = versions[older], versions[key]
        question = (f"How many days passed between the day I first told you that I {PAST[old.stance]} "
                    f"{old.item} and the day I first told you that I had come to {PRESENT[new.stance]} it?")
        return {"question": question, "answer": f"{days} days"}, [old_ref, new_ref]
    return None


def assistant_question(q: Query, shown: list[SessionWithTurns], dates: list[datetime],
                       versions: dict[str, PreferenceVersion]) -> tuple[dict, list[Ref]] | None:
    """(question fields, the assistant turn it rests on): what the assistant answered right after the
    newest user turn of the haystack that voices one of the query's own evidence versions, or None."""
    evidence = {(e.session_id, e.turn_index) for e in q.evidence}
    for i in range(len(shown) - 1, -1, -1):
        turns = shown[i].turns
        for j in range(len(turns) - 2, -1, -1):
            turn, reply = turns[j], turns[j + 1]
            voiced = [versions[k] for k in turn.pref_versions if k in versions]
            if (turn.session_id, turn.turn_index) in evidence and turn.role == "user" and voiced and reply.role == "assistant":
                v = voiced[-1]
                question = (f"On {dates[i]:%B} {dates[i].day}, {dates[i].year}, I told you that I {PRESENT[v.stance]} "
                            f"{v.item}. What did you say to me in reply?")
                return {"question": question, "answer": reply.content}, [(i, j + 1)]
    return None


def _focal_pref(q: Query) -> str:
    """The query's own preference id (its focal), or "" to take any preference of the haystack."""
    focal = q.provenance.get("focal", "")
    return focal if focal.startswith("pref_") else ""
