"""write_sessions: multi-session conversations whose turns voice planned beats, annotated by construction."""

from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel, Field

from pipeline.catalog import load_catalog
from pipeline.checks.exchange import TurnView, echoes, exchange_problem, unreadable
from pipeline.checks.quality import Origin, count
from pipeline.checks.verdicts import heard
from pipeline.config import writing_mode
from pipeline.llm import LLM
from pipeline.rng import derive_rng
from pipeline.s3_text.beats import VOICES, Beat, SessionPlan, beat_problem, fallback_exchange, plan_sessions
from pipeline.s3_text.implicit import confirm_implicit
from pipeline.s3_text.turn_mode import (
    Exchange,
    TurnAsk,
    count_origin,
    length_problem,
    ordinary_openings,
    reply_words,
    turn_opening,
    write_turns,
)
from pipeline.s3_text.turn_mode import clean as _clean
from pipeline.specs import BEAT, SESSION, SMALL_TALK
from pipeline.tokens import count_tokens, with_token_counts
from pipeline.words import content_words, mentions, topic_label
from schemas.config import RunConfig
from schemas.conversation import Session, SessionWithTurns, Turn
from schemas.drafts import (
    BeatContext,
    SessionBeatView,
    SessionContext,
    SmallTalkContext,
    exchange_draft,
    session_draft,
    small_talk_draft,
)
from schemas.persona import Persona
from schemas.timeline import Timeline
from schemas.turn_drafts import UserTurnContext

__all__ = ["echoes", "length_problem", "unreadable", "turn_opening", "write_sessions"]


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
    view = TurnView(allowed=(persona.name, persona.location or "", persona.occupation or "", *items,
                                *(e.summary for e in timeline.events)), profile=persona.profile, items=tuple(items))
    unvoiced = _unvoiced_before(plans, items)
    done: dict[tuple[str, int], Exchange] = {}
    talks: dict[str, list[Exchange]] = {}
    mode = writing_mode(config, llm)
    if mode == "session":
        talks = _whole_sessions(persona, plans, items, unvoiced, done, llm=llm, config=config, stats=stats,
                                view=view)
    if mode == "turn":  # the beats' and the ordinary exchanges' turns, all in flight together
        beat_asks = _turn_exchange_asks(persona, plans, unvoiced, config=config, view=view)
        talk_asks = _turn_small_talk_asks(persona, plans, items, config=config, view=view)
        written = write_turns([*beat_asks, *talk_asks], llm=llm, config=config, stats=stats)
        _take_turn_exchanges(plans, written, done)
        talks = _take_turn_small_talks(plans, written, stats)
    beat_turns = _beat_exchanges(persona, plans, unvoiced, done, llm=llm, config=config, stats=stats,
                                 first_sample=1 if mode == "session" else 0, view=view, write=mode != "turn")
    if not talks:  # the exchange mode: the ordinary exchanges are one call per session
        talks = _small_talks(persona, plans, items, llm=llm, config=config, stats=stats, view=view)
    sessions = []
    for plan in plans:
        talk = talks[plan.session_id]
        sessions.append(build_session(plan, beat_turns[plan.session_id], talk,
                                      provenance=_provenance(llm, beat_turns[plan.session_id], config)))
        count_origin(stats.origin, [*beat_turns[plan.session_id], *talk])
        froms = [ex.user_from for ex, b in zip(beat_turns[plan.session_id], plan.beats, strict=True) if b.implicit]
        count(stats.origin, "implicit_turn", model=froms.count(0), reasked=sum(bool(f) for f in froms),
              code=froms.count(None))
    return sessions, stats


def _provenance(llm: LLM, exchanges: list[Exchange], config: RunConfig) -> dict[str, str]:
    talk = SESSION if writing_mode(config, llm) == "session" else SMALL_TALK
    return {"model": llm.name, "beat_template": llm.fingerprint(BEAT)[:16],
            f"{talk.name.split('.')[-1]}_template": llm.fingerprint(talk)[:16],
            "fallback_beats": str(sum(ex.user_from is None for ex in exchanges))}


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
    beats = [SessionBeatView(exchange=k + 1, **_shown(plan.beats[j])) for k, j in enumerate(order) if j is not None]
    words = _words(config)
    return SessionContext(name=persona.name, profile=persona.profile, style=persona.style, topic=plan.topic,
                          topic_description=catalog.topics[plan.topic].description if plan.topic in catalog.topics else plan.topic,
                          date=f"{plan.time:%Y-%m-%d}", n_exchanges=len(order), assistant_words_min=words[0],
                          assistant_words_max=words[1], beats=beats)


