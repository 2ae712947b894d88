"""The only module that writes files: Parquet tables through explicit schemas, published atomically
as immutable versions (``outputs/<dataset>/vNNNN`` + ``latest``), and read back as typed tables."""

from __future__ import annotations

import csv
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterable
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field, PrivateAttr, ValidationError

from pipeline.assemble_contexts import context_messages
from pipeline.card import render_card
from pipeline.errors import UserError, first_validation_error
from pipeline.validate import validate_tables
from schemas.config import RunConfig
from schemas.context import ChatMessage, Context, Placement
from schemas.conversation import Session, SessionWithTurns, Turn
from schemas.ids import digest
from schemas.manifest import FileEntry, Manifest, PublishInfo, ValidationReport
from schemas.persona import Persona
from schemas.query import Query
from schemas.tables import TABLES, from_table, to_table
from schemas.timeline import Event, EventEdge, PreferenceVersion


def write_table(directory: Path, name: str, rows: list[BaseModel]) -> pa.Table:
    """Write ``rows`` as ``<directory>/<name>.parquet`` (zstd) with the table's explicit schema."""
    table = to_table(name, rows)
    pq.write_table(table, directory / f"{name}.parquet", compression="zstd")
    return table


def read_table(directory: Path, name: str) -> list[BaseModel]:
    """Read one table back as validated models."""
    path = directory / f"{name}.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such table")
    schema, _ = TABLES[name]
    return from_table(name, pq.read_table(path, schema=schema))


def make_staging(parent: Path, label: str) -> Path:
    """A fresh staging folder next to its destination (same filesystem, so the final rename is atomic)."""
    parent.mkdir(parents=True, exist_ok=True)
    staging = parent / f".staging-{label}-{os.getpid()}-{secrets.token_hex(4)}"
    staging.mkdir()
    return staging


def replace_dir(staging: Path, target: Path) -> None:
    """Move a complete staging folder to ``target``, replacing what was there; never half-written."""
    if target.exists():
        trash = target.parent / f".trash-{target.name}-{secrets.token_hex(4)}"
        os.rename(target, trash)
        os.rename(staging, target)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.rename(staging, target)


