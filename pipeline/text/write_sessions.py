"""write_sessions: multi-session conversations whose turns voice planned beats, annotated by construction."""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel, Field

from pipeline.dataset.budget import with_token_counts
from pipeline.llm import LLM
from pipeline.rng import derive_rng
from pipeline.specs import BEAT, SESSION, SMALL_TALK, TURN_ASSISTANT, TURN_USER
from pipeline.text.beats import (
    Beat,
    SessionPlan,
    beat_problem,
    fallback_exchange,
    mentions,
    plan_sessions,
    topic_label,
)
from pipeline.text.quality import Origin, count, text_problem, words
from pipeline.timeline.catalog import load_catalog
from pipeline.tokens import count_tokens
from schemas.config import RunConfig
from schemas.conversation import Session, SessionWithTurns, Turn
from schemas.drafts import (
    BeatContext,
    ExchangeDraft,
    SessionBeatView,
    SessionContext,
    SmallTalkContext,
    exchange_draft,
    session_draft,
    small_talk_draft,
)
from schemas.persona import Persona
from schemas.timeline import Timeline
from schemas.turn_drafts import (
    AssistantTurnContext,
    UserTurnContext,
    assistant_turn_draft,
    user_turn_draft,
)


class SessionStats(BaseModel):
    """How often the model's wording was kept, regenerated, or replaced by code."""

    sessions: int = 0
    beats: int = 0
    regenerated: int = 0
    fallback_beats: int = 0
    small_talk_kept: int = 0
    small_talk_dropped: int = 0
    problems: dict[str, int] = Field(default_factory=dict)
    origin: dict[str, Origin] = Field(default_factory=dict, description="per field: model-written, re-asked, code")


def write_sessions(persona: Persona, timeline: Timeline, *, llm: LLM, config: RunConfig) -> tuple[list[SessionWithTurns], SessionStats]:
    """Plan sessions in code, have the model word each beat and the small talk, check, fall back."""
    plans = plan_sessions(persona, timeline, config=config)
    stats = SessionStats(sessions=len(plans))
    items = sorted({p.item for p in timeline.preferences})
    allowed = [persona.name, persona.location or "", persona.occupation or "", *items,
               *(e.summary for e in timeline.events)]
    unvoiced = _unvoiced_before(plans, items)
    done: dict[tuple[str, int], tuple[str, str, bool]] = {}
    talks: dict[str, list[tuple[str, str]]] = {}
    mode = writing_mode(config, llm)
    if mode == "session":
        talks = _whole_sessions(persona, plans, items, unvoiced, done, llm=llm, config=config, stats=stats,
                                allowed=allowed)
    first = len(done)  # beats the session calls wrote: the model's first answer
    if mode == "turn":
        first = _turn_exchanges(persona, plans, unvoiced, done, llm=llm, config=config, stats=stats, allowed=allowed)
    beat_turns = _beat_exchanges(persona, plans, unvoiced, done, llm=llm, config=config, stats=stats,
                                 first_sample=1 if mode == "session" else 0, allowed=allowed,
                                 first=first, write=mode != "turn")
    if not talks:  # not the whole-session mode: the ordinary exchanges are their own calls
        talks = _small_talks(persona, plans, items, llm=llm, config=config, stats=stats, allowed=allowed)
    sessions = []
    for plan in plans:
        talk = talks[plan.session_id]
        sessions.append(build_session(plan, beat_turns[plan.session_id], talk,
                                      provenance=_provenance(llm, beat_turns[plan.session_id], config)))
        plain = sum(t == _plain_small_talk(plan.topic) for t in talk)
        for turn in ("user_turn", "assistant_turn"):
            count(stats.origin, turn, model=len(talk) - plain, code=plain)
    return sessions, stats


def _provenance(llm: LLM, exchanges: list[tuple[str, str, bool]], config: RunConfig) -> dict[str, str]:
    talk = SESSION if writing_mode(config, llm) == "session" else SMALL_TALK
    return {"model": llm.name, "beat_template": llm.fingerprint(BEAT)[:16],
            f"{talk.name.split('.')[-1]}_template": llm.fingerprint(talk)[:16],
            "fallback_beats": str(sum(f for _, _, f in exchanges))}