def _whole_sessions(persona, plans, items, unvoiced, done, *, llm, config, stats, view) -> dict[str, list[Exchange]]:
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
                                                    view)
    confirm_implicit(persona, [(p, i, b) for p in plans for i, b in enumerate(p.beats)], done, set(), llm=llm,
                      config=config, stats=stats, sample=0)
    return talks


def _split_session(plan, draft, items, unvoiced, done, config, stats, view) -> list[Exchange]:
    """Check a drafted session: keep faithful beat exchanges in ``done``, return the clean ordinary ones."""
    kept: list[Exchange] = []
    exchanges = draft.exchanges if draft is not None else []
    for j, ex in zip(session_order(plan.small_talk, len(plan.beats)), exchanges, strict=False):
        if j is None:
            if heard(ex, _ordinary_problem(ex.user, ex.assistant, items, config, view.at(plan.topic))):
                stats.small_talk_dropped += 1
            else:
                kept.append(Exchange(_clean(ex.user), _clean(ex.assistant), 0, 0))
            continue
        problem = beat_problem(plan.beats[j], ex.user, ex.assistant, unvoiced=unvoiced,
                               max_tokens=config.text.max_turn_tokens, count=count_tokens) or length_problem(
            ex.assistant, _words(config)) or _checked(plan.beats[j], ex.user, ex.assistant, view.at(plan.topic))
        if heard(ex, problem) is None:
            done[(plan.session_id, j)] = Exchange(_clean(ex.user), _clean(ex.assistant), 0, 0)
        else:
            stats.problems[problem.split(" '")[0]] = stats.problems.get(problem.split(" '")[0], 0) + 1
    stats.small_talk_kept += len(kept)
    return kept or ([] if plan.beats else [_plain_small_talk(plan.topic)])


def _unvoiced_before(plans: list[SessionPlan], items: list[str]) -> dict[str, list[str]]:
    """session id -> preference items not yet named by the end of that session (chronological order): what
    no reply may name (an item voiced only implicitly stays in it)."""
    voiced: set[str] = set()
    out = {}
    for plan in sorted(plans, key=lambda p: (p.time, p.session_id)):
        voiced |= {b.item for b in plan.beats if b.item and not b.implicit}  # an implicit turn never names it
        out[plan.session_id] = [i for i in items if i not in voiced]
    return out


def _words(config: RunConfig) -> tuple[int, int]:
    return config.text.assistant_words_min, config.text.assistant_words_max


def _shown(beat: Beat) -> dict:
    """What the model is told of a beat: an implicit one's cue and event, never its item, stance or reason."""
    if beat.implicit:
        return {"kind": beat.kind, "item": None, "stance": None, "reason": None, "event": beat.event, "cue": beat.cue}
    return beat.model_dump(include={"kind", "item", "stance", "reason", "event"})


def _beat_context(persona: Persona, plan: SessionPlan, beat: Beat, words: tuple[int, int]) -> BeatContext:
    return BeatContext(name=persona.name, profile=persona.profile, style=persona.style, topic=plan.topic,
                       date=f"{plan.time:%Y-%m-%d}", **_shown(beat), assistant_words_min=words[0],
                       assistant_words_max=words[1])


def _beat_exchanges(persona, plans, unvoiced, done, *, llm, config, stats, view: TurnView, first_sample: int = 0,
                    write: bool = True) -> dict[str, list[Exchange]]:
    """Per session, one exchange per beat, in beat order; beats already in ``done`` (written by the session
    call, or the turn mode) are kept, the others are worded one call each from ``first_sample``; what is left
    is code's."""
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
        before = set(done)
        for (plan, i, beat), draft in zip(pending, drafts, strict=True):
            problem = "model call failed" if draft is None else beat_problem(
                beat, draft.user, draft.assistant, unvoiced=unvoiced[plan.session_id],
                max_tokens=config.text.max_turn_tokens, count=count_tokens) or length_problem(
                draft.assistant, words) or _checked(beat, draft.user, draft.assistant, view.at(plan.topic))
            if heard(draft, problem) is None:
                done[(plan.session_id, i)] = Exchange(_clean(draft.user), _clean(draft.assistant), sample, sample)
            else:
                stats.problems[problem.split(" '")[0]] = stats.problems.get(problem.split(" '")[0], 0) + 1
        confirm_implicit(persona, pending, done, before, llm=llm, config=config, stats=stats, sample=sample)
    out: dict[str, list[Exchange]] = {}
    for plan in plans:
        exchanges = []
        for i, beat in enumerate(plan.beats):
            if (plan.session_id, i) not in done:
                stats.fallback_beats += 1
                rng = derive_rng(config.seed, persona.persona_id, f"fallback:{plan.session_id}:{i}")
                done[(plan.session_id, i)] = Exchange(*fallback_exchange(beat, topic_label(plan.topic), rng), None, None)
            exchanges.append(done[(plan.session_id, i)])
        out[plan.session_id] = exchanges
    return out


