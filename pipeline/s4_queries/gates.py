"""Gates every query passes before it is kept (fail closed), and the code-written wording that is
tried when the model's wording keeps failing them.

Wording gates: options are distinct; the question does not hold the answer, is in first person, asks
something and does not repeat an option; option lengths within a tolerance of the median (tokens);
the correct option is not the single option sharing the most content words with the question; a reworded
reply still names its item (reason, alternative) and keeps its stance. Structural validation re-derives each
label from the timeline and the turn annotations. The no-context judge is optional.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

from pipeline.checks.quality import text_problem
from pipeline.llm import LLM, LLMError
from pipeline.s4_queries.facts import Facts
from pipeline.s4_queries.options import carries_problem, length_problem, overlap_problem
from pipeline.s4_queries.plan import QueryPlan
from pipeline.specs import QUERY_JUDGE
from pipeline.words import keywords, mentions
from schemas.config import QuerySettings
from schemas.query import ABSENT, Query
from schemas.query_drafts import JudgeContext, judge_draft

GATES: tuple[str, ...] = ("structural", "model_call", "duplicate_options", "answer_in_question", "first_person",
                          "not_a_question", "copies_option", "length", "overlap", "carries", "unreadable", "judge")
FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself", "i'm", "i've", "i'd", "i'll", "im", "ive"})
_WORD = re.compile(r"[a-z']+")
# types whose every update-based query shows the superseded version (track's chain sets show a prefix
# only in some roles, acknowledge's pair with "not said" holds none, recall is about events)
OUTDATED_TYPES = ("suggest_new_ideas", "revisit_reasons_behind_preference_updates",
                  "provide_preference_aligned_recommendations", "generalize_to_new_scenarios")


def copied_option(question: str, texts: list[str]) -> int | None:
    """1-based number of an option the question mostly repeats (half its content words or more), or None."""
    words = keywords(question)
    for i, text in enumerate(texts, start=1):
        option = keywords(text)
        if option and len(words & option) * 2 >= len(option):
            return i
    return None


def wording_problem(plan: QueryPlan, question: str, texts: list[str], tolerance: float) -> tuple[str, str] | None:
    """(gate, detail) for the first wording gate this wording fails, or None when it passes them all."""
    if len({t.strip().casefold() for t in texts}) < len(texts) or not all(t.strip() for t in texts):
        return "duplicate_options", "two options are the same or empty"
    if mentions(question, plan.answer):
        return "answer_in_question", f"the question names the answer {plan.answer!r}"
    if not FIRST_PERSON & set(_WORD.findall(question.casefold().replace("\u2019", "'"))):
        return "first_person", "the question is not in first person"
    if "?" not in question:
        return "not_a_question", "the user's message asks nothing"
    if copied := copied_option(question, texts):
        return "copies_option", f"the question repeats option {copied}"
    if problem := length_problem(texts, tolerance):
        return "length", problem
    if problem := overlap_problem(question, texts, plan.correct_index):
        return "overlap", problem
    if problem := carries_problem([o.text for o in plan.options], texts):
        return "carries", problem
    allowed = [plan.answer, plan.ask, *(o.text for o in plan.options)]  # the plan's own words count as known
    if problem := text_problem(question, "question", allowed=allowed):
        return "unreadable", f"question: {problem}"
    for text in texts:
        if problem := text_problem(text, "option", allowed=allowed):
            return "unreadable", f"option: {problem}"
    return None


def code_wording(plan: QueryPlan, tolerance: float) -> tuple[str, list[str]] | None:
    """Code's own wording: the plan's message and replies as the builders wrote them (one reply variant, so
    lengths differ only by slot values, never evened out by appended phrases), when it passes every gate."""
    texts = [o.text for o in plan.options]
    return (plan.ask, texts) if wording_problem(plan, plan.ask, texts, tolerance) is None else None


def structural_problems(query: Query, facts: Facts) -> list[str]:
    """Every label re-derived: correct groundings valid at as_of, outdated ones ended before it,
    evidence turns voice a grounding and precede the anchor."""
    problems = _option_problems(query, facts) + _form_problems(query, facts)
    problems += _evidence_problems(query, facts)
    if query.n_pref_updates and query.type in OUTDATED_TYPES and not any(
            o.role == "outdated_preference" for o in query.options):
        problems.append("an update-based query has no outdated_preference option")
    return problems


def _option_problems(query: Query, facts: Facts) -> list[str]:
    versions = {p.key: p for p in facts.timeline.preferences}
    events = {e.event_id: e for e in facts.timeline.events}
    problems = []
    correct = query.options[query.correct_index]
    keys = [versions[g] for g in correct.grounding if g in versions]
    if not correct.grounding:
        problems.append("the correct option has no grounding")
    if keys and not max(keys, key=lambda v: v.version).valid_at(query.as_of):
        problems.append("the correct option's latest version is not valid at as_of")
    if any(v.valid_to is None or v.valid_to > query.as_of for v in keys if v != max(keys, key=lambda v: v.version)):
        problems.append("the correct chain holds a version that had not ended by as_of")
    if any(events[g].time >= query.as_of for g in correct.grounding if g in events):
        problems.append("the correct option cites an event after as_of")
    if any(not facts.pools.unheld(g.split(":", 1)[1]) for g in correct.grounding if g.startswith(("catalog:", "inventory:"))):
        problems.append("the correct new idea is something the persona already holds")
    if any(not facts.unsaid(g.split(":", 1)[1]) for g in correct.grounding if g.startswith("inventory:")):
        problems.append("the correct new idea was already named in the history")
    focal = query.provenance.get("focal", "")
    causes = {c.event_id for c in facts.causes(focal)} if focal.startswith("pref_") else set()
    changes = [v.valid_from for v in facts.timeline.versions(focal) if v.valid_from <= query.as_of] if causes else []
    for option in query.options:
        lived = [events[g] for g in option.grounding if g in events]
        if option.role == "wrong_reason" and any(e.event_id in causes or any(t > e.time for t in changes[1:])
                                                 for e in lived):
            problems.append("a wrong reason the persona lived is a cause of the item, or the item changed after it")
        if option.role == "outdated_preference":
            old = [versions.get(g) for g in option.grounding if "@" in g]
            if not old or any(v is None or v.valid_to is None or v.valid_to > query.as_of for v in old):
                problems.append("an outdated option's version had not ended by as_of")
    return problems


def _form_problems(query: Query, facts: Facts) -> list[str]:
    """Abstentions re-checked against the turns (nothing voiced before the question), and a "no change"
    answer against the timeline (the preference never changed by as_of)."""
    correct = query.options[query.correct_index]
    if query.abstains():
        what = correct.grounding[0].removeprefix(ABSENT)
        if what.startswith("topic:"):
            told = facts.told_by(what.removeprefix("topic:"), query.as_of)
            return [f"the abstention's topic has {len(told)} told events"] if told else []
        return [] if facts.unsaid(what) else [f"the abstention's item {what!r} was voiced"]
    keys = [g for g in correct.grounding if "@" in g]
    pref = keys[-1].split("@")[0] if keys else None
    if query.type == "track_full_preference_evolution" and pref:
        chain = [v.key for v in facts.timeline.versions(pref) if v.valid_from <= query.as_of]
        if chain != keys:
            return ["the correct chain is not the preference's whole history by as_of"]
    if query.type == "revisit_reasons_behind_preference_updates" and pref and len(correct.grounding) == 1 \
            and facts.updates(pref, query.as_of):
        return ["a 'no change' answer for a preference that changed"]
    return []


def _evidence_problems(query: Query, facts: Facts) -> list[str]:
    sessions = {s.session.session_id: s for s in facts.sessions}
    grounded = {g for o in query.options for g in o.grounding}
    anchor = sessions.get(query.anchor_session_id) if query.anchor_session_id else None
    if query.anchor_session_id is not None:
        final = facts.final(query.topic)
        if anchor is None or final is None or anchor.session.session_id != final.session.session_id \
                or anchor.session.time != query.as_of:
            return ["the anchor is not the topic's final session at as_of"]
        if query.anchor_turn_index >= len(anchor.turns) or anchor.turns[query.anchor_turn_index].role != "user":
            return ["the anchor is not a user turn"]
    if not query.evidence:
        return [] if query.abstains() else ["no evidence"]
    problems = []
    for ev in query.evidence:
        swt = sessions.get(ev.session_id)
        turn = swt.turns[ev.turn_index] if swt and ev.turn_index < len(swt.turns) else None
        if turn is None or not grounded & {*turn.pref_versions, *turn.event_ids}:
            problems.append(f"evidence {ev.session_id}#{ev.turn_index} voices no grounding")
        elif swt.session.time > query.as_of or (anchor is not None and _after(swt, ev.turn_index, anchor, query)):
            problems.append(f"evidence {ev.session_id}#{ev.turn_index} does not precede the anchor")
    return problems


def _after(swt, turn_index: int, anchor, query: Query) -> bool:
    if swt.session.session_id == anchor.session.session_id:
        return turn_index >= query.anchor_turn_index
    return swt.session.time >= anchor.session.time


def judge_hits(query: Query, judge: LLM, settings: QuerySettings, rng: random.Random) -> int | None:
    """How often a no-context judge picks the correct option over ``judge_shuffles`` shuffles (None on failure)."""
    n = len(query.options)
    spec = replace(QUERY_JUDGE, output=judge_draft(n))
    contexts, corrects = [], []
    for _ in range(settings.judge_shuffles):
        order = list(range(n))
        rng.shuffle(order)
        contexts.append(JudgeContext(question=query.question, options=[query.options[i].text for i in order]))
        corrects.append(order.index(query.correct_index) + 1)
    try:
        answers = [judge.generate(spec, c, sample_index=k) for k, c in enumerate(contexts)]
    except LLMError:
        return None
    return sum(a.answer == c for a, c in zip(answers, corrects, strict=True))