def session_order(n_talk: int, n_beats: int) -> list[int | None]:
    """Pure: the exchanges of a session in order, as a beat index or None for an ordinary exchange: one
    opening ordinary exchange, then the beats in order, spread evenly over the rest."""
    rest = max(n_talk - 1, 0)
    order: list[int | None] = [None] if n_talk else []
    taken = 0
    for j in range(n_beats):
        cut = round((j + 1) * rest / (n_beats + 1))
        order += [None] * (cut - taken) + [j]
        taken = cut
    return order + [None] * (rest - taken)


def _session_context(persona: Persona, plan: SessionPlan, config: RunConfig) -> SessionContext:
    catalog = load_catalog()
    order = session_order(plan.small_talk, len(plan.beats))
    beats = [SessionBeatView(exchange=k + 1, **plan.beats[j].model_dump(include={"kind", "item", "stance", "reason", "event"}))
             for k, j in enumerate(order) if j is not None]
    words = _words(config)
    return SessionContext(name=persona.name, profile=persona.profile, style=persona.style, topic=plan.topic,
                          topic_description=catalog.topics[plan.topic].description if plan.topic in catalog.topics else plan.topic,
                          date=f"{plan.time:%Y-%m-%d}", n_exchanges=len(order), assistant_words_min=words[0],
                          assistant_words_max=words[1], beats=beats)


def _whole_sessions(persona, plans, items, unvoiced, done, *, llm, config, stats, allowed) -> dict[str, list[tuple[str, str]]]:
    """One call per session (grouped by size): beat exchanges that pass their checks go into ``done``;
    returns each session's kept ordinary exchanges (offenders are dropped, never repaired)."""
    by_size: dict[int, list[SessionPlan]] = {}
    for plan in plans:
        by_size.setdefault(plan.small_talk + len(plan.beats), []).append(plan)
    talks: dict[str, list[tuple[str, str]]] = {}
    for n, group in sorted(by_size.items()):
        drafts = llm.generate_each(replace(SESSION, output=session_draft(n, _words(config))),
                                   [_session_context(persona, p, config) for p in group])
        for plan, draft in zip(group, drafts, strict=True):
            talks[plan.session_id] = _split_session(plan, draft, items, unvoiced[plan.session_id], done, config, stats,
                                                    allowed)
    return talks


def _split_session(plan, draft, items, unvoiced, done, config, stats, allowed) -> list[tuple[str, str]]:
    """Check a drafted session: keep faithful beat exchanges in ``done``, return the clean ordinary ones."""
    kept: list[tuple[str, str]] = []
    exchanges = draft.exchanges if draft is not None else []
    for j, ex in zip(session_order(plan.small_talk, len(plan.beats)), exchanges, strict=False):
        if j is None:
            if _ordinary_problem(ex, items, config, allowed):
                stats.small_talk_dropped += 1
            else:
                kept.append((_clean(ex.user), _clean(ex.assistant)))
            continue
        problem = beat_problem(plan.beats[j], ex.user, ex.assistant, unvoiced=unvoiced,
                               max_tokens=config.text.max_turn_tokens, count=count_tokens) or length_problem(
            ex.assistant, _words(config)) or unreadable(ex.user, ex.assistant, allowed)
        if problem is None:
            done[(plan.session_id, j)] = (_clean(ex.user), _clean(ex.assistant), False)
        else:
            stats.problems[problem.split(" '")[0]] = stats.problems.get(problem.split(" '")[0], 0) + 1
    stats.small_talk_kept += len(kept)
    return kept or ([] if plan.beats else [_plain_small_talk(plan.topic)])


def unreadable(user: str, assistant: str, allowed: list[str]) -> str | None:
    """Why a drafted exchange is not readable (``quality.text_problem`` on each turn), or None."""
    problem = text_problem(user, "user_turn", allowed=allowed)
    if problem is not None:
        return f"unreadable user turn ({problem})"
    problem = text_problem(assistant, "assistant_turn", allowed=allowed)
    if problem is not None:
        return f"unreadable assistant turn ({problem})"
    return "assistant turn echoes the user's message" if echoes(user, assistant) else None