def _turn_exchange_asks(persona, plans, unvoiced, *, config, view) -> list[TurnAsk]:
    """The small-model mode's beats (``turn_mode.write_turns``): a user turn opening with the beat's fact, each
    turn checked (item, stance, readability); a beat whose user turn passed but whose replies all failed
    keeps that turn beside code's reply, the rest are left to code (:func:`_take_turn_exchanges`)."""
    asks = []
    for plan in plans:
        for i, beat in enumerate(plan.beats):
            opening = turn_opening(beat, derive_rng(config.seed, persona.persona_id, f"opening:{plan.session_id}:{i}"))
            asks.append(TurnAsk(
                key=(plan.session_id, i), topic=topic_label(plan.topic),
                context=UserTurnContext(name=persona.name, age=persona.age, occupation=persona.occupation, opening=opening),
                user_problem=lambda u, b=beat, p=plan: _turn_problem(b, u, None, unvoiced[p.session_id], config,
                                                                     view.at(p.topic)),
                reply_problem=lambda u, r, b=beat, p=plan: _turn_problem(b, u, r, unvoiced[p.session_id], config,
                                                                         view.at(p.topic)),
                fixed=fallback_exchange(beat, "", derive_rng(config.seed, persona.persona_id,
                                                             f"fallback:{plan.session_id}:{i}"))[0]
                if beat.implicit else None))
    return asks


def _take_turn_exchanges(plans, written, done) -> None:
    for plan in plans:
        for i, beat in enumerate(plan.beats):
            if (key := (plan.session_id, i)) in written:
                user, s, reply, r = written[key]
                done[key] = Exchange(user, reply if reply is not None else
                                     fallback_exchange(beat, topic_label(plan.topic))[1], s, r)


def _turn_problem(beat: Beat, user: str, assistant: str | None, unvoiced: list[str], config: RunConfig,
                  view: TurnView) -> str | None:
    """A turn mode draft's first problem (the user turn alone while the assistant's is None)."""
    reply = assistant if assistant is not None else "Thanks for telling me."
    problem = beat_problem(beat, user, reply, unvoiced=unvoiced, max_tokens=config.text.max_turn_tokens,
                           count=count_tokens) or _checked(beat, user, assistant, view)
    if assistant is not None and problem is None:
        problem = length_problem(assistant, reply_words(config))
    return problem


def _checked(beat: Beat, user: str, assistant: str | None, view: TurnView) -> str | None:
    """:func:`exchange_problem` for a beat's exchange: its item, and its event and reason as code's words."""
    if beat.implicit:  # the item is not in the turns: the cue is code's words (its names are known, not unsafe)
        return exchange_problem(user, assistant, replace(view, allowed=(*view.allowed, beat.cue or "")),
                                known=tuple(k for k in (beat.event, beat.told, beat.cue, *content_words(beat.cue or "")) if k))
    return exchange_problem(user, assistant, view, item=beat.item or "",
                            stance=beat.stance or "" if beat.kind != "life_event" else "",
                            known=tuple(k for k in (beat.event, beat.told, beat.reason) if k))


TALK = "talk:"  # an ordinary exchange's ask key: (TALK + session id, k), apart from the beats' (session id, i)


def _turn_small_talk_asks(persona, plans: list[SessionPlan], items: list[str], *, config, view) -> list[TurnAsk]:
    """The small-model mode's ordinary exchanges: per exchange, a user turn opening with a plain question on
    the topic, then the reply; an exchange whose turns do not both pass is dropped, never repaired
    (:func:`_take_turn_small_talks`)."""
    catalog, asks = load_catalog(), []
    openings = {topic: iter(ordinary_openings(topic_label(topic), list(catalog.facets.get(topic, {}).values()),
                                              sum(p.small_talk for p in plans if p.topic == topic),
                                              derive_rng(config.seed, persona.persona_id, f"ordinary:{topic}")))
                for topic in {p.topic for p in plans}}
    for plan in plans:
        label = topic_label(plan.topic)
        for k in range(plan.small_talk):
            opening = next(openings[plan.topic])
            asks.append(TurnAsk(
                key=(TALK + plan.session_id, k), topic=label,
                context=UserTurnContext(name=persona.name, age=persona.age, occupation=persona.occupation, opening=opening),
                user_problem=lambda u, p=plan: _ordinary_problem(u, None, items, config, view.at(p.topic),
                                                                 words=(1, 10_000)),
                reply_problem=lambda u, r, p=plan: _ordinary_problem(u, r, items, config, view.at(p.topic),
                                                                     words=reply_words(config))))
    return asks


