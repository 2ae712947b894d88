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
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from pipeline.dataset.store import ExportError, _os_reason, make_staging, replace_dir
from pipeline.errors import UserError


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