def echoes(user: str, assistant: str, span: int = 5) -> bool:
    """Whether the reply repeats ``span`` consecutive words of the user's message (the small model often
    answers in the user's voice: "I have come to enjoy ...")."""
    said = [w.lower() for w in words(user)]
    grams = {tuple(said[i:i + span]) for i in range(len(said) - span + 1)}
    reply = [w.lower() for w in words(assistant)]
    return any(tuple(reply[i:i + span]) in grams for i in range(len(reply) - span + 1))


def _unvoiced_before(plans: list[SessionPlan], items: list[str]) -> dict[str, list[str]]:
    """session id -> preference items not yet voiced by the end of that session (chronological order)."""
    voiced: set[str] = set()
    out = {}
    for plan in sorted(plans, key=lambda p: (p.time, p.session_id)):
        voiced |= {b.item for b in plan.beats if b.item}
        out[plan.session_id] = [i for i in items if i not in voiced]
    return out


def _words(config: RunConfig) -> tuple[int, int]:
    return config.text.assistant_words_min, config.text.assistant_words_max


def _beat_context(persona: Persona, plan: SessionPlan, beat: Beat, words: tuple[int, int]) -> BeatContext:
    return BeatContext(name=persona.name, profile=persona.profile, style=persona.style, topic=plan.topic,
                       date=f"{plan.time:%Y-%m-%d}", kind=beat.kind, item=beat.item, stance=beat.stance,
                       reason=beat.reason, event=beat.event, assistant_words_min=words[0], assistant_words_max=words[1])


def length_problem(assistant: str, words: tuple[int, int]) -> str | None:
    """Why an assistant turn misses the profile's target length (in words), or None when it fits."""
    n = len(assistant.split())
    if n < words[0]:
        return f"assistant turn shorter than {words[0]} words"
    if n > words[1]:
        return f"assistant turn longer than {words[1]} words"
    return None


def _beat_exchanges(persona, plans, unvoiced, done, *, llm, config, stats, first_sample: int = 0, allowed=(),
                    first: int = 0, write: bool = True) -> dict[str, list[tuple[str, str, bool]]]:
    """Per session, one (user, assistant, is_fallback) per beat, in beat order; beats already in ``done``
    (written by the session call) are kept, the others are worded one call each from ``first_sample``."""
    words = _words(config)
    todo = [(plan, i, beat) for plan in plans for i, beat in enumerate(plan.beats)]
    stats.beats = len(todo)
    for sample in range(first_sample, config.text.attempts if write else 0):
        pending = [(p, i, b) for p, i, b in todo if (p.session_id, i) not in done]
        if not pending:
            break
        stats.regenerated += len(pending) if sample else 0
        drafts = llm.generate_each(replace(BEAT, output=exchange_draft(*words)),
                                   [_beat_context(persona, p, b, words) for p, _, b in pending], sample_index=sample)
        for (plan, i, beat), draft in zip(pending, drafts, strict=True):
            problem = "model call failed" if draft is None else beat_problem(
                beat, draft.user, draft.assistant, unvoiced=unvoiced[plan.session_id],
                max_tokens=config.text.max_turn_tokens, count=count_tokens) or length_problem(
                draft.assistant, words) or unreadable(draft.user, draft.assistant, list(allowed))
            if problem is None:
                done[(plan.session_id, i)] = (_clean(draft.user), _clean(draft.assistant), False)
                first += sample == 0
            else:
                stats.problems[problem.split(" '")[0]] = stats.problems.get(problem.split(" '")[0], 0) + 1
    out: dict[str, list[tuple[str, str, bool]]] = {}
    for plan in plans:
        exchanges = []
        for i, beat in enumerate(plan.beats):
            if (plan.session_id, i) not in done:
                stats.fallback_beats += 1
                done[(plan.session_id, i)] = (*fallback_exchange(beat, topic_label(plan.topic)), True)
            exchanges.append(done[(plan.session_id, i)])
        out[plan.session_id] = exchanges
    code = stats.fallback_beats
    for turn in ("user_turn", "assistant_turn"):
        count(stats.origin, turn, model=first, reasked=stats.beats - code - first, code=code)
    return out


