"""Reading a published version back: resolve a path or name, verify checksums, load typed tables, and
rebuild a context's chat messages from its session references."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, Field, PrivateAttr, ValidationError

from pipeline.dataset.store import (
    LATEST,
    DamagedDataset,
    DatasetNotFound,
    _file_entry,
    _os_reason,
    read_table,
)
from pipeline.errors import first_validation_error
from pipeline.s5_assembly.budget import context_messages
from schemas.context import ChatMessage, Context, Placement
from schemas.conversation import Session, SessionWithTurns, Turn
from schemas.manifest import Manifest
from schemas.persona import Persona
from schemas.query import Query
from schemas.tables import TABLES
from schemas.timeline import Event, EventEdge, PreferenceVersion


def resolve(path: Path | str, outputs: Path = Path("outputs")) -> Path:
    """A version folder from a version path, a dataset folder (its ``latest``), or a dataset name."""
    candidates = [Path(path)]
    if not Path(path).is_absolute():
        candidates.append(outputs / path)
    for p in candidates:
        if (p / "manifest.json").is_file():
            return p.resolve()
        if (p / LATEST / "manifest.json").is_file():
            return (p / LATEST).resolve()
    raise DatasetNotFound(f"{path}: no dataset version here (expected manifest.json or a '{LATEST}' link)")


class Dataset(BaseModel):
    """A loaded dataset version: typed rows per table, the manifest, and chat materialization."""

    path: Path
    manifest: Manifest
    personas: list[Persona] = Field(default_factory=list)
    preferences: list[PreferenceVersion] = Field(default_factory=list)
    events: list[Event] = Field(default_factory=list)
    event_edges: list[EventEdge] = Field(default_factory=list)
    sessions: list[Session] = Field(default_factory=list)
    turns: list[Turn] = Field(default_factory=list)
    queries: list[Query] = Field(default_factory=list)
    contexts: list[Context] = Field(default_factory=list)
    placements: list[Placement] = Field(default_factory=list)
    _index: dict[str, Any] = PrivateAttr(default_factory=dict)

    def _lookup(self, name: str) -> dict:
        if name not in self._index:
            self._index["context"] = {c.context_id: c for c in self.contexts}
            self._index["persona"] = {p.persona_id: p for p in self.personas}
            self._index["session"] = _sessions_with_turns(self.sessions, self.turns)
        return self._index[name]

    def materialize_context(self, context_id: str, upto: int | None = None) -> list[ChatMessage]:
        """The chat messages of ``context_id`` (the first ``upto`` of them when given)."""
        return materialize_context(self, context_id, upto=upto)

    def session(self, session_id: str) -> SessionWithTurns:
        """One session with its turns in order (needs the sessions and turns tables)."""
        return self._lookup("session")[session_id]


def _sessions_with_turns(sessions: list[Session], turns: list[Turn]) -> dict[str, SessionWithTurns]:
    grouped: dict[str, list[Turn]] = {s.session_id: [] for s in sessions}
    for turn in turns:
        grouped[turn.session_id].append(turn)
    return {
        s.session_id: SessionWithTurns.model_construct(session=s, turns=sorted(grouped[s.session_id],
                                                                                key=lambda t: t.turn_index))
        for s in sessions
    }


def load(path: Path | str, tables: list[str] | None = None) -> Dataset:
    """Load a dataset version (or a dataset folder's ``latest``) as typed tables; ``tables`` limits which.

    Each table's file is checked against the manifest's sha256 first: a damaged version raises
    :class:`DamagedDataset` naming the file, never a parser's traceback.
    """
    directory = resolve(path)
    manifest = read_manifest(directory)
    names = tables or list(TABLES)
    unknown = sorted(set(names) - set(TABLES))
    if unknown:
        raise DatasetNotFound(f"{directory}: unknown tables {', '.join(unknown)}")
    verify(directory, manifest, [f"{name}.parquet" for name in names])
    rows = {}
    for name in names:
        try:
            rows[name] = read_table(directory, name)
        except (OSError, pa.ArrowException, ValidationError) as exc:  # a file the manifest does not list
            raise DamagedDataset(f"{directory / name}.parquet: unreadable ({str(exc).splitlines()[0]})") from None
    return Dataset(path=directory, manifest=manifest, **rows)


def read_manifest(directory: Path) -> Manifest:
    """The manifest of a version folder, or a one-line DamagedDataset."""
    path = directory / "manifest.json"
    try:
        manifest = Manifest.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise DamagedDataset(f"{path}: unreadable ({_os_reason(exc)})") from None
    except ValidationError as exc:
        raise DamagedDataset(first_validation_error(exc, f"{path}: damaged")) from None
    for name in manifest.files:
        if not _inside_name(name):  # every entry names a file in the version itself, never a path out of it
            raise DamagedDataset(f"{path}: damaged (files lists {name!r}, which is not a file of this version)")
    return manifest


def _inside_name(name: str) -> bool:
    """A plain file name: no folder part, no '..', not absolute, no NUL or backslash."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")


def verify(directory: Path, manifest: Manifest | None = None, names: list[str] | None = None) -> None:
    """Check the files ``names`` (default: every file the manifest lists) against their sha256 and size."""
    manifest = manifest or read_manifest(directory)
    for name in names if names is not None else sorted(manifest.files):
        entry = manifest.files.get(name)
        path = directory / name
        if entry is None:
            continue  # versions older than the checksums: nothing to compare with
        if not path.is_file():
            raise DamagedDataset(f"{path}: missing (manifest.json lists it)")
        found = _file_entry(path, entry.rows)
        if found.bytes != entry.bytes or found.sha256 != entry.sha256:
            what = (f"sha256 differs from manifest.json's, same size {found.bytes:,} bytes" if found.bytes == entry.bytes
                    else f"size differs from manifest.json: {found.bytes:,} bytes, expected {entry.bytes:,}")
            raise DamagedDataset(f"{path}: damaged ({what}); regenerate or restore this version")


def materialize_context(dataset: Dataset, context_id: str, upto: int | None = None) -> list[ChatMessage]:
    """Rebuild a context's chat messages from its session references; ``upto`` = a placement's end_index."""
    context = dataset._lookup("context").get(context_id)
    if context is None:
        raise DatasetNotFound(f"{dataset.path}/contexts.parquet: no context {context_id}")
    persona = dataset._lookup("persona")[context.persona_id]
    messages = context_messages(context, persona, dataset._lookup("session"))
    return messages if upto is None else messages[:upto]
