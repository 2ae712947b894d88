"""Whole-dataset checks run on a staged version before it is published: keys, references, token
sums, causal order inside contexts, budgets, and placements recomputed from the stored rows."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from pydantic import BaseModel

from pipeline.catalog import load_catalog, load_taxonomy
from pipeline.life_state import replay
from pipeline.s2_timeline.coherence import check_timeline
from pipeline.s5_assembly.budget import layout, profile_text
from pipeline.s5_assembly.fit import (
    fill_floor,
    fill_tokens,
    fits,
    lme_history_cap,
    lme_session_tokens_many,
    pm_ask_tokens,
    pm_history_cap,
)
from pipeline.s5_assembly.placement import place_query, turn_prefix
from pipeline.tokens import message_tokens
from schemas.context import Context, Placement
from schemas.conversation import Session, Turn
from schemas.manifest import ValidationReport
from schemas.query import Query
from schemas.timeline import Timeline, TimelineError

MAX_MESSAGES = 50
TOKEN_SAMPLE = 400


class _Report:
    """Collects error lines (keeping the first few) and counts every check."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.n_errors = 0
        self.checks: list[str] = []

    def check(self, name: str) -> None:
        self.checks.append(name)

    def error(self, message: str) -> None:
        self.n_errors += 1
        if len(self.errors) < MAX_MESSAGES:
            self.errors.append(message)

    def done(self, counts: dict[str, int]) -> ValidationReport:
        return ValidationReport(ok=self.n_errors == 0, n_errors=self.n_errors, errors=self.errors,
                                checks=self.checks, counts=counts)


def validate_tables(
    tables: dict[str, list[BaseModel]], *, period_order: list[str], tolerance: float = 0.02,
    short_periods: frozenset[str] = frozenset(),
) -> ValidationReport:
    """Every check over the nine tables; the report says ``ok`` only when no check failed."""
    r = _Report()
    _unique_keys(tables, r)
    _references(tables, r)
    timelines = _timelines(tables, r)
    _life_states(tables, r)
    _whole_lives(tables, timelines, period_order, short_periods, r)
    _effects(tables, r)
    turns_by = _turns_by_session(tables["turns"])
    sessions = {s.session_id: s for s in tables["sessions"]}
    _session_sums(sessions, turns_by, r)
    _token_rule(tables["turns"], r)
    _queries(tables["queries"], sessions, turns_by, r)
    _contexts(tables, sessions, period_order, r)
    _harness_fit(tables, sessions, turns_by, tolerance, r)
    _placements(tables, sessions, turns_by, r)
    return r.done({name: len(rows) for name, rows in tables.items()})


KEYS = {
    "personas": ("persona_id",),
    "preferences": ("pref_id", "version"),
    "events": ("event_id",),
    "event_edges": ("parent_event_id", "child_event_id"),
    "sessions": ("session_id",),
    "turns": ("session_id", "turn_index"),
    "queries": ("query_id",),
    "contexts": ("context_id",),
    "placements": ("context_id", "query_id"),
}


def _unique_keys(tables: dict[str, list[BaseModel]], r: _Report) -> None:
    r.check("unique keys")
    for name, fields in KEYS.items():
        seen: set[tuple] = set()
        for row in tables[name]:
            key = tuple(getattr(row, f) for f in fields)
            if key in seen:
                r.error(f"{name}.{'/'.join(fields)}: duplicate key {key}")
            seen.add(key)


def _missing(r: _Report, where: str, ids: Iterable[str | None], known: set[str]) -> None:
    for value in ids:
        if value is not None and value not in known:
            r.error(f"{where}: unknown id {value}")


def _references(t: dict[str, list[BaseModel]], r: _Report) -> None:
    r.check("referential integrity")
    personas = {p.persona_id for p in t["personas"]}
    events = {e.event_id for e in t["events"]}
    versions = {p.key for p in t["preferences"]}
    sessions = {s.session_id for s in t["sessions"]}
    _missing(r, "preferences.persona_id", (p.persona_id for p in t["preferences"]), personas)
    _missing(r, "preferences.caused_by_event_id", (p.caused_by_event_id for p in t["preferences"]), events)
    _missing(r, "events.persona_id", (e.persona_id for e in t["events"]), personas)
    _missing(r, "event_edges.parent_event_id", (e.parent_event_id for e in t["event_edges"]), events)
    _missing(r, "event_edges.child_event_id", (e.child_event_id for e in t["event_edges"]), events)
    _missing(r, "sessions.persona_id", (s.persona_id for s in t["sessions"]), personas)
    _missing(r, "turns.session_id", (x.session_id for x in t["turns"]), sessions)
    _missing(r, "turns.event_ids", (e for x in t["turns"] for e in x.event_ids), events)
    _missing(r, "turns.pref_versions", (v for x in t["turns"] for v in x.pref_versions), versions)
    _missing(r, "queries.persona_id", (q.persona_id for q in t["queries"]), personas)
    _missing(r, "contexts.persona_id", (c.persona_id for c in t["contexts"]), personas)
    _missing(r, "contexts.session_ids", (s for c in t["contexts"] for s in c.session_ids), sessions)
    _missing(r, "placements.context_id", (p.context_id for p in t["placements"]), {c.context_id for c in t["contexts"]})
    _missing(r, "placements.query_id", (p.query_id for p in t["placements"]), {q.query_id for q in t["queries"]})