def writing_mode(config: RunConfig, llm: LLM) -> str:
    """``text.writing``, with ``auto`` chosen by the backend: a turn per call on the embedded small model,
    whole sessions elsewhere."""
    if config.text.writing != "auto":
        return config.text.writing
    return "turn" if llm.backend.provider == "local" else "session"


def with_writing(config: RunConfig, llm: LLM) -> RunConfig:
    """``config`` with its writing mode decided for ``llm`` (so the plan, the manifest and the run agree)."""
    mode = writing_mode(config, llm)
    return config if mode == config.text.writing else config.model_copy(
        update={"text": config.text.model_copy(update={"writing": mode})})


def _turn_exchanges(persona, plans, unvoiced, done, *, llm, config, stats, allowed) -> int:
    """The small-model mode: per beat, a short call for the user's message (who speaks, the one fact), then
    one for the assistant's reply to that message alone; each turn checked (item, stance, readability),
    asked again with the next sample up to ``text.turn_attempts`` times; the beats left are code's. Returns
    how many the first sample wrote."""
    words = _words(config)
    todo = [(plan, i, beat) for plan in plans for i, beat in enumerate(plan.beats)]
    spec = replace(TURN_ASSISTANT, output=assistant_turn_draft(*words))
    first = 0
    for sample in range(config.text.turn_attempts):
        pending = [(p, i, b) for p, i, b in todo if (p.session_id, i) not in done]
        if not pending:
            break
        stats.regenerated += len(pending) if sample else 0
        asks = [_user_turn_context(persona, p, i, b, config) for p, i, b in pending]
        users = llm.generate_each([replace(TURN_USER, output=user_turn_draft(o)) for o, _ in asks],
                                  [c for _, c in asks], sample_index=sample)
        kept = [(p, i, b, _clean(u.text)) for (p, i, b), u in zip(pending, users, strict=True) if u is not None
                and _turn_problem(b, _clean(u.text), "", unvoiced[p.session_id], config, allowed, stats) is None]
        replies = llm.generate_each(spec, [AssistantTurnContext(message=u, topic=topic_label(p.topic), words_min=words[0],
                                                                words_max=words[1]) for p, _, _, u in kept],
                                    sample_index=sample)
        for (plan, i, beat, user), reply in zip(kept, replies, strict=True):
            text = _clean(reply.text) if reply is not None else ""
            if _turn_problem(beat, user, text, unvoiced[plan.session_id], config, allowed, stats) is None:
                done[(plan.session_id, i)] = (user, text, False)
                first += sample == 0
    return first


def _turn_problem(beat: Beat, user: str, assistant: str, unvoiced: list[str], config: RunConfig, allowed,
                  stats: SessionStats) -> str | None:
    """A turn mode draft's first problem (the user turn alone while the assistant's is ""), counted."""
    reply = assistant or "Thanks for telling me, that helps me understand you better."
    problem = beat_problem(beat, user, reply, unvoiced=unvoiced, max_tokens=config.text.max_turn_tokens,
                           count=count_tokens) or unreadable(user, reply, list(allowed))
    if assistant and problem is None:
        problem = length_problem(assistant, _words(config))
    if problem is not None:
        stats.problems[problem.split(" '")[0]] = stats.problems.get(problem.split(" '")[0], 0) + 1
    return problem


def _user_turn_context(persona: Persona, plan: SessionPlan, index: int, beat: Beat,
                       config: RunConfig) -> tuple[str, UserTurnContext]:
    opening = turn_opening(beat, derive_rng(config.seed, persona.persona_id, f"opening:{plan.session_id}:{index}"))
    return opening, UserTurnContext(name=persona.name, age=persona.age, occupation=persona.occupation, opening=opening)


def turn_opening(beat: Beat, rng) -> str:
    """Code's first words of a user turn in the turn mode: the beat's fact, plainly (the model goes on)."""
    verb = {"like": ("really enjoy", "have come to enjoy"), "dislike": ("really dislike", "have come to avoid")}
    if beat.kind == "initial_preference" and beat.item:
        return f"{rng.choice(('Honestly, I', 'I have to say I', 'For what it is worth, I'))} {verb[beat.stance or 'like'][0]} {beat.item}"
    if beat.kind == "preference_update" and beat.item:
        return f"Since I {beat.event}, I {verb[beat.stance or 'like'][1]} {beat.item}"
    return f"{rng.choice(('By the way, I', 'Small news: I', 'Just so you know, I'))} {beat.event}"


