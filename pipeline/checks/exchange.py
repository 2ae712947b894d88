"""Every check a model-written exchange of a topic session passes before it is kept: each turn readable and
safe (:func:`pipeline.checks.quality.text_problem`, which scores hostility too), neither repeating its
prompt (:mod:`pipeline.checks.echo`) nor wandering off the session's topic (:mod:`pipeline.checks.topic`),
the assistant's turn a reply to the user's (:mod:`pipeline.checks.replies`) that does not repeat it, and
neither taking a grave event it is about lightly (:mod:`pipeline.checks.tone`).
What a beat's own facts need (the item named, the stance held in every clause) is ``beats.beat_problem``'s."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.checks.echo import echo_problem
from pipeline.checks.quality import text_problem, words
from pipeline.checks.replies import reply_problem
from pipeline.checks.stance import attributed_problem
from pipeline.checks.tone import tone_problem
from pipeline.checks.topic import topic_problem
from pipeline.words import without

ECHOED = "assistant turn echoes the user's message"


@dataclass(frozen=True)
class TurnView:
    """What a persona's turns are checked against: the words that count as known (name, place, job, items,
    events), the profile (not to be copied out), every item the persona holds (not the assistant's own
    tastes) and the session's topic (None: no topic check)."""

    allowed: tuple[str, ...]
    profile: str = ""
    items: tuple[str, ...] = ()
    topic: str | None = None

    def at(self, topic: str) -> TurnView:
        return replace(self, topic=topic)


def turn_problem(text: str, role: str, view: TurnView, *, item: str = "", known: tuple[str, ...] = ()) -> str | None:
    """Why one turn (``role`` user or assistant) is not kept, or None. ``item``: the exchange's item;
    ``known``: phrases code put in the turn (the beat's event), which the topic check leaves out."""
    problem = _unreadable(text, role, view.allowed)
    if problem is not None:
        return problem
    problem = echo_problem(text, view.profile)
    if problem is None and view.topic:
        problem = topic_problem(text, view.topic, (item,) if item else (), known)
    return f"{role} turn {problem}" if problem else None


def exchange_problem(user: str, assistant: str | None, view: TurnView, *, item: str = "", stance: str = "",
                     known: tuple[str, ...] = ()) -> str | None:
    """The first problem of an exchange (of the user turn alone while ``assistant`` is None), or None.
    ``stance``: the user's stance toward ``item`` in this exchange, which the reply may not turn around."""
    problem = turn_problem(user, "user", view, item=item, known=known)
    if problem is None and (light := tone_problem(user, known, sentiment=not item)):
        problem = f"user turn {light}"
    if problem is not None or assistant is None:
        return problem
    problem = turn_problem(assistant, "assistant", view, item=item, known=known)
    if problem is None and (light := tone_problem(assistant, known, sentiment=False)):  # comfort reads as cheer
        problem = f"assistant turn {light}"
    if problem is not None:
        return problem
    if echoes(without(user, [item], " | "), without(assistant, [item], " | ")):  # naming the item is no echo
        return ECHOED
    return reply_problem(user, assistant, view.items, item) or (
        attributed_problem(assistant, item, stance) if item and stance else None)


def unreadable(user: str, assistant: str, allowed: list[str]) -> str | None:
    """Why a drafted exchange is not readable (``quality.text_problem`` on each turn, the reply no echo of the
    message), or None: the readability part of :func:`exchange_problem`."""
    return (_unreadable(user, "user", allowed) or _unreadable(assistant, "assistant", allowed)
            or (ECHOED if echoes(user, assistant) else None))


def _unreadable(text: str, role: str, allowed) -> str | None:
    problem = text_problem(text, f"{role}_turn", allowed=allowed)
    return f"unreadable {role} turn ({problem})" if problem is not None else None


def echoes(user: str, assistant: str, span: int = 5) -> bool:
    """Whether the reply repeats ``span`` consecutive words of the user's message (the small model often
    answers in the user's voice: "I have come to enjoy ...")."""
    said = [w.lower() for w in words(user)]
    grams = {tuple(said[i:i + span]) for i in range(len(said) - span + 1)}
    reply = [w.lower() for w in words(assistant)]
    return any(tuple(reply[i:i + span]) in grams for i in range(len(reply) - span + 1))
