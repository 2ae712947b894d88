"""narrate_events: a narrative per life event and a reason per preference change, consistent with the DAG."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from pydantic import BaseModel

from pipeline.catalog import load_catalog, load_taxonomy
from pipeline.checks.quality import Origin, count, text_problem
from pipeline.checks.verdicts import heard
from pipeline.life_state import gist, names
from pipeline.llm import LLM
from pipeline.specs import NARRATION
from pipeline.words import mentions
from schemas.config import RunConfig
from schemas.drafts import EffectView, NarrationContext, narration_draft
from schemas.persona import Persona
from schemas.timeline import Event, PreferenceVersion, Timeline


def effects_of(timeline: Timeline) -> dict[str, list[PreferenceVersion]]:
    """life event id -> the preference versions it caused, in a stable order."""
    versions = {p.key: p for p in timeline.preferences}
    updates = {e.event_id: e for e in timeline.events if e.kind == "preference_update"}
    out: dict[str, list[PreferenceVersion]] = defaultdict(list)
    for edge in timeline.edges:
        if edge.relation == "causes" and edge.child_event_id in updates:
            out[edge.parent_event_id].append(versions[updates[edge.child_event_id].pref_refs[-1]])
    return {k: sorted(v, key=lambda p: (p.topic, p.item)) for k, v in out.items()}


def narration_context(persona: Persona, timeline: Timeline, event: Event, effects: list[PreferenceVersion]) -> NarrationContext:
    """What the narrator must stay consistent with: the event, its causes and its effects."""
    parents = [timeline.event(e.parent_event_id) for e in timeline.edges if e.child_event_id == event.event_id]
    return NarrationContext(
        name=persona.name, profile=persona.profile, date=f"{event.time:%Y-%m-%d}", category=event.category or "life",
        summary=event.summary, causes=[p.summary for p in parents if p.kind == "life_event"],
        effects=[EffectView(topic=v.topic, item=v.item, new_stance=v.stance, old_stance=_previous_stance(timeline, v),
                            link=_link(timeline, v)) for v in effects],
    )


def _link(timeline: Timeline, version: PreferenceVersion) -> str | None:
    """ "less sugary food": the facet of the effect behind a change, in plain words."""
    update = next((e for e in timeline.events if e.event_id == version.caused_by_event_id), None)
    if update is None or update.facet is None:
        return None
    words = load_catalog().facets.get(version.topic, {}).get(update.facet, update.facet)
    head = words.split()[0]  # "trips into nature": fewer; "cheap decor", "time outdoors": less
    fewer = head.endswith("s") and not head.endswith(("ss", "us", "is"))
    return f"{'more' if update.direction == '+' else 'fewer' if fewer else 'less'} {words}"


def reason_states_link(reason: str, event: Event, item: str) -> bool:
    """A model-written reason names the event's gist and the changed item (else code's reason stays)."""
    found = load_taxonomy().event_specs().get(event.summary)
    gist_words = gist(found[1]) if found else event.summary
    return mentions(reason, item) and (names(reason, gist_words) or names(reason, event.summary))


def _previous_stance(timeline: Timeline, version: PreferenceVersion) -> str | None:
    return timeline.versions(version.pref_id)[version.version - 2].stance if version.version > 1 else None


def narrate_events(persona: Persona, timeline: Timeline, *, llm: LLM, config: RunConfig,
                   origin: dict[str, Origin] | None = None) -> Timeline:
    """One call per life event covering all its effects; a narrative that is not readable is asked again,
    then code writes it (``origin`` counts which); events the model fails keep code-written text."""
    origin = {} if origin is None else origin
    effects = effects_of(timeline)
    allowed = [persona.name, persona.location or "", persona.occupation or "", *(p.item for p in timeline.preferences),
               *(e.summary for e in timeline.events if e.kind == "life_event")]  # code's words: known, not scored
    drafts: dict[str, BaseModel] = {}
    by_count: dict[int, list[Event]] = defaultdict(list)
    for event in timeline.events:
        if event.kind == "life_event":
            by_count[len(effects.get(event.event_id, []))].append(event)
    for n_effects, events in sorted(by_count.items()):
        spec = replace(NARRATION, output=narration_draft(n_effects))
        contexts = [narration_context(persona, timeline, e, effects.get(e.event_id, [])) for e in events]
        readable = lambda d: heard(d, text_problem(d.narrative, "narrative", allowed=allowed)) is None  # noqa: E731
        for event, (draft, sample) in zip(events, _drafts(llm, spec, contexts, config.text.attempts, readable),
                                          strict=True):
            count(origin, "narrative", **{"code" if draft is None else "reasked" if sample else "model": 1})
            if draft is not None:
                drafts[event.event_id] = draft
    return apply_narrations(timeline, drafts, effects, allowed, origin)


def _drafts(llm: LLM, spec, contexts: list[BaseModel], attempts: int, ok) -> list[tuple[BaseModel | None, int]]:
    """(draft, the sample that gave it) for every context; a failed call or a draft ``ok`` refuses is asked
    again with the next sample index, then gives (None, -1)."""
    out: list[tuple[BaseModel | None, int]] = [(None, -1)] * len(contexts)
    for sample in range(attempts):
        pending = [i for i, (draft, _) in enumerate(out) if draft is None]
        if not pending:
            break
        for i, draft in zip(pending, llm.generate_each(spec, [contexts[i] for i in pending], sample_index=sample),
                            strict=True):
            if draft is not None and ok(draft):
                out[i] = (draft, sample)
    return out


def apply_narrations(timeline: Timeline, drafts: dict[str, BaseModel], effects: dict[str, list[PreferenceVersion]],
                     allowed: list[str] | None = None, origin: dict[str, Origin] | None = None) -> Timeline:
    """A new timeline with narratives and reasons from the drafts; facts (ids, times, stances) untouched.

    A drafted reason replaces code's only where it names the event's gist and the item and is readable."""
    reasons: dict[str, str] = {}
    for event_id, draft in drafts.items():
        event = timeline.event(event_id)
        for version, reason in zip(effects.get(event_id, []), getattr(draft, "reasons", []), strict=False):
            reason = " ".join(reason.split())
            if reason_states_link(reason, event, version.item) and text_problem(
                    reason, "reason", allowed=[*(allowed or []), version.item]) is None:
                reasons[version.key] = reason
    events = []
    for e in timeline.events:
        if e.event_id in drafts:
            e = e.model_copy(update={"narrative": " ".join(drafts[e.event_id].narrative.split())})
        elif e.narrative is None and e.kind != "preference_update":
            e = e.model_copy(update={"narrative": f"I {e.summary}."})
        events.append(e)
    prefs = [p.model_copy(update={"reason": reasons[p.key]}) if p.key in reasons else p for p in timeline.preferences]
    if origin is not None:
        changed = sum(1 for p in timeline.preferences if p.caused_by_event_id)
        count(origin, "reason", model=len(reasons), code=changed - len(reasons))
    return Timeline(persona_id=timeline.persona_id, events=events, edges=timeline.edges, preferences=prefs)