def write_tables(target: Path, tables: dict[str, list[BaseModel]]) -> dict[str, int]:
    """Write several tables into ``target`` as one unit: all of them, or (on any error) none."""
    staging = make_staging(target.parent, target.name)
    try:
        counts = {name: write_table(staging, name, rows).num_rows for name, rows in tables.items()}
        replace_dir(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return counts


# -- versioned datasets -------------------------------------------------------------------------

VERSION = re.compile(r"^v(\d{4,})$")
LATEST = "latest"


class PublishError(UserError):
    """A dataset version cannot be published; nothing was published."""


class DatasetNotFound(UserError):
    """A path or name that holds no dataset version."""


class DamagedDataset(UserError):
    """A version whose files do not match its manifest (truncated, edited or missing)."""


class ExportError(UserError):
    """An export cannot be written where ``--out`` points."""


def stage_tables(root: Path, dataset: str, tables: dict[str, list[BaseModel]]) -> Path:
    """Write every table into a fresh staging folder under ``root/dataset`` and return it."""
    return _stage(root, dataset, tables)[0]


def _stage(root: Path, dataset: str, tables: dict[str, list[BaseModel]]) -> tuple[Path, dict[str, pa.Table]]:
    missing = sorted(set(TABLES) - set(tables))
    if missing:
        raise PublishError(f"{root / dataset}: tables missing from the publish: {', '.join(missing)}")
    staging = make_staging(root / dataset, "publish")
    try:
        written = {name: write_table(staging, name, tables[name]) for name in TABLES}
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging, written


def _read_checked(directory: Path, name: str) -> tuple[pa.Table | None, str | None]:
    """One staged table read back with its file schema checked: (table, None) or (None, error)."""
    schema, _ = TABLES[name]
    path = directory / f"{name}.parquet"
    try:
        found = pq.read_schema(path)
        if not found.equals(schema, check_metadata=False):
            return None, f"{name}.parquet: schema differs from schemas/tables.py ({_schema_diff(found, schema)})"
        return pq.read_table(path, schema=schema), None
    except (OSError, pa.ArrowException) as exc:
        return None, f"{name}.parquet: unreadable ({str(exc).splitlines()[0]})"


def read_staged(directory: Path) -> tuple[dict[str, list[BaseModel]], list[str]]:
    """Read every table back, checking each file's schema; returns (tables, errors)."""
    tables: dict[str, list[BaseModel]] = {}
    errors: list[str] = []
    for name in TABLES:
        table, error = _read_checked(directory, name)
        if error:
            errors.append(error)
            continue
        try:
            tables[name] = from_table(name, table)
        except ValidationError as exc:
            errors.append(first_validation_error(exc, f"{name}.parquet"))
    return tables, errors


def _schema_diff(found: pa.Schema, expected: pa.Schema) -> str:
    for field in expected:
        other = found.field(field.name) if field.name in found.names else None
        if other is None or not other.equals(field):
            return f"field {field.name}: expected {field.type}, found {other.type if other else 'nothing'}"
    return f"unexpected fields {sorted(set(found.names) - set(expected.names))}"


def validate_staged(directory: Path, config: RunConfig) -> tuple[dict[str, list[BaseModel]], ValidationReport]:
    """Schemas, row models and every cross-table check of a staged folder."""
    tables, errors = read_staged(directory)
    return tables, _validated(tables, errors, config)


def validate_written(directory: Path, config: RunConfig, tables: dict[str, list[BaseModel]],
                     written: dict[str, pa.Table]) -> ValidationReport:
    """The checks of :func:`validate_staged` for tables this process just wrote from ``tables``.

    Each file must read back, with its schema, equal to the Arrow table written from the rows; the
    cross-table checks then run on the rows in memory instead of models rebuilt from the files
    (the same data, proven by the equality, without a second pydantic pass over every row).
    """
    errors = []
    for name in TABLES:
        table, error = _read_checked(directory, name)
        if error is None and not table.equals(written[name]):
            error = f"{name}.parquet: does not read back as written"
        if error:
            errors.append(error)
    return _validated(tables, errors, config)


def _validated(tables: dict[str, list[BaseModel]], errors: list[str], config: RunConfig) -> ValidationReport:
    if errors:
        return ValidationReport(ok=False, n_errors=len(errors), errors=errors, checks=["table schemas"])
    period_order = [p.name for p in config.periods]
    return validate_tables(tables, period_order=period_order, tolerance=config.assembly.tolerance)


def publish(
    root: Path, tables: dict[str, list[BaseModel]], info: PublishInfo, *, keep: int | None = None
) -> Path:
    """Stage, validate, and atomically publish ``root/<dataset>/vNNNN``; returns its path.

    A failed validation publishes nothing and raises :class:`PublishError` saying why.
    """
    try:
        staging, written = _stage(root, info.config.dataset, tables)
        try:
            report = validate_written(staging, info.config, tables, written)
            return publish_staged(staging, info, keep=keep, validated=(tables, report))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:  # a full disk or a read-only folder: one line, and the staging folder is gone
        raise PublishError(f"{root / info.config.dataset}: cannot write the dataset ({_os_reason(exc)}); "
                           "nothing published") from None


def check_writable(root: Path, dataset: str) -> None:
    """Raise PublishError unless ``root/dataset`` can take a new version; run before any model call.

    Folders made for the probe are removed again, so a run that fails later leaves no empty dataset folder.
    """
    folder = root / dataset
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{os.getpid()}-{secrets.token_hex(4)}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise PublishError(f"{folder}: outputs folder is not writable ({_os_reason(exc)})") from None
    finally:
        for path in made:
            with suppress(OSError):
                path.rmdir()
    _check_latest(folder)


def _check_latest(folder: Path) -> None:
    """``latest`` must be a link (or absent): anything else would stop its move after a version is renamed in."""
    latest = folder / LATEST
    if latest.exists() and not latest.is_symlink():
        raise PublishError(f"{latest}: expected a link to the newest version, found a "
                           f"{'folder' if latest.is_dir() else 'file'}; move it aside, nothing published")


def _os_reason(exc: OSError) -> str:
    """`strerror: filename` of an OSError, in one line."""
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or str(exc).splitlines()[0]}{where}"


