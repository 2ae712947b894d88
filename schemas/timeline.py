"""The causal timeline: life events, their edges, and versioned preferences, validated on construction."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Literal

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.ids import version_key

Stance = Literal["like", "dislike"]
EventKind = Literal["life_event", "preference_update", "routine"]
Relation = Literal["causes", "supersedes"]


class TimelineError(Exception):
    """A timeline breaks one of its invariants; the message names the offending ids.

    Not a ValueError on purpose: pydantic re-raises it as is instead of wrapping it.
    """


class Event(BaseModel):
    """Something that happens to a persona at a simulated time."""

    model_config = ConfigDict(extra="forbid")

    event_id: str
    persona_id: str
    time: datetime
    period: str
    kind: EventKind
    category: str | None = Field(default=None, description="life-event category (health, career, ...)")
    topic: str | None = Field(default=None, description="None for cross-topic life events")
    summary: str
    narrative: str | None = None
    pref_refs: list[str] = Field(default_factory=list, description="preference versions it touches")
    cause_event_id: str | None = Field(default=None, description="preference update: the life event whose effect it is")
    facet: str | None = Field(default=None, description="preference update: the item's facet the effect pushed")
    direction: Literal["+", "-"] | None = Field(default=None, description="+ toward like, - toward dislike")
    scale: Literal["major", "minor"] | None = Field(default=None, description="life event: a change of life or an experience")


class EventEdge(BaseModel):
    """A directed causal or succession link between two events."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    parent_event_id: str
    child_event_id: str
    relation: Relation


class PreferenceVersion(BaseModel):
    """One version of one preference; versions of a preference alternate stance and never overlap."""

    model_config = ConfigDict(extra="forbid")

    pref_id: str
    version: int = Field(ge=1)
    persona_id: str
    topic: str
    item: str
    stance: Stance
    valid_from: datetime
    valid_to: datetime | None = None
    caused_by_event_id: str | None = None
    reason: str | None = None
    stereotypical: bool = False

    @property
    def key(self) -> str:
        return version_key(self.pref_id, self.version)

    def valid_at(self, time: datetime) -> bool:
        """True when this version holds at ``time`` (half-open interval)."""
        return self.valid_from <= time and (self.valid_to is None or time < self.valid_to)


class Timeline(BaseModel):
    """All events, edges and preference versions of one persona; every invariant checked on construction."""

    model_config = ConfigDict(extra="forbid")

    persona_id: str
    events: list[Event]
    edges: list[EventEdge]
    preferences: list[PreferenceVersion]

    @model_validator(mode="after")
    def _validate(self) -> Timeline:
        validate_timeline(self)
        return self

    def graph(self) -> nx.DiGraph:
        """The event DAG as networkx (built on demand; the model stays plain data)."""
        g = nx.DiGraph()
        g.add_nodes_from(e.event_id for e in self.events)
        for edge in self.edges:
            g.add_edge(edge.parent_event_id, edge.child_event_id, relation=edge.relation)
        return g

    def event(self, event_id: str) -> Event:
        for e in self.events:
            if e.event_id == event_id:
                return e
        raise KeyError(event_id)

    def versions(self, pref_id: str) -> list[PreferenceVersion]:
        """Versions of one preference, oldest first."""
        return sorted((p for p in self.preferences if p.pref_id == pref_id), key=lambda p: p.version)

    def chains(self) -> dict[str, list[PreferenceVersion]]:
        """Every preference's versions, oldest first, keyed by pref_id."""
        out: dict[str, list[PreferenceVersion]] = defaultdict(list)
        for p in sorted(self.preferences, key=lambda p: (p.pref_id, p.version)):
            out[p.pref_id].append(p)
        return dict(out)

    def as_of(self, pref_id: str, time: datetime) -> PreferenceVersion | None:
        """The version of ``pref_id`` valid at ``time``, or None when the preference did not exist yet."""
        for p in self.versions(pref_id):
            if p.valid_at(time):
                return p
        return None

    def root_causes(self, event_id: str) -> list[Event]:
        """The life events upstream of ``event_id``, oldest first: the answer to "why did this change"."""
        g = self.graph()
        ups = [self.event(e) for e in nx.ancestors(g, event_id)]
        return sorted((e for e in ups if e.kind == "life_event"), key=lambda e: (e.time, e.event_id))


def validate_timeline(t: Timeline) -> None:
    """Raise :class:`TimelineError` naming the first broken invariant."""
    events = _unique_events(t)
    _check_edges(t, events)
    _check_preferences(t, events)
    _check_effects(t, events)


