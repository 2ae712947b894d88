"""The explicit pyarrow schema of every output table, next to the models that fill it."""

from __future__ import annotations

import pyarrow as pa
from pydantic import BaseModel

from schemas.context import Context, Placement
from schemas.conversation import Session, Turn
from schemas.persona import Persona
from schemas.query import Query
from schemas.timeline import Event, EventEdge, PreferenceVersion

TS = pa.timestamp("us")
STR = pa.string()
STR_LIST = pa.list_(STR)
# dict[str, str] columns: a list of key/value structs, not an Arrow map (Hugging Face datasets cannot read maps).
STR_MAP = pa.list_(pa.struct([("key", STR), ("value", STR)]))

STYLE = pa.struct(
    [
        ("verbosity", STR),
        ("formality", STR),
        ("typo_rate", pa.float64()),
        ("emoji_use", STR),
        ("directness", STR),
    ]
)
ATTRIBUTES = pa.struct(
    [
        ("age", pa.int32()),
        ("age_band", STR),
        ("gender_identity", STR),
        ("location", STR),
        ("occupation", STR),
        ("occupation_group", STR),
        ("life_stage", STR),
        ("household", STR),
        ("values", STR_LIST),
        ("hobbies", STR_LIST),
    ]
)
OPTION = pa.struct([("text", STR), ("role", STR), ("grounding", STR_LIST)])
EVIDENCE = pa.struct([("session_id", STR), ("turn_index", pa.int32())])


def _schema(*fields: tuple[str, pa.DataType, bool]) -> pa.Schema:
    return pa.schema([pa.field(name, typ, nullable=nullable) for name, typ, nullable in fields])


PERSONAS = _schema(
    ("persona_id", STR, False),
    ("seed_source", STR, False),
    ("seed_text", STR, False),
    ("name", STR, False),
    ("age", pa.int32(), True),
    ("gender_identity", STR, True),
    ("location", STR, True),
    ("occupation", STR, True),
    ("profile", STR, False),
    ("style", STYLE, False),
    ("attributes", ATTRIBUTES, False),
    ("split", STR, False),
    ("provenance", STR_MAP, False),
)
PREFERENCES = _schema(
    ("pref_id", STR, False),
    ("version", pa.int32(), False),
    ("persona_id", STR, False),
    ("topic", STR, False),
    ("item", STR, False),
    ("stance", STR, False),
    ("valid_from", TS, False),
    ("valid_to", TS, True),
    ("caused_by_event_id", STR, True),
    ("reason", STR, True),
    ("stereotypical", pa.bool_(), False),
)
EVENTS = _schema(
    ("event_id", STR, False),
    ("persona_id", STR, False),
    ("time", TS, False),
    ("period", STR, False),
    ("kind", STR, False),
    ("category", STR, True),
    ("topic", STR, True),
    ("summary", STR, False),
    ("narrative", STR, True),
    ("pref_refs", STR_LIST, False),
    ("cause_event_id", STR, True),
    ("facet", STR, True),
    ("direction", STR, True),
    ("scale", STR, True),
)
EVENT_EDGES = _schema(
    ("parent_event_id", STR, False),
    ("child_event_id", STR, False),
    ("relation", STR, False),
)
SESSIONS = _schema(
    ("session_id", STR, False),
    ("persona_id", STR, True),
    ("topic", STR, False),
    ("period", STR, True),
    ("time", TS, True),
    ("kind", STR, False),
    ("n_turns", pa.int32(), False),
    ("n_tokens", pa.int64(), False),
    ("provenance", STR_MAP, False),
)
TURNS = _schema(
    ("session_id", STR, False),
    ("turn_index", pa.int32(), False),
    ("role", STR, False),
    ("content", STR, False),
    ("event_ids", STR_LIST, False),
    ("pref_versions", STR_LIST, False),
    ("n_tokens", pa.int32(), False),
    ("fallback", pa.bool_(), False),
    ("voicing", STR, True),
)
QUERIES = _schema(
    ("query_id", STR, False),
    ("persona_id", STR, False),
    ("type", STR, False),
    ("topic", STR, False),
    ("as_of", TS, False),
    ("anchor_session_id", STR, True),
    ("anchor_turn_index", pa.int32(), True),
    ("question", STR, False),
    ("options", pa.list_(OPTION), False),
    ("correct_index", pa.int32(), False),
    ("evidence", pa.list_(EVIDENCE), False),
    ("n_pref_updates", pa.int32(), False),
    ("provenance", STR_MAP, False),
    ("voicing", STR, True),
)
CONTEXTS = _schema(
    ("context_id", STR, False),
    ("persona_id", STR, False),
    ("budget_tokens", pa.int64(), False),
    ("ordering", STR, False),
    ("session_ids", STR_LIST, False),
    ("n_tokens", pa.int64(), False),
    ("filler_tokens", pa.int64(), False),
    ("profile_mode", STR, False),
    ("focal_topic", STR, True),
    ("session_dates", pa.bool_(), False),
)
PLACEMENTS = _schema(
    ("context_id", STR, False),
    ("query_id", STR, False),
    ("end_index", pa.int64(), False),
    ("context_tokens", pa.int64(), False),
    ("distance_tokens", pa.int64(), False),
    ("distance_sessions", pa.int32(), False),
    ("evidence_position", pa.float64(), False),
    ("voicing", STR, True),
)

# table name -> (arrow schema, row model); the names are the Parquet file stems.
TABLES: dict[str, tuple[pa.Schema, type[BaseModel]]] = {
    "personas": (PERSONAS, Persona),
    "preferences": (PREFERENCES, PreferenceVersion),
    "events": (EVENTS, Event),
    "event_edges": (EVENT_EDGES, EventEdge),
    "sessions": (SESSIONS, Session),
    "turns": (TURNS, Turn),
    "queries": (QUERIES, Query),
    "contexts": (CONTEXTS, Context),
    "placements": (PLACEMENTS, Placement),
}


def to_table(name: str, rows: list[BaseModel]) -> pa.Table:
    """Models -> an Arrow table with the table's explicit schema (raises on any mismatch)."""
    schema, model = TABLES[name]
    for row in rows:
        if not isinstance(row, model):
            raise TypeError(f"table {name}: expected {model.__name__}, got {type(row).__name__}")
    maps = [f.name for f in schema if f.type == STR_MAP]
    dumped = [r.model_dump(mode="python") for r in rows]
    for row in dumped:
        for key in maps:
            row[key] = [{"key": k, "value": v} for k, v in sorted(row[key].items())]
    return pa.Table.from_pylist(dumped, schema=schema)


def from_table(name: str, table: pa.Table) -> list[BaseModel]:
    """An Arrow table -> validated models (the inverse of :func:`to_table`)."""
    _, model = TABLES[name]
    rows = table.to_pylist()
    maps = [f.name for f in table.schema if f.type == STR_MAP]
    for row in rows:
        for key in maps:
            if isinstance(row[key], list):
                row[key] = {kv["key"]: kv["value"] for kv in row[key]}
    return [model.model_validate(r) for r in rows]
