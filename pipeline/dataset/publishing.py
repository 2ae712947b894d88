"""Publishing: stage every table, validate it in memory and as read back, then number the version, write
its manifest and card, rename it into place and move ``latest`` (under the dataset's lock)."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ValidationError

from pipeline.dataset.card import render_card
from pipeline.dataset.checklist import checklist
from pipeline.dataset.store import (
    LATEST,
    PublishError,
    _file_entry,
    _os_reason,
    make_staging,
    sweep,
    writable_problem,
    write_table,
)
from pipeline.dataset.validate import validate_tables
from pipeline.dataset.versioning import _locked, _next_version, _pin, _point_latest, prune
from pipeline.errors import first_validation_error
from pipeline.s2_timeline.coherence import short_periods
from schemas.config import RunConfig
from schemas.ids import digest
from schemas.manifest import Manifest, PublishInfo, ValidationReport
from schemas.tables import TABLES, from_table


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
    return validate_tables(tables, period_order=period_order, tolerance=config.assembly.tolerance,
                           short_periods=short_periods(config))


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
    sweep(folder)  # what killed runs left: their staging folders, folders moved aside for removal
    problem = writable_problem(folder)
    if problem is not None:
        raise PublishError(f"{folder}: outputs folder is not writable ({problem})")
    _check_latest(folder)


def _check_latest(folder: Path) -> None:
    """``latest`` must be a link (or absent): anything else would stop its move after a version is renamed in."""
    latest = folder / LATEST
    if latest.exists() and not latest.is_symlink():
        raise PublishError(f"{latest}: expected a link to the newest version, found a "
                           f"{'folder' if latest.is_dir() else 'file'}; move it aside, nothing published")


# Every version this process renamed into place, in order: an interrupted command reads it to say truthfully
# whether its version is complete (the rename is the publish; `latest` and retention follow it).
PUBLISHED: list[Path] = []
# Old versions retention left in place because this tool cannot prove it published them, with why.
KEPT: list[str] = []


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
        target = seal(staging, _manifest(staging, info, version, tables, report), tables)
        announce(target)
        if keep is not None:
            prune(parent, keep, locked=True, spare=target.name, kept=KEPT)
    return target


def seal(staging: Path, manifest: Manifest, tables: dict[str, list[BaseModel]]) -> Path:
    """Write the card and the manifest (listing the card) into ``staging``, make its files read-only and rename it
    to its version; returns the version's path. The caller holds the dataset's lock."""
    (staging / "README.md").write_text(render_card(manifest, tables), encoding="utf-8")
    manifest.files["README.md"] = _file_entry(staging / "README.md", None)
    (staging / "manifest.json").write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    _read_only(staging)
    target = staging.parent / manifest.version
    os.rename(staging, target)
    return target


def announce(target: Path) -> None:
    """A version just renamed into place: recorded for this process, pinned while it lives, named by ``latest``."""
    PUBLISHED.append(target)
    _pin(target)
    _point_latest(target.parent)


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
        stats=info.stats | {"license": info.license, "checklist": checklist(tables)},
        files={f"{n}.parquet": _file_entry(staging / f"{n}.parquet", len(tables[n])) for n in TABLES},
    )


def _read_only(directory: Path) -> None:
    """Drop write permission from every file of a version: published versions are immutable."""
    for path in directory.iterdir():
        path.chmod(path.stat().st_mode & ~0o222)


def code_version() -> str:
    """``git describe`` of the checkout when there is one, else the installed package version."""
    repo = Path(__file__).resolve().parents[2]
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