def _clean(text: str) -> str:
    return " ".join(text.split())


def _small_talks(persona, plans: list[SessionPlan], items: list[str], *, llm, config, stats,
                 allowed) -> dict[str, list[tuple[str, str]]]:
    """Every session's ordinary exchanges, one call per session, all in one batch; exchanges that voice an
    item or are not readable are dropped, never repaired."""
    catalog = load_catalog()
    asked = [p for p in plans if p.small_talk]
    contexts = [SmallTalkContext(name=persona.name, profile=persona.profile, style=persona.style, topic=p.topic,
                                 topic_description=catalog.topics[p.topic].description if p.topic in catalog.topics
                                 else p.topic, date=f"{p.time:%Y-%m-%d}", n_exchanges=p.small_talk,
                                 assistant_words_min=_words(config)[0], assistant_words_max=_words(config)[1])
                for p in asked]
    specs = [replace(SMALL_TALK, output=small_talk_draft(p.small_talk, _words(config))) for p in asked]
    drafts = dict(zip((p.session_id for p in asked), llm.generate_each(specs, contexts) if asked else [], strict=True))
    out = {}
    for plan in plans:
        kept = []
        for ex in (draft.exchanges if (draft := drafts.get(plan.session_id)) else []):
            if _ordinary_problem(ex, items, config, allowed):
                stats.small_talk_dropped += 1
            else:
                kept.append((_clean(ex.user), _clean(ex.assistant)))
        stats.small_talk_kept += len(kept)
        out[plan.session_id] = kept or ([] if plan.beats else [_plain_small_talk(plan.topic)])
    return out


def _plain_small_talk(topic: str) -> tuple[str, str]:
    """A code-written ordinary exchange, so that a session without beats is never empty."""
    label = topic_label(topic)
    return (f"Could you give me a few general pointers on {label}?",
            f"Of course. With {label}, it helps to start from what you need right now and go step by step.")


def _ordinary_problem(ex: ExchangeDraft, items: list[str], config: RunConfig, allowed: list[str]) -> bool:
    """An ordinary exchange is dropped when it names a preference item, misses its length, or is not readable."""
    return (any(mentions(ex.user, i) or mentions(ex.assistant, i) for i in items) or _too_long(ex, config)
            or unreadable(ex.user, ex.assistant, allowed) is not None)


def _too_long(ex: ExchangeDraft, config: RunConfig) -> bool:
    """Over the token cap, or an assistant turn outside the target words."""
    too_many = max(count_tokens(ex.user), count_tokens(ex.assistant)) > config.text.max_turn_tokens
    return too_many or length_problem(ex.assistant, _words(config)) is not None


def build_session(plan: SessionPlan, beats: list[tuple[str, str, bool]], talk: list[tuple[str, str]], *, provenance: dict[str, str]) -> SessionWithTurns:
    """Pure: the exchanges in :func:`session_order` (an opening ordinary exchange, then the beats spread evenly)."""
    beat_rows = [(u, a, beat, fb) for (u, a, fb), beat in zip(beats, plan.beats, strict=True)]
    talk_rows = iter([(u, a, None, False) for u, a in talk])
    rows: list[tuple[str, str, Beat | None, bool]] = [
        next(talk_rows) if j is None else beat_rows[j] for j in session_order(len(talk), len(beat_rows))]
    turns: list[Turn] = []
    for user, assistant, beat, fb in rows:
        turns.append(Turn(session_id=plan.session_id, turn_index=len(turns), role="user", content=user,
                          event_ids=list(beat.event_ids) if beat else [],
                          pref_versions=list(beat.pref_versions) if beat else [], fallback=fb))
        turns.append(Turn(session_id=plan.session_id, turn_index=len(turns), role="assistant", content=assistant,
                          fallback=fb))
    session = Session(session_id=plan.session_id, persona_id=plan.persona_id, topic=plan.topic, period=plan.period,
                      time=plan.time, kind="topic", n_turns=len(turns), n_tokens=0, provenance=provenance)
    return with_token_counts(SessionWithTurns(session=session, turns=turns))
