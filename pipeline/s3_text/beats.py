"""Session plans decided in code: which sessions exist, when, and which facts (beats) each one voices."""

from __future__ import annotations

import random
import re
from collections import defaultdict
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from pipeline.catalog import load_situations, load_taxonomy
from pipeline.checks.stance import stance_problem
from pipeline.checks.topic import reaches
from pipeline.cues import cues_of, implicit_problem
from pipeline.life_state import told_by_user
from pipeline.rng import derive_rng
from pipeline.s2_timeline.periods import PeriodWindow, period_windows
from pipeline.words import mentions
from schemas.config import RunConfig
from schemas.conversation import Voicing
from schemas.drafts import BeatKind
from schemas.ids import stable_id
from schemas.persona import Persona
from schemas.timeline import Event, PreferenceVersion, Timeline


class Beat(BaseModel):
    """One fact a user turn must voice, with the exact annotations that turn will carry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: BeatKind
    topic: str
    item: str | None = None
    stance: str | None = None
    previous_stance: str | None = None
    reason: str | None = None
    event: str | None = None
    pref_versions: list[str] = []
    event_ids: list[str] = []
    voicing: Voicing = "explicit"
    cue: str | None = None  # an implicit beat's cue situation: what the user asks for instead of naming the item

    @property
    def implicit(self) -> bool:
        return self.voicing == "implicit"

    @property
    def told(self) -> str | None:
        """The event as the user says it after "I" ("learned I was pregnant"; stored of a third person)."""
        return told_by_user(self.event, tuple(load_situations().others)) if self.event else None


class SessionPlan(BaseModel):
    """A session to write: its identity and time, its beats in order, and how much small talk."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    persona_id: str
    topic: str
    period: str
    time: datetime
    beats: list[Beat]
    small_talk: int


def plan_sessions(persona: Persona, timeline: Timeline, *, config: RunConfig) -> list[SessionPlan]:
    """Every (topic, period) gets ``sessions_per_period`` sessions; each fact is voiced exactly once (a life event
    that belongs to none of the run's topics, by its effects or its words, is lived but not told)."""
    rng = derive_rng(config.seed, persona.persona_id, "plan_sessions")
    beats = _beats_by_slot(timeline, config, rng)
    _mark_implicit(beats, config.text.implicit_share, derive_rng(config.seed, persona.persona_id, "voicing"))
    plans = []
    k = config.text.sessions_per_period
    for window in period_windows(config):
        order = list(config.topics)
        rng.shuffle(order)
        for slot, (topic, j) in enumerate((t, j) for t in order for j in range(k)):
            plans.append(SessionPlan(
                session_id=stable_id("ses", persona.persona_id, topic, window.name, j),
                persona_id=persona.persona_id, topic=topic, period=window.name,
                time=_session_time(window, slot, len(order) * k),
                beats=(own := beats[(topic, window.name)][j::k]), small_talk=config.text.ordinary_exchanges(len(own)),
            ))
    return plans


def _session_time(window: PeriodWindow, slot: int, slots: int) -> datetime:
    span = window.sessions_end - window.at
    return (window.at + span * slot / slots).replace(second=0, microsecond=0)


def _beats_by_slot(timeline: Timeline, config: RunConfig, rng) -> dict[tuple[str, str], list[Beat]]:
    first = config.periods[0].name
    versions = {p.key: p for p in timeline.preferences}
    slots: dict[tuple[str, str], list[Beat]] = defaultdict(list)
    for p in timeline.preferences:
        if p.version == 1 and p.caused_by_event_id is None:
            slots[(p.topic, first)].append(_initial_beat(p))
    voiced_life: set[str] = set()
    life_of = {e.child_event_id: e.parent_event_id for e in timeline.edges if e.relation == "causes"}
    for e in timeline.events:
        if e.kind == "preference_update":
            life = timeline.event(life_of[e.event_id])
            voiced_life.add(life.event_id)
            slots[(e.topic, e.period)].append(_update_beat(e, life, versions, timeline))
        elif e.kind == "routine":
            slots[(e.topic, e.period)].append(Beat(kind="routine", topic=e.topic, item=versions[e.pref_refs[0]].item,
                                                   stance=versions[e.pref_refs[0]].stance, event=e.summary,
                                                   pref_versions=list(e.pref_refs), event_ids=[e.event_id]))
    taxonomy = load_taxonomy()
    specs = taxonomy.event_specs()
    for e in timeline.events:
        if e.kind == "life_event" and e.event_id not in voiced_life:
            found = specs.get(e.summary)  # voiced in a topic its effects name, else one its words belong to
            named = list(dict.fromkeys(x.topic for x in found[1].parsed_effects(taxonomy.topic_aliases))) if found else []
            near = [t for t in named if t in config.topics] or [t for t in config.topics if reaches(e.summary, t)]
            if not near:
                continue  # of none of the run's topics: told in one, it would answer a recall question there
            topic = rng.choice(near)
            slots[(topic, e.period)].append(Beat(kind="life_event", topic=topic, event=e.summary, event_ids=[e.event_id]))
    return slots


VOICES = ("initial_preference", "preference_update")  # the beats that voice a preference version


