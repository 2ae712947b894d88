"""`personagen review`: a static HTML page per persona (profile, timeline, preference chains, sessions, queries)
and an index, for a person who reviews a dataset version. No server, no script: the pages open from disk, every
link points inside them, and every text from the dataset is escaped."""

from __future__ import annotations

import base64
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from pipeline.dataset import Dataset
from pipeline.reporting import plots
from schemas.conversation import SessionWithTurns
from schemas.ids import version_key
from schemas.query import Query
from schemas.timeline import Event, PreferenceVersion

TEMPLATES = Path(__file__).with_name("templates")


@dataclass
class PersonaView:
    """What one persona's page shows, gathered from the tables."""

    persona: object
    events: list[Event]
    chains: dict[str, list[PreferenceVersion]]
    sessions: list[SessionWithTurns]
    queries: list[Query]
    placements: dict[str, list] = field(default_factory=dict)
    budgets: dict[str, int] = field(default_factory=dict)

    @property
    def page(self) -> str:
        return page_name(self.persona.persona_id)

    def counts(self) -> dict[str, int]:
        turns = [t for s in self.sessions for t in s.turns]
        return {"events": len(self.events), "versions": sum(len(c) for c in self.chains.values()),
                "sessions": len(self.sessions), "turns": len(turns),
                "voiced": sum(bool(t.pref_versions) for t in turns), "fallback": sum(t.fallback for t in turns),
                "queries": len(self.queries)}


def page_name(persona_id: str) -> str:
    return f"persona-{persona_id}.html"


def turn_anchor(session_id: str, turn_index: int) -> str:
    return f"t-{session_id}-{turn_index}"


def persona_views(ds: Dataset, persona_id: str | None = None) -> list[PersonaView]:
    """One view per persona of ``ds`` (only ``persona_id``'s when given; an unknown id is a ValueError)."""
    personas = [p for p in ds.personas if persona_id in (None, p.persona_id)]
    if not personas:
        raise ValueError(f"no persona {persona_id} in {ds.path}")
    by = defaultdict(lambda: defaultdict(list))
    for e in ds.events:
        by[e.persona_id]["events"].append(e)
    for v in ds.preferences:
        by[v.persona_id]["versions"].append(v)
    for q in ds.queries:
        by[q.persona_id]["queries"].append(q)
    sessions = ds._lookup("session")
    for s in sessions.values():
        if s.session.persona_id is not None:
            by[s.session.persona_id]["sessions"].append(s)
    placements = defaultdict(list)
    for p in ds.placements:
        placements[p.query_id].append(p)
    budgets = {c.context_id: c.budget_tokens for c in ds.contexts}
    views = []
    for persona in personas:
        rows = by[persona.persona_id]
        chains: dict[str, list[PreferenceVersion]] = defaultdict(list)
        for v in sorted(rows["versions"], key=lambda v: (v.topic, v.item, v.version)):
            chains[v.pref_id].append(v)
        views.append(PersonaView(
            persona=persona, events=sorted(rows["events"], key=lambda e: (e.time, e.event_id)), chains=dict(chains),
            sessions=sorted(rows["sessions"], key=lambda s: (s.session.time, s.session.session_id)),
            queries=sorted(rows["queries"], key=lambda q: (q.as_of, q.query_id)),
            placements={q.query_id: placements[q.query_id] for q in rows["queries"]}, budgets=budgets))
    return views


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(turn_anchor=turn_anchor, version_key=version_key, page_name=page_name)
    env.filters["day"] = lambda t: t.strftime("%Y-%m-%d") if t is not None else "-"
    return env


def render_review(ds: Dataset, persona_id: str | None = None) -> dict[str, bytes]:
    """The pages of the review folder: ``index.html`` and one page per persona, as bytes by file name."""
    views = persona_views(ds, persona_id)
    edges = defaultdict(list)
    for edge in ds.event_edges:
        edges[edge.child_event_id].append(edge)
    env = _environment()
    title = f"{ds.manifest.dataset} {ds.manifest.version}"
    types = Counter(q.type for v in views for q in v.queries)
    files = {"index.html": env.get_template("review_index.html.j2").render(
        title=title, views=views, types=sorted(types.items()), manifest=ds.manifest).encode()}
    for view in views:
        versions = {version_key(v.pref_id, v.version): v for chain in view.chains.values() for v in chain}
        events = {e.event_id: e for e in view.events}
        files[view.page] = env.get_template("review_persona.html.j2").render(
            title=title, view=view, versions=versions, events=events, changes=_changes(view.events, versions),
            graph=_graph(view, edges)).encode()
    return files


def _changes(events: list[Event], versions: dict[str, PreferenceVersion]) -> dict[str, list[tuple[str, str, str]]]:
    """Per event, what it did to each preference it touches: (the newest version's key, the item, "like" or
    "like -> dislike"), one entry per item however many of its versions the event names."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for event in events:
        touched: dict[str, list[PreferenceVersion]] = defaultdict(list)
        for key in event.pref_refs:
            if key in versions:
                touched[versions[key].pref_id].append(versions[key])
        out[event.event_id] = [(version_key(chain[-1].pref_id, chain[-1].version), chain[-1].item,
                                " -> ".join(dict.fromkeys(v.stance for v in sorted(chain, key=lambda v: v.version))))
                               for chain in touched.values()]
    return out


def _graph(view: PersonaView, edges: dict[str, list]) -> str:
    """The persona's timeline drawn as a DAG (events in time, cause -> effect edges, preference lanes), as a
    PNG data URI: the page stays one file."""
    mine = [edge for e in view.events for edge in edges.get(e.event_id, [])]
    versions = [v for chain in view.chains.values() for v in chain]
    title = f"Timeline of {view.persona.name}: {len(view.events)} events, {len(mine)} edges, {len(versions)} versions"
    return "data:image/png;base64," + base64.b64encode(plots.timeline_graph(title, view.events, mine,
                                                                             versions)).decode("ascii")
