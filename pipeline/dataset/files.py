"""Files derived from a version, written atomically: export files (CSV, JSONL, JSON), eval runs and the
HTML report (beside a version's tables, which stay untouched)."""

from __future__ import annotations

import csv
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterable
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from pipeline.dataset.store import (
    ExportError,
    _os_reason,
    check_can_write,
    check_out_folder,
    make_staging,
    replace_dir,
    sweep,
    writable_problem,
    write_marker,
)
from pipeline.errors import UserError


def export_folder(out: Path, names: list[str]) -> Path:
    """Make sure ``out`` is a folder an export may write ``names`` into (one line, ExportError, when not):
    new, empty, or holding only earlier exports (its marker lists them); ``names`` join the marker first."""
    check_out_folder(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_marker(out, names, keep=True)
    except OSError as exc:
        raise ExportError(f"--out {out}: folder is not writable ({_os_reason(exc)})") from None
    return out


@contextmanager
def export_unit(out: Path, names: list[str]):
    """An export's files as one unit: :func:`export_folder` checks ``out``, the block writes every file into the
    staging folder it is given (inside ``out``, where a full disk or an error stops it, and nothing in ``out``
    has changed), and only then are the files moved into ``out`` (renames, which need no space)."""
    with suppress(OSError):  # a name too long, a file: export_folder says so in one line
        if not out.is_symlink():
            sweep(out, (".staging-export-",))  # a killed export's staging folder
    export_folder(out, names)
    try:
        staging = make_staging(out, "export")
    except OSError as exc:
        raise ExportError(f"--out {out}: folder is not writable ({_os_reason(exc)})") from None
    try:
        yield staging
        for path in sorted(staging.iterdir()):
            os.replace(path, out / path.name)
    except OSError as exc:
        raise ExportError(f"--out {out}: cannot write ({_os_reason(exc)}); nothing was exported") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def _atomic_text(path: Path):
    """A text handle on a temporary sibling that replaces ``path`` only when the block completes."""
    if path.is_dir():
        raise ExportError(f"--out {path}: is a folder; give the file to write")
    sweep(path.parent, (f".{path.name}.",))  # a killed export's temporary file
    tmp = path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
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


def write_text(path: Path, text: str) -> int:
    """Write a text file (UTF-8) atomically; returns its line count."""
    with _atomic_text(path) as fh:
        fh.write(text)
    return text.count("\n")


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


def _refuse_empty(path: Path, n: int, allow_empty: bool, what: str) -> None:
    """Inside an atomic write: nothing replaces ``path`` when it would hold no record."""
    if n == 0 and not allow_empty:
        kept = "the existing file is kept" if path.exists() else "nothing was written"
        raise ExportError(f"--out {path}: the export would hold 0 {what} ({kept}); check --budget and the version")


def write_jsonl(path: Path, records: Iterable[Any], *, allow_empty: bool = True) -> int:
    """Write one JSON object per line atomically (UTF-8, no ASCII escaping); returns the line count. Without
    ``allow_empty`` an export of no record is refused (ExportError) and ``path`` keeps what it held."""
    n = 0
    with _atomic_text(path) as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            n += 1
        _refuse_empty(path, n, allow_empty, "records")
    return n


def write_json_list(path: Path, records: Iterable[Any], *, allow_empty: bool = True) -> int:
    """Write one JSON array atomically, one element per line (streamed); returns the element count."""
    n = 0
    with _atomic_text(path) as fh:
        fh.write("[")
        for record in records:
            fh.write(("\n" if n == 0 else ",\n") + json.dumps(record, ensure_ascii=False, default=str))
            n += 1
        fh.write("\n]\n")
        _refuse_empty(path, n, allow_empty, "entries")
    return n


def check_export_file(path: Path, keys: set[str]) -> None:
    """Refuse (ExportError) to replace ``path`` unless it is absent or an earlier JSONL export: its first
    line a JSON object holding ``keys``. Never a link or a folder."""
    try:
        path.lstat()
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:  # a name too long, a NUL
        if not isinstance(exc, NotADirectoryError):
            reason = _os_reason(exc) if isinstance(exc, OSError) else str(exc)
            raise ExportError(f"--out {path}: cannot be used ({reason})") from None
    if path.is_symlink():
        raise ExportError(f"--out {path}: is a link; give the file to write")
    if path.is_dir():
        raise ExportError(f"--out {path}: is a folder; give the file to write")
    if not path.exists():
        return
    try:
        with path.open("rb") as fh:
            first = json.loads(fh.readline() or b"{}")
    except (OSError, ValueError):
        first = None
    if not (isinstance(first, dict) and keys <= first.keys()):
        raise ExportError(f"--out {path}: exists and is not an earlier export of this kind; give a new file "
                          "(nothing was changed)")


EVAL_FILES = {"results.parquet", "references.parquet", "summary.md", "summary.json"}  # what an eval run writes
_OUTPUT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
EVAL_FALLBACK = "eval-results"


def check_output_name(name: str) -> str:
    """``name`` when it is a safe folder name (no path parts), else a one-line UserError."""
    if not _OUTPUT_NAME.match(name):
        raise UserError(f"eval run name {name!r}: use letters, digits, '.', '_' or '-' (at most 100)")
    return name


def eval_folder(version: Path, name: str, *, outputs: Path | None = None) -> Path:
    """Where eval run ``name`` goes, checked before any model call: ``<version>/evals/<name>``, or when the
    version cannot be written (a read-only copy) ``<outputs>/eval-results/<dataset>/<version>/<name>``."""
    check_output_name(name)
    primary = version / "evals"
    problem = writable_problem(primary)
    if problem is None:
        check_out_folder(primary / name, option="eval run", ours=EVAL_FILES)  # before any call
        return primary / name
    if outputs is None:
        raise UserError(f"{primary}: cannot write the eval results ({problem}); nothing was asked")
    fallback = outputs / EVAL_FALLBACK / version.parent.name / version.name
    second = writable_problem(fallback)
    if second is not None:
        raise UserError(f"{primary}: cannot write the eval results ({problem}), nor under --outputs {fallback} "
                        f"({second}); nothing was asked")
    check_out_folder(fallback / name, option="eval run", ours=EVAL_FILES)
    return fallback / name


def write_eval(folder: Path, tables: dict[str, pa.Table], markdown: str, summary: BaseModel) -> Path:
    """Write one eval run as a unit into ``folder`` (from :func:`eval_folder`): its Parquet tables,
    summary.md and summary.json."""
    files = {}
    for file_name, table in tables.items():
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        files[file_name] = sink.getvalue().to_pybytes()
    files |= {"summary.md": markdown.encode(), "summary.json": (summary.model_dump_json(indent=2) + "\n").encode()}
    try:
        return _write_folder(folder, files, option="eval run", ours=EVAL_FILES)
    except OSError as exc:
        raise UserError(f"{folder}: cannot write the eval results ({_os_reason(exc)})") from None


def write_pages(out: Path, files: dict[str, bytes]) -> Path:
    """Write a folder of pages (``personagen review``) as a unit into ``out``: new, empty, or one an earlier
    review wrote (its marker lists them); never a folder holding anything else."""
    return _write_folder(out, files, option="--out")


def write_report(version: Path, files: dict[str, bytes]) -> Path:
    """Write ``<version>/report/`` (report.html and its PNG files) as a unit, replacing an older report."""
    return _write_folder(version / "report", files)


def _write_folder(target: Path, files: dict[str, bytes], *, option: str = "report folder",
                  ours: set[str] = frozenset()) -> Path:
    """``files`` as the folder ``target``, replacing an earlier one of ours (never a folder holding other files)."""
    ours = set(ours) | set(files)
    check_out_folder(target, option=option, ours=ours)
    check_can_write(target, option=option)
    sweep(target.parent, (f".staging-{target.name}-", f".trash-{target.name}-"))
    staging = make_staging(target.parent, target.name)
    try:
        for name, data in files.items():
            (staging / name).write_bytes(data)
        write_marker(staging, list(files))
        check_out_folder(target, option=option, ours=ours)
        replace_dir(staging, target)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise ExportError(f"{option} {target}: cannot write there ({_os_reason(exc)}); nothing was written") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def check_report(version: Path) -> None:
    """Refuse, before any plot is drawn, a version whose report folder cannot be written."""
    target = version / "report"
    check_out_folder(target, option="report folder")
    check_can_write(target, option="report folder")