def _timelines(t: dict[str, list[BaseModel]], r: _Report) -> dict[str, Timeline]:
    """Rebuild each persona's Timeline, which checks acyclicity, cause-before-effect and version chains."""
    r.check("timelines: causal DAG and preference version invariants")
    parts: dict[str, dict[str, list]] = defaultdict(lambda: {"events": [], "edges": [], "preferences": []})
    for e in t["events"]:
        parts[e.persona_id]["events"].append(e)
    for p in t["preferences"]:
        parts[p.persona_id]["preferences"].append(p)
    owner = {e.event_id: e.persona_id for e in t["events"]}
    for edge in t["event_edges"]:
        if edge.child_event_id in owner:
            parts[owner[edge.child_event_id]]["edges"].append(edge)
    built = {}
    for persona_id, rows in parts.items():
        try:
            built[persona_id] = Timeline(persona_id=persona_id, **rows)
        except TimelineError as exc:
            r.error(f"events/preferences: persona {persona_id}: {exc}")
    return built


def _whole_lives(t: dict[str, list[BaseModel]], timelines: dict[str, Timeline], period_order: list[str],
                 short: frozenset[str], r: _Report) -> None:
    """Each persona's timeline holds together as one life (pipeline/s2_timeline/coherence.py): major events
    apart, days and seasons where the calendar and the city put them, the profile's state unchanged before the
    first conversation, routines that fit work, no taste turned back within days."""
    r.check("whole lives: time between major events, calendar and place, profile, work, turn-backs")
    taxonomy = load_taxonomy()
    for p in t["personas"]:
        if p.persona_id in timelines and period_order:
            for rule, message in check_timeline(p, timelines[p.persona_id], taxonomy, period_order[0], short):
                r.error(f"events: persona {p.persona_id}: {rule}: {message}")


def _life_states(t: dict[str, list[BaseModel]], r: _Report) -> None:
    """Each persona's life events, replayed in time order from the state its attributes imply, meet the
    taxonomy's preconditions (age, required and excluded states) and never repeat."""
    r.check("life events: preconditions of the life state hold, none repeats")
    taxonomy = load_taxonomy()
    lives: dict[str, list] = defaultdict(list)
    for e in t["events"]:
        if e.kind == "life_event":
            lives[e.persona_id].append(e)
    for p in t["personas"]:
        events = sorted(lives.get(p.persona_id, []), key=lambda e: (e.time, e.event_id))
        for problem in replay(p.attributes, [e.summary for e in events], taxonomy):
            r.error(f"events.summary: persona {p.persona_id}: {problem}")


def _effects(t: dict[str, list[BaseModel]], r: _Report) -> None:
    """Every preference update names its effect: a facet its item carries, the new stance in its direction."""
    r.check("preference updates: an item the cause event names, its effect's facet, stance in its direction")
    facets = load_catalog().item_facets()
    taxonomy = load_taxonomy()
    specs = taxonomy.event_specs()
    causes = {e.event_id: e.summary for e in t["events"] if e.kind == "life_event"}
    versions = {p.key: p for p in t["preferences"]}
    for e in t["events"]:
        if e.kind != "preference_update":
            continue
        new = versions.get(e.pref_refs[-1]) if e.pref_refs else None
        if e.cause_event_id is None or e.facet is None or e.direction is None:
            r.error(f"events: update {e.event_id} records no effect (event, facet, direction)")
        elif new is not None and e.facet not in facets.get((new.topic, new.item), []):
            r.error(f"events.facet: update {e.event_id}: {new.item!r} ({new.topic}) has no facet {e.facet!r}")
        elif new is not None and new.stance != ("like" if e.direction == "+" else "dislike"):
            r.error(f"events.direction: update {e.event_id}: {e.facet} {e.direction} but {new.item!r} became {new.stance}")
        elif new is not None and (spec := specs.get(causes.get(e.cause_event_id, ""))) and new.item not in spec[1].items:
            r.error(f"events.cause_event_id: update {e.event_id}: {spec[1].summary!r} does not name {new.item!r}")