def _mark_implicit(slots: dict[tuple[str, str], list[Beat]], share: float, rng) -> None:
    """Marks ``share`` of the preference-voicing beats implicit, each with a cue drawn from its item's cues
    (chosen among the beats that have one whose code wording passes the implicit check, of items no routine names);
    the rest stay explicit."""
    keys = [(slot, i) for slot in sorted(slots) for i, b in enumerate(slots[slot]) if b.kind in VOICES and b.item]
    routines = {b.item for beats in slots.values() for b in beats if b.kind == "routine"}  # they name their item
    able = []
    for slot, i in keys:
        beat = slots[slot][i]
        if beat.item in routines:
            continue
        cues = [c for c in cues_of(beat.topic, beat.item or "", beat.stance or "")
                if implicit_problem(implicit_wording(beat.model_copy(update={"cue": c}), random.Random(0)), None,
                                    beat.item or "", c) is None]
        if cues:
            able.append((slot, i, cues))
    rng.shuffle(able)
    for slot, i, cues in able[:round(share * len(keys))]:
        slots[slot][i] = slots[slot][i].model_copy(update={"voicing": "implicit", "cue": rng.choice(cues)})


IMPLICIT_REPLY = ("Happy to help with that. Tell me a little more about when and where, and I'll suggest a few "
                  "places to start with {topic}.")
_ASKS = ("{When}, can you help me find {cue}?", "Could you help me find {cue}?", "I'm after {cue}. Where would you start?",
         "{When}, I'm hoping to find {cue}. Any ideas?")  # the time first: a cue is a long noun phrase
_SINCE = ("Since I {event}, I'm after {cue}. Where would you start?", "Ever since I {event}, I'm after {cue}. Any ideas?",
          "I {event}, and now I'm after {cue}. Can you help me find it?")


def implicit_wording(beat: Beat, rng) -> str:
    """Code's words of an implicit beat: a request built on its cue (after its event, for a change), which shows
    the stance without naming the item or saying a stance word."""
    frames = list(_SINCE if beat.kind == "preference_update" and beat.event else _ASKS)
    rng.shuffle(frames)
    when = rng.choice(load_situations().when)
    worded = [f.format(cue=beat.cue, event=beat.told, When=when[0].upper() + when[1:]) for f in frames]
    # the first that passes (a frame's own words may be the item's: "help" in "self-help audiobooks")
    return next((w for w in worded if implicit_problem(w, None, beat.item or "", beat.cue or "") is None), worded[0])


def _initial_beat(p: PreferenceVersion) -> Beat:
    return Beat(kind="initial_preference", topic=p.topic, item=p.item, stance=p.stance, pref_versions=[p.key])


def _update_beat(update: Event, life: Event, versions: dict[str, PreferenceVersion], timeline: Timeline) -> Beat:
    new = versions[update.pref_refs[-1]]
    old = versions[update.pref_refs[0]] if len(update.pref_refs) > 1 else None
    return Beat(
        kind="preference_update", topic=new.topic, item=new.item, stance=new.stance,
        previous_stance=old.stance if old else None, reason=new.reason, event=life.summary,
        pref_versions=[new.key], event_ids=[update.event_id, life.event_id],
    )


# -- checks and code-written fallbacks ------------------------------------------------------------------
_STALE = re.compile(r"\bused to (like|love|enjoy|hate|dislike)\b", re.IGNORECASE)


def beat_problem(beat: Beat, user: str, assistant: str, *, unvoiced: list[str], max_tokens: int, count) -> str | None:
    """Why a drafted exchange does not voice its beat faithfully, or None when it does."""
    for role, text in (("user", user), ("assistant", assistant)):
        if not text.strip():
            return f"empty {role} turn"
        if count(text) > max_tokens:
            return f"{role} turn longer than {max_tokens} tokens"
    if beat.implicit:
        return implicit_problem(user, assistant, beat.item or "", beat.cue or "") or _leak(assistant, unvoiced)
    if beat.item and beat.kind != "life_event" and not mentions(user, beat.item):
        return f"user turn does not mention {beat.item!r}"
    if beat.kind == "preference_update" and _STALE.search(user):
        return "user turn restates the old preference"
    if beat.item and beat.stance and beat.kind != "life_event" and (problem := stance_problem(user, beat.item, beat.stance)):
        return problem
    return _leak(assistant, unvoiced)


def _leak(assistant: str, unvoiced: list[str]) -> str | None:
    leaked = [i for i in unvoiced if mentions(assistant, i)]
    return f"assistant mentions {leaked[0]!r}, which the user has not voiced" if leaked else None


def fallback_exchange(beat: Beat, topic_label: str, rng=None) -> tuple[str, str]:
    """A plain, code-written exchange that voices the beat's fact (used when the model keeps failing); an implicit
    beat's is a request built on its cue (``rng`` picks the wording; seeded by the beat when None)."""
    if beat.implicit:
        rng = rng or derive_rng(0, beat.cue, *beat.pref_versions)
        return implicit_wording(beat, rng), IMPLICIT_REPLY.format(topic=topic_label)
    plain = f"I {'really enjoy' if beat.stance == 'like' else 'really dislike'} {beat.item}."
    if beat.kind == "initial_preference":
        tries = [plain]
    elif beat.kind == "preference_update":
        why = (beat.reason or f"I {beat.told}").rstrip(".")
        now = "I've come to enjoy" if beat.stance == "like" else "I no longer want"
        tries = [f"Something changed for me: {why}. Since then, {now} {beat.item}.",
                 f"Something changed for me. Since then, {now} {beat.item}.", plain]
    elif beat.kind == "routine":
        tries = [f"By the way, I {beat.told}.", f"By the way, I {beat.told}. {plain}", plain]
    else:
        tries = [f"Some news from my life: I {beat.told}."]
    # the first wording that passes the stance check (the plain statement always does)
    user = next((t for t in tries if not beat.item or not beat.stance or stance_problem(t, beat.item, beat.stance) is None),
                tries[-1])
    about = f" about {beat.item}" if beat.item else ""
    assistant = f"Thank you for telling me{about}. I'll keep that in mind when we talk about {topic_label}."
    return user, assistant