def publish_staged(staging: Path, info: PublishInfo, *, keep: int | None = None,
                   validated: tuple[dict[str, list[BaseModel]], ValidationReport] | None = None) -> Path:
    """Validate a staged folder (unless ``validated`` gives its rows and report), then (under the
    dataset's lock) number it, write its manifest and card, rename it into place, move ``latest``
    and apply retention."""
    tables, report = validated or validate_staged(staging, info.config)
    if not report.ok:
        raise PublishError(f"{staging.parent}: validation failed, nothing published: {report.n_errors} "
                           f"error(s), first: {report.errors[0]}")
    parent = staging.parent
    with _locked(parent):
        _check_latest(parent)
        version = _next_version(parent)
        manifest = _manifest(staging, info, version, tables, report)
        (staging / "README.md").write_text(render_card(manifest, tables), encoding="utf-8")
        manifest.files["README.md"] = _file_entry(staging / "README.md", None)
        (staging / "manifest.json").write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
        _read_only(staging)
        target = parent / version
        os.rename(staging, target)
        _pin(target)
        _point_latest(parent)
        if keep is not None:
            prune(parent, keep, locked=True, spare=target.name)
    return target


def _manifest(staging: Path, info: PublishInfo, version: str, tables: dict[str, list[BaseModel]],
              report: ValidationReport) -> Manifest:
    config = info.config.model_dump(mode="json")
    return Manifest(
        dataset=info.config.dataset,
        version=version,
        created_at=datetime.now(UTC).replace(microsecond=0),
        code_version=info.code_version or code_version(),
        seed=info.config.seed,
        config=config,
        config_fingerprint=info.config_fingerprint or digest(config, length=16),
        template_fingerprints=info.template_fingerprints,
        models=info.models,
        counts={name: len(rows) for name, rows in tables.items()},
        usage=info.usage,
        validation=report.model_dump(),
        failures=info.failures,
        stats=info.stats | {"license": info.license},
        files={f"{n}.parquet": _file_entry(staging / f"{n}.parquet", len(tables[n])) for n in TABLES},
    )


def _read_only(directory: Path) -> None:
    """Drop write permission from every file of a version: published versions are immutable."""
    for path in directory.iterdir():
        path.chmod(path.stat().st_mode & ~0o222)


def _file_entry(path: Path, rows: int | None) -> FileEntry:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return FileEntry(rows=rows, bytes=path.stat().st_size, sha256=h.hexdigest())


def code_version() -> str:
    """``git describe`` of the checkout when there is one, else the installed package version."""
    repo = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=repo, capture_output=True,
                             text=True, timeout=10, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("personagen")
        except PackageNotFoundError:
            return "unknown"