def _take_turn_small_talks(plans: list[SessionPlan], written, stats) -> dict[str, list[Exchange]]:
    out = {}
    for plan in plans:
        kept = []
        for k in range(plan.small_talk):
            user, s, reply, r = written.get((TALK + plan.session_id, k), (None, None, None, None))
            if user is not None and reply is not None:
                kept.append(Exchange(user, reply, s, r))
        stats.small_talk_kept += len(kept)
        stats.small_talk_dropped += plan.small_talk - len(kept)
        out[plan.session_id] = kept or ([] if plan.beats else [_plain_small_talk(plan.topic)])
    return out


def _small_talks(persona, plans: list[SessionPlan], items: list[str], *, llm, config, stats,
                 view) -> dict[str, list[Exchange]]:
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
            if heard(ex, _ordinary_problem(ex.user, ex.assistant, items, config, view.at(plan.topic))):
                stats.small_talk_dropped += 1
            else:
                kept.append(Exchange(_clean(ex.user), _clean(ex.assistant), 0, 0))
        stats.small_talk_kept += len(kept)
        out[plan.session_id] = kept or ([] if plan.beats else [_plain_small_talk(plan.topic)])
    return out


def _plain_small_talk(topic: str) -> Exchange:
    """A code-written ordinary exchange, so that a session without beats is never empty."""
    label = topic_label(topic)
    return Exchange(f"Could you give me a few general pointers on {label}?",
                    f"Of course. With {label}, it helps to start from what you need right now and go step by step.",
                    None, None)


def _ordinary_problem(user: str, assistant: str | None, items: list[str], config: RunConfig, view: TurnView,
                      words: tuple[int, int] | None = None) -> str | None:
    """Why an ordinary exchange is dropped (the user turn alone while ``assistant`` is None): it names a
    preference item, misses its length (``words``, by default the profile's), or fails a check of
    :func:`exchange_problem`; None when it is kept."""
    turns = [user] if assistant is None else [user, assistant]
    if any(mentions(t, i) for t in turns for i in items):
        return "ordinary exchange names a preference item"
    if max(map(count_tokens, turns)) > config.text.max_turn_tokens:
        return "ordinary turn over the token cap"
    return (length_problem(assistant, words or _words(config)) if assistant is not None else None) or exchange_problem(
        user, assistant, view)


def build_session(plan: SessionPlan, beats: list[Exchange], talk: list[Exchange], *, provenance: dict[str, str]) -> SessionWithTurns:
    """Pure: the exchanges in :func:`session_order` (an opening ordinary exchange, then the beats spread evenly);
    a turn written by code is flagged ``fallback``."""
    beat_rows = [(ex, beat) for ex, beat in zip(beats, plan.beats, strict=True)]
    talk_rows = iter([(ex, None) for ex in talk])
    rows: list[tuple[Exchange, Beat | None]] = [
        next(talk_rows) if j is None else beat_rows[j] for j in session_order(len(talk), len(beat_rows))]
    turns: list[Turn] = []
    for ex, beat in rows:
        turns.append(Turn(session_id=plan.session_id, turn_index=len(turns), role="user", content=ex.user,
                          event_ids=list(beat.event_ids) if beat else [],
                          pref_versions=list(beat.pref_versions) if beat else [], fallback=ex.user_from is None,
                          voicing=beat.voicing if beat and beat.kind in VOICES else None))
        turns.append(Turn(session_id=plan.session_id, turn_index=len(turns), role="assistant", content=ex.assistant,
                          fallback=ex.assistant_from is None))
    session = Session(session_id=plan.session_id, persona_id=plan.persona_id, topic=plan.topic, period=plan.period,
                      time=plan.time, kind="topic", n_turns=len(turns), n_tokens=0, provenance=provenance)
    return with_token_counts(SessionWithTurns(session=session, turns=turns))