def _turns_by_session(turns: list[Turn]) -> dict[str, list[Turn]]:
    out: dict[str, list[Turn]] = defaultdict(list)
    for turn in turns:
        out[turn.session_id].append(turn)
    for rows in out.values():
        rows.sort(key=lambda x: x.turn_index)
    return out


def _session_sums(sessions: dict[str, Session], turns_by: dict[str, list[Turn]], r: _Report) -> None:
    r.check("session turn counts, token sums and alternating roles")
    for sid, s in sessions.items():
        turns = turns_by.get(sid, [])
        if [x.turn_index for x in turns] != list(range(len(turns))) or s.n_turns != len(turns):
            r.error(f"sessions.n_turns: session {sid} has {len(turns)} turns numbered irregularly or not {s.n_turns}")
        if any(x.role != ("user" if x.turn_index % 2 == 0 else "assistant") for x in turns):
            r.error(f"turns.role: session {sid} does not alternate user/assistant starting with the user")
        if s.n_tokens != sum(x.n_tokens for x in turns):
            r.error(f"sessions.n_tokens: session {sid} says {s.n_tokens}, its turns sum to {sum(x.n_tokens for x in turns)}")


def _token_rule(turns: list[Turn], r: _Report) -> None:
    """Recount an evenly spread sample of turns with the shared token rule."""
    r.check("turn token counts follow the token rule (sample)")
    step = max(1, len(turns) // TOKEN_SAMPLE)
    for turn in turns[::step]:
        expected = message_tokens(turn.content)
        if turn.n_tokens != expected:
            r.error(f"turns.n_tokens: {turn.session_id}#{turn.turn_index} says {turn.n_tokens}, the rule gives {expected}")


def _turn_exists(turns_by: dict[str, list[Turn]], session_id: str, index: int) -> bool:
    return 0 <= index < len(turns_by.get(session_id, []))


def _queries(queries: list[Query], sessions: dict[str, Session], turns_by: dict[str, list[Turn]], r: _Report) -> None:
    r.check("query anchors and evidence exist in the persona's sessions")
    for q in queries:
        refs = [(e.session_id, e.turn_index, "evidence") for e in q.evidence]
        if q.anchor_session_id is not None:
            refs.append((q.anchor_session_id, q.anchor_turn_index, "anchor"))
        for sid, index, what in refs:
            session = sessions.get(sid)
            if session is None or not _turn_exists(turns_by, sid, index):
                r.error(f"queries.{what}: query {q.query_id} points at missing turn {sid}#{index}")
            elif session.persona_id != q.persona_id:
                r.error(f"queries.{what}: query {q.query_id} points at {sid}, a session of another persona")
            elif what == "evidence" and session.time > q.as_of:
                r.error(f"queries.evidence: query {q.query_id} at {q.as_of} cites {sid}, a later session")


def _contexts(t: dict[str, list[BaseModel]], sessions: dict[str, Session], period_order: list[str],
              r: _Report) -> None:
    r.check("contexts: own or filler sessions, time and topic order, token sums, budget fill")
    profiles = {p.persona_id: message_tokens(profile_text(p)) for p in t["personas"]}
    rank = {name: i for i, name in enumerate(period_order)}
    for c in t["contexts"]:
        if c.persona_id not in profiles or any(sid not in sessions for sid in c.session_ids):
            continue
        members = [sessions[sid] for sid in c.session_ids]
        _context_members(c, members, rank, r)
        lay = layout(c.session_ids, sessions, profile_tokens=profiles[c.persona_id], profile_mode=c.profile_mode,
                     session_dates=c.session_dates)
        filler = sum(s.n_tokens for s in members if s.kind == "filler")
        if (lay.n_tokens, filler) != (c.n_tokens, c.filler_tokens):
            r.error(f"contexts.n_tokens: {c.context_id} stores {c.n_tokens}/{c.filler_tokens} (total/filler), "
                    f"its sessions give {lay.n_tokens}/{filler}")


def _harness_fit(t: dict[str, list[BaseModel]], sessions: dict[str, Session], turns_by: dict[str, list[Turn]],
                 tolerance: float, r: _Report) -> None:
    """Each context within its budget as both harnesses receive it (pipeline/s5_assembly/fit.py): every row's
    history, question message and answer reserve for PersonaMem's script, the JSON history for
    LongMemEval's reader; the larger ending within the tolerance below the budget."""
    r.check("contexts fit the budget as PersonaMem's script and LongMemEval's reader send them")
    used = sorted({sid for c in t["contexts"] for sid in c.session_ids if sid in sessions}
                  | {sid for sid, s in sessions.items() if s.kind == "filler"})
    lme = dict(zip(used, lme_session_tokens_many([turns_by.get(sid, []) for sid in used]), strict=True))
    queries = {q.query_id: q for q in t["queries"]}
    asks: dict[str, int] = defaultdict(int)
    for p in t["placements"]:
        if (q := queries.get(p.query_id)) is not None:
            asks[p.context_id] = max(asks[p.context_id], pm_ask_tokens(q.question, [o.text for o in q.options]))
    smallest = min((lme[sid] for sid, s in sessions.items() if s.kind == "filler"), default=0)
    for c in t["contexts"]:
        lme_total, ask = sum(lme.get(sid, 0) for sid in c.session_ids), asks[c.context_id]
        if not fits(c.budget_tokens, c.n_tokens, lme_total, ask):
            r.error(f"contexts.n_tokens: {c.context_id} is over its budget of {c.budget_tokens} as the harnesses "
                    f"receive it: {c.n_tokens} tokens of messages (cap {pm_history_cap(c.budget_tokens, ask)} with "
                    f"its longest question), {lme_total} of LongMemEval history (cap {lme_history_cap(c.budget_tokens)})")
        elif ((fill := fill_tokens(c.budget_tokens, c.n_tokens, lme_total, ask))
              < (floor := fill_floor(c.budget_tokens, tolerance, smallest))):
            r.error(f"contexts.n_tokens: {c.context_id} fills {fill} of {c.budget_tokens} tokens, below {floor:.0f}")


def _context_members(c: Context, members: list[Session], rank: dict[str, int], r: _Report) -> None:
    if len(set(c.session_ids)) != len(c.session_ids):
        r.error(f"contexts.session_ids: {c.context_id} repeats a session")
    own = [s for s in members if s.kind == "topic"]
    for s in own:
        if s.persona_id != c.persona_id:
            r.error(f"contexts.session_ids: {c.context_id} holds {s.session_id} of persona {s.persona_id}")
    for a, b in zip(own, own[1:], strict=False):
        if b.time < a.time:
            r.error(f"contexts.session_ids: {c.context_id} puts {b.session_id} after the later {a.session_id}")
    last: dict[str, int] = {}
    for s in own:
        period = rank.get(s.period or "", -1)
        if period < last.get(s.topic, -1):
            r.error(f"contexts.session_ids: {c.context_id} puts topic {s.topic} period {s.period} after a later period")
        last[s.topic] = max(period, last.get(s.topic, -1))


def _placements(t: dict[str, list[BaseModel]], sessions: dict[str, Session], turns_by: dict[str, list[Turn]],
                r: _Report) -> None:
    r.check("placements sorted, evidence before the question, offsets recomputed")
    contexts = {c.context_id: c for c in t["contexts"]}
    queries = {q.query_id: q for q in t["queries"]}
    personas = {p.persona_id: p for p in t["personas"]}
    by_context: dict[str, list[Placement]] = defaultdict(list)
    for p in t["placements"]:
        by_context[p.context_id].append(p)
    rank = {c.context_id: i for i, c in enumerate(t["contexts"])}
    order = [(rank.get(p.context_id, -1), p.end_index, p.query_id) for p in t["placements"]]
    if order != sorted(order):
        r.error("placements: rows are not sorted by (context in contexts order, end_index, query_id)")
    for cid, rows in by_context.items():
        c = contexts.get(cid)
        if c is None or c.persona_id not in personas or any(sid not in sessions for sid in c.session_ids):
            continue
        lay = layout(c.session_ids, sessions, profile_tokens=message_tokens(profile_text(personas[c.persona_id])),
                     profile_mode=c.profile_mode, session_dates=c.session_dates)
        prefixes = {sid: turn_prefix(turns_by.get(sid, [])) for sid in c.session_ids if sessions[sid].kind == "topic"}
        for p in rows:
            _placement(p, c, lay, prefixes, queries, r)


def _placement(p: Placement, c: Context, lay, prefixes, queries: dict[str, Query], r: _Report) -> None:
    q = queries.get(p.query_id)
    if q is None:
        return
    if q.persona_id != c.persona_id:
        r.error(f"placements.query_id: {p.query_id} of persona {q.persona_id} placed in {c.context_id}")
        return
    expected = place_query(c, lay, prefixes, q)
    if isinstance(expected, str):
        r.error(f"placements: {p.query_id} in {c.context_id} cannot be placed ({expected})")
    elif expected != p:
        r.error(f"placements: {p.query_id} in {c.context_id} stores {p.model_dump()}, recomputed {expected.model_dump()}")