@contextmanager
def _locked(directory: Path):
    """An exclusive advisory lock per dataset folder: numbering, ``latest`` and retention are serialized."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def versions(directory: Path) -> list[Path]:
    """Complete versions (``vNNNN`` folders with a manifest), oldest first."""
    found = [p for p in directory.iterdir() if VERSION.match(p.name) and (p / "manifest.json").is_file()] \
        if directory.is_dir() else []
    return sorted(found, key=lambda p: int(p.name[1:]))


def _next_version(directory: Path) -> str:
    taken = [int(m.group(1)) for p in directory.iterdir() if (m := VERSION.match(p.name))]
    return f"v{max(taken, default=0) + 1:04d}"


def _point_latest(directory: Path) -> None:
    """Atomically repoint ``latest`` at the newest complete version (relative link)."""
    newest = versions(directory)[-1].name
    tmp = directory / f".latest-{secrets.token_hex(4)}"
    os.symlink(newest, tmp)
    try:
        os.replace(tmp, directory / LATEST)
    finally:
        tmp.unlink(missing_ok=True)


def prune(directory: Path, keep: int, *, locked: bool = False, spare: str | None = None) -> list[str]:
    """Remove complete versions older than the newest ``keep``: never the one ``latest`` names, nor ``spare``
    (the version this process just published), nor one that another live process published (pinned)."""
    if keep < 1:
        raise PublishError(f"--keep {keep}: must keep at least one version")
    if not locked:
        with _locked(directory):
            return prune(directory, keep, locked=True, spare=spare)
    latest = os.readlink(directory / LATEST) if (directory / LATEST).is_symlink() else None
    removed = []
    for old in versions(directory)[:-keep]:
        if old.name in (latest, spare) or _pinned_elsewhere(old):
            continue
        _unpin(old)
        trash = directory / f".trash-{old.name}-{secrets.token_hex(4)}"
        os.rename(old, trash)
        shutil.rmtree(trash, ignore_errors=True)
        removed.append(old.name)
    return removed


# A process that publishes a version holds a shared lock on its folder until it exits (or prunes it
# itself), so a concurrent run's retention cannot remove a version its publisher is still showing.
_PINS: dict[str, int] = {}


def _pin(version: Path) -> None:
    fd = os.open(version, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    _PINS[str(version.resolve())] = fd


def _unpin(version: Path) -> None:
    fd = _PINS.pop(str(version.resolve()), None)
    if fd is not None:
        os.close(fd)


def _pinned_elsewhere(version: Path) -> bool:
    """Whether another process holds the pin of ``version`` (this process's own pins do not count)."""
    if str(version.resolve()) in _PINS:
        return False
    fd = os.open(version, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


# -- readers ------------------------------------------------------------------------------------


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
        return Manifest.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise DamagedDataset(f"{path}: unreadable ({_os_reason(exc)})") from None
    except ValidationError as exc:
        raise DamagedDataset(first_validation_error(exc, f"{path}: damaged")) from None


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
            raise DamagedDataset(f"{path}: damaged (sha256 or size differs from manifest.json: {found.bytes:,} "
                                 f"bytes, expected {entry.bytes:,}); regenerate or restore this version")


def materialize_context(dataset: Dataset, context_id: str, upto: int | None = None) -> list[ChatMessage]:
    """Rebuild a context's chat messages from its session references; ``upto`` = a placement's end_index."""
    context = dataset._lookup("context").get(context_id)
    if context is None:
        raise DatasetNotFound(f"{dataset.path}/contexts.parquet: no context {context_id}")
    persona = dataset._lookup("persona")[context.persona_id]
    messages = context_messages(context, persona, dataset._lookup("session"))
    return messages if upto is None else messages[:upto]


# -- export files -------------------------------------------------------------------------------


def export_folder(out: Path) -> Path:
    """Make sure ``out`` is a folder an export can write into (one line, ExportError, when not)."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out}: is a file; give a folder for the export files")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".probe-{os.getpid()}-{secrets.token_hex(4)}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ExportError(f"--out {out}: folder is not writable ({_os_reason(exc)})") from None
    return out


@contextmanager
def _atomic_text(path: Path):
    """A text handle on a temporary sibling that replaces ``path`` only when the block completes."""
    if path.is_dir():
        raise ExportError(f"--out {path}: is a folder; give the file to write")
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("w", encoding="utf-8", newline="") as fh:
            yield fh
        os.replace(tmp, path)
    except OSError as exc:
        raise ExportError(f"{path}: cannot write ({_os_reason(exc)})") from None
    finally:
        if tmp.is_file():
            tmp.unlink()


def write_csv(path: Path, header: list[str], rows: Iterable[dict[str, Any]]) -> int:
    """Write a CSV (RFC 4180 quoting) atomically; returns the row count."""
    n = 0
    with _atomic_text(path) as fh:
        writer = csv.DictWriter(fh, fieldnames=header)
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
            n += 1
    return n


def write_jsonl(path: Path, records: Iterable[Any]) -> int:
    """Write one JSON object per line atomically (UTF-8, no ASCII escaping); returns the line count."""
    n = 0
    with _atomic_text(path) as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            n += 1
    return n


def write_json_list(path: Path, records: Iterable[Any]) -> int:
    """Write one JSON array atomically, one element per line (streamed); returns the element count."""
    n = 0
    with _atomic_text(path) as fh:
        fh.write("[")
        for record in records:
            fh.write(("\n" if n == 0 else ",\n") + json.dumps(record, ensure_ascii=False, default=str))
            n += 1
        fh.write("\n]\n")
    return n


# -- derived outputs next to a version (its tables stay untouched) -------------------------------

_OUTPUT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def write_eval(version: Path, name: str, table: pa.Table, markdown: str, summary: BaseModel) -> Path:
    """Write one eval run as a unit into ``<version>/evals/<name>/``: results.parquet, summary.md, summary.json."""
    if not _OUTPUT_NAME.match(name):
        raise UserError(f"eval run name {name!r}: use letters, digits, '.', '_' or '-' (at most 100)")
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    files = {"results.parquet": sink.getvalue().to_pybytes(), "summary.md": markdown.encode(),
             "summary.json": (summary.model_dump_json(indent=2) + "\n").encode()}
    return _write_folder(version / "evals" / name, files)


def write_report(version: Path, files: dict[str, bytes]) -> Path:
    """Write ``<version>/report/`` (report.html and its PNG files) as a unit, replacing an older report."""
    return _write_folder(version / "report", files)


def _write_folder(target: Path, files: dict[str, bytes]) -> Path:
    staging = make_staging(target.parent, target.name)
    try:
        for name, data in files.items():
            (staging / name).write_bytes(data)
        replace_dir(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
