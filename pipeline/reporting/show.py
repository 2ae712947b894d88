"""Render one persona's timeline as a readable, dated tree."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from rich.markup import escape
from rich.tree import Tree

from pipeline.catalog import load_catalog, load_taxonomy
from pipeline.dataset import read_table
from pipeline.errors import UserError
from pipeline.life_state import initial_state
from pipeline.s2_timeline.calendar import region_of
from schemas.persona import Persona
from schemas.timeline import Event, Timeline


def load_persona_timeline(directory: Path, persona_id: str) -> tuple[Persona, Timeline]:
    """Read the plan tables and rebuild (and so re-validate) one persona's timeline; a damaged or missing
    table is a one-line UserError naming it."""
    try:
        return _load(directory, persona_id)
    except (UserError, FileNotFoundError):
        raise
    except (OSError, ValueError, pa.ArrowException) as exc:  # a truncated or foreign Parquet file, bad rows
        text = str(exc).strip().splitlines()
        raise UserError(f"{directory}: a plan table is damaged ({type(exc).__name__}: {text[0] if text else ''}); "
                        "rerun `personagen plan`") from None


def _load(directory: Path, persona_id: str) -> tuple[Persona, Timeline]:
    personas = [p for p in read_table(directory, "personas") if p.persona_id == persona_id]
    if not personas:
        raise UserError(f"{directory}: no persona {persona_id!r}")
    events = [e for e in read_table(directory, "events") if e.persona_id == persona_id]
    ids = {e.event_id for e in events}
    edges = [e for e in read_table(directory, "event_edges") if e.child_event_id in ids]
    prefs = [p for p in read_table(directory, "preferences") if p.persona_id == persona_id]
    return personas[0], Timeline(persona_id=persona_id, events=events, edges=edges, preferences=prefs)


def _when(e: Event) -> str:
    return e.time.strftime("%Y-%m-%d %H:%M")


def timeline_tree(persona: Persona, timeline: Timeline) -> Tree:
    """The persona's life state, initial preferences, then each period's events in time order with their scale,
    the state they changed, their effects and causes."""
    root = Tree(f"[bold]{escape(persona.name)}[/] ({persona.persona_id}) — {escape(persona.seed_text)}")
    taxonomy = load_taxonomy()
    region = region_of(persona.location, taxonomy)
    state = initial_state(persona.attributes)
    root.add(f"[bold]life state[/]: {escape(', '.join(f'{k} {v}' for k, v in state.items()))}; lives in "
             f"{escape(persona.location or 'an unnamed place')} (winter: {region.winter}, hemisphere {region.hemisphere})")
    specs = taxonomy.event_specs()
    initial = root.add("[bold]initial preferences[/]")
    for p in timeline.preferences:
        if p.version == 1 and p.caused_by_event_id is None:
            tag = " [dim](stereotypical)[/]" if p.stereotypical else ""
            initial.add(f"{p.topic}: {p.stance}s {escape(p.item)}{tag}")
    by_id = {e.event_id: e for e in timeline.events}
    parents: dict[str, list[str]] = {}
    children: dict[str, list[str]] = {}
    for edge in timeline.edges:
        parents.setdefault(edge.child_event_id, []).append(edge.parent_event_id)
        if edge.relation == "causes":
            children.setdefault(edge.parent_event_id, []).append(edge.child_event_id)
    versions = {p.key: p for p in timeline.preferences}
    facet_words = load_catalog().facets
    periods: dict[str, Tree] = {}
    for e in timeline.events:
        if e.kind == "preference_update":
            continue
        branch = periods.get(e.period) or periods.setdefault(e.period, root.add(f"[bold]{e.period}[/]"))
        if e.kind == "routine":
            branch.add(f"{_when(e)} [dim]routine · {e.topic}[/]: {escape(e.summary)}")
            continue
        scale = f" [magenta]{e.scale}[/]" if e.scale else ""
        node = branch.add(f"{_when(e)} [cyan]\\[{e.category}][/]{scale} {escape(e.summary)}")
        sets = specs[e.summary][1].sets if e.summary in specs else {}
        moved = {k: v for k, v in sets.items() if state.get(k) != v}
        if moved:
            node.add("[dim]life state: " + escape(", ".join(f"{k} {state.get(k)} -> {v}" for k, v in moved.items())) + "[/]")
            state.update(moved)
        if e.narrative:
            node.add(f"[dim]narrative: {escape(e.narrative)}[/]")
        for pid in parents.get(e.event_id, []):
            node.add(f"[dim]caused by {_when(by_id[pid])}: {escape(by_id[pid].summary)}[/]")
        for cid in sorted(children.get(e.event_id, []), key=lambda c: by_id[c].time):
            child = by_id[cid]
            if child.kind == "life_event":
                node.add(f"[dim]leads to {_when(child)}: {escape(child.summary)}[/]")
                continue
            new = versions[child.pref_refs[-1]]
            old = versions.get(child.pref_refs[0]) if len(child.pref_refs) > 1 else None
            change = f"{old.stance} → {new.stance}" if old else f"new: {new.stance}"
            line = node.add(f"{new.topic}: {escape(new.item)} {change} (v{new.version}, from {new.valid_from:%Y-%m-%d})")
            if child.facet:
                toward = "toward like" if child.direction == "+" else "toward dislike"
                words = facet_words.get(new.topic, {}).get(child.facet)
                plain = f" ({escape(words)})" if words else ""
                line.add(f"[dim]why: {escape(e.summary)} pushes {new.topic} facet '{escape(child.facet)}'{plain} "
                         f"{toward}[/]")
            if new.reason:
                line.add(f"[dim]reason: {escape(new.reason)}[/]")
    return root


def sessions_tree(directory: Path, persona_id: str, session_id: str | None = None) -> Tree | None:
    """A dataset version's sessions of the persona (date, topic, kind, turns, where each turn came from), or one
    session's turns in full (``session_id``); None where the folder has no sessions (a plan folder)."""
    if not (directory / "sessions.parquet").is_file():
        if session_id:
            raise UserError(f"{directory}: no sessions.parquet (sessions are in a dataset version, not a plan folder)")
        return None
    sessions = [s for s in read_table(directory, "sessions") if s.persona_id == persona_id]
    if session_id is not None:
        found = [s for s in sessions if s.session_id == session_id]
        if not found:
            raise UserError(f"{directory / 'sessions.parquet'}: persona {persona_id!r} has no session {session_id!r}")
        s = found[0]
        root = Tree(f"[bold]session {escape(s.session_id)}[/]: {escape(s.topic)}, {s.kind}, "
                    f"{s.time:%Y-%m-%d %H:%M}" if s.time else f"[bold]session {escape(s.session_id)}[/]")
        for t in sorted((t for t in read_table(directory, "turns") if t.session_id == session_id),
                        key=lambda t: t.turn_index):
            tags = [f"voices {', '.join(t.pref_versions)}"] if t.pref_versions else []
            tags += ["code's wording"] if t.fallback else []
            tag = f" [dim]({escape('; '.join(tags))})[/]" if tags else ""
            root.add(f"[bold]{t.role}[/]{tag}: {escape(t.content)}")
        return root
    root = Tree(f"[bold]sessions[/] ({len(sessions)}; `--session ID` prints one's turns)")
    for s in sorted(sessions, key=lambda s: (s.time is None, s.time, s.session_id)):
        when = f"{s.time:%Y-%m-%d}" if s.time else "-"
        root.add(f"{when} {escape(s.session_id)} [dim]{escape(s.topic)} · {s.kind} · {s.n_turns} turns[/]")
    return root