def _unique_events(t: Timeline) -> dict[str, Event]:
    events: dict[str, Event] = {}
    for e in t.events:
        if e.event_id in events:
            raise TimelineError(f"duplicate event id {e.event_id}")
        if e.persona_id != t.persona_id:
            raise TimelineError(f"event {e.event_id} belongs to {e.persona_id}, not {t.persona_id}")
        events[e.event_id] = e
    return events


def _check_edges(t: Timeline, events: dict[str, Event]) -> None:
    g = nx.DiGraph()
    g.add_nodes_from(events)
    for edge in t.edges:
        for end in (edge.parent_event_id, edge.child_event_id):
            if end not in events:
                raise TimelineError(f"edge {edge.parent_event_id} -> {edge.child_event_id}: dangling event id {end}")
        g.add_edge(edge.parent_event_id, edge.child_event_id)
    if not nx.is_directed_acyclic_graph(g):
        cycle = [u for u, _ in nx.find_cycle(g)]
        raise TimelineError(f"event graph has a cycle: {' -> '.join(cycle + cycle[:1])}")
    for edge in t.edges:
        parent, child = events[edge.parent_event_id], events[edge.child_event_id]
        if not parent.time < child.time:
            raise TimelineError(
                f"edge {parent.event_id} -> {child.event_id}: parent at {parent.time.isoformat()} "
                f"is not strictly earlier than child at {child.time.isoformat()}"
            )


def _check_preferences(t: Timeline, events: dict[str, Event]) -> None:
    chains: dict[str, list[PreferenceVersion]] = defaultdict(list)
    for p in t.preferences:
        if p.persona_id != t.persona_id:
            raise TimelineError(f"preference {p.key} belongs to {p.persona_id}, not {t.persona_id}")
        chains[p.pref_id].append(p)
    for pref, versions in chains.items():
        versions.sort(key=lambda p: p.version)
        if [p.version for p in versions] != list(range(1, len(versions) + 1)):
            raise TimelineError(f"preference {pref}: versions {[p.version for p in versions]} are not 1..n")
        for p in versions:
            _check_cause(p, events)
        for prev, nxt in zip(versions, versions[1:], strict=False):
            _check_succession(prev, nxt)
        if versions[-1].valid_to is not None and versions[-1].valid_to <= versions[-1].valid_from:
            raise TimelineError(f"preference {versions[-1].key}: valid_to is not after valid_from")


def _check_cause(p: PreferenceVersion, events: dict[str, Event]) -> None:
    if p.caused_by_event_id is None:
        if p.version > 1:
            raise TimelineError(f"preference {p.key}: change has no causing event")
        return
    cause = events.get(p.caused_by_event_id)
    if cause is None:
        raise TimelineError(f"preference {p.key}: dangling cause {p.caused_by_event_id}")
    if not cause.time < p.valid_from:
        raise TimelineError(
            f"preference {p.key}: cause {cause.event_id} at {cause.time.isoformat()} "
            f"is not earlier than valid_from {p.valid_from.isoformat()}"
        )


def _check_succession(prev: PreferenceVersion, nxt: PreferenceVersion) -> None:
    if (prev.topic, prev.item) != (nxt.topic, nxt.item):
        raise TimelineError(f"preference {prev.pref_id}: versions disagree on topic/item")
    if prev.valid_to is None or prev.valid_to > nxt.valid_from:
        raise TimelineError(f"preference {prev.pref_id}: versions {prev.version} and {nxt.version} overlap")
    if prev.valid_to <= prev.valid_from:
        raise TimelineError(f"preference {prev.key}: valid_to is not after valid_from")
    if prev.stance == nxt.stance:
        raise TimelineError(
            f"preference {prev.pref_id}: versions {prev.version} and {nxt.version} "
            f"do not alternate stance (both {prev.stance})"
        )


def _check_effects(t: Timeline, events: dict[str, Event]) -> None:
    """A preference update that names its effect: caused by that life event, new stance in its direction."""
    causes = {(e.parent_event_id, e.child_event_id) for e in t.edges if e.relation == "causes"}
    versions = {p.key: p for p in t.preferences}
    for e in t.events:
        if e.kind != "preference_update" or e.cause_event_id is None:
            continue
        cause = events.get(e.cause_event_id)
        if cause is None or cause.kind != "life_event" or (cause.event_id, e.event_id) not in causes:
            raise TimelineError(f"update {e.event_id}: effect of {e.cause_event_id}, not a life event causing it")
        if e.facet is None or e.direction is None:
            raise TimelineError(f"update {e.event_id}: effect of {e.cause_event_id} without facet and direction")
        new = versions.get(e.pref_refs[-1]) if e.pref_refs else None
        if new is not None and new.stance != ("like" if e.direction == "+" else "dislike"):
            raise TimelineError(f"update {e.event_id}: {e.facet} {e.direction} but the new stance is {new.stance}")
