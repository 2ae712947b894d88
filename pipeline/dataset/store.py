"""Low-level dataset files: Parquet tables through explicit schemas, staging folders renamed into place,
checksums, and the error types every part of the dataset package raises."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from contextlib import suppress
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from pipeline.errors import UserError
from schemas.manifest import FileEntry
from schemas.tables import TABLES, from_table, to_table

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


def writable_problem(folder: Path) -> str | None:
    """None when a file can be created in ``folder``, else why not (one line). Folders this call made for the
    probe are removed again (only those: one another command made at the same moment is left), so a check
    before a run that fails later leaves no empty folder behind. Another command's probe removing a folder
    between our mkdir and our probe is a retry, not an error."""
    vanished: OSError | None = None
    for _ in range(5):
        made: list[Path] = []
        try:
            for path in reversed([p for p in (folder, *folder.parents) if not p.exists()]):  # shallowest first
                with suppress(FileExistsError):
                    path.mkdir()
                    made.append(path)
            probe = folder / f".probe-{os.getpid()}-{secrets.token_hex(4)}"
            probe.write_bytes(b"")
            probe.unlink()
            return None
        except FileNotFoundError as exc:  # another command's clean-up removed a folder on the way: again
            vanished = exc
        except OSError as exc:
            return _os_reason(exc)
        finally:
            for path in reversed(made):  # deepest first
                with suppress(OSError):
                    path.rmdir()
    return _os_reason(vanished)


# The file a command writes into every folder it fills (plan/text/queries tables, export folders, eval runs,
# the report), listing the files it wrote: the proof that replacing or writing into the folder again loses
# nothing a user made.
OUT_MARKER = ".personagen-out"


def marker_files(folder: Path) -> set[str] | None:
    """The names an earlier command listed in ``folder``'s marker, or None (no marker, or not ours)."""
    try:
        data = json.loads((folder / OUT_MARKER).read_text(encoding="utf-8"))
        return {str(n) for n in data["files"]} if isinstance(data, dict) and isinstance(data["files"], list) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_out_folder(target: Path, *, option: str = "--out", ours: set[str] = frozenset()) -> None:
    """Refuse (one line, ExportError) a ``target`` folder a command would replace or write into unless it is
    new, empty, or holds only files an earlier command wrote there (listed in its :data:`OUT_MARKER`, or
    named in ``ours``). Never a file, a link, or the current folder (or one above it)."""
    where = f"{option} {target}"
    try:
        target.lstat()
    except FileNotFoundError:
        pass
    except OSError as exc:  # a name too long, a NUL, a component that is a file
        if not isinstance(exc, NotADirectoryError):
            raise ExportError(f"{where}: cannot be used ({_os_reason(exc)})") from None
    except ValueError as exc:
        raise ExportError(f"{where}: cannot be used ({exc})") from None
    if target.is_symlink():
        raise ExportError(f"{where}: is a link; give a new folder or one personagen wrote")
    if target.exists() and not target.is_dir():
        raise ExportError(f"{where}: is a file; give a new folder or one personagen wrote (nothing was changed)")
    absolute, cwd = Path(os.path.abspath(target)), Path.cwd()
    if absolute == cwd or absolute in cwd.parents:
        raise ExportError(f"{where}: is the current folder (or holds it); give a new folder for the output")
    if not target.is_dir():
        return
    try:
        names = {p.name for p in target.iterdir()} - {OUT_MARKER}
    except OSError as exc:
        raise ExportError(f"{where}: cannot read the folder ({_os_reason(exc)})") from None
    known = (marker_files(target) or set()) | set(ours)
    foreign = sorted(names - known)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ExportError(f"{where}: holds files personagen did not write there ({shown}); give a new or empty "
                          f"folder, or one an earlier run filled (it lists its files in {OUT_MARKER}); nothing "
                          "was changed")


def check_tables_folder(target: Path) -> None:
    """:func:`check_out_folder` for a folder of tables (`plan`, `text`, `queries`): table files alone, as
    versions before the marker wrote them, count as ours too; and the folder it goes in must take files
    (run before any model call)."""
    check_out_folder(target, ours={f"{name}.parquet" for name in TABLES})
    check_can_write(target)


def check_can_write(target: Path, *, option: str = "--out") -> None:
    """Refuse (one line, ExportError) a ``target`` folder whose parent cannot take the staging folder it is
    written through (a read-only file system, no permission)."""
    problem = writable_problem(target.parent)
    if problem is not None:
        raise ExportError(f"{option} {target}: cannot write there ({problem}); nothing was written")


def write_marker(folder: Path, files: set[str] | list[str], *, keep: bool = False) -> None:
    """List ``files`` (with those listed before when ``keep``) in ``folder``'s marker, atomically."""
    names = set(files) | ((marker_files(folder) or set()) if keep else set())
    tmp = folder / f".{OUT_MARKER}.{secrets.token_hex(4)}.tmp"
    try:
        tmp.write_text(json.dumps({"written_by": "personagen", "files": sorted(names)}, indent=1) + "\n",
                       encoding="utf-8")
        os.replace(tmp, folder / OUT_MARKER)
    finally:
        tmp.unlink(missing_ok=True)


def replace_dir(staging: Path, target: Path) -> None:
    """Move a complete staging folder to ``target``, replacing what was there; never half-written."""
    if target.exists():
        trash = target.parent / f".trash-{target.name}-{secrets.token_hex(4)}"
        os.rename(target, trash)
        os.rename(staging, target)
        discard(trash)
    else:
        os.rename(staging, target)


def discard(path: Path) -> None:
    """Remove a folder this code moved aside (or a link in its place: the link, never what it points at)."""
    if path.is_symlink() or path.is_file():
        with suppress(OSError):
            path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


# What an interrupted or killed command leaves: staging folders and temporary files carry the writer's pid.
_LEFTOVER = re.compile(r"^(?:\.staging-.+-(?P<pid>\d+)-[0-9a-f]{8}|.+\.(?P<tmp_pid>\d+)-[0-9a-f]{8}\.tmp)$")
_TRASH = re.compile(r"^\.trash-.+-[0-9a-f]{8}$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def sweep(folder: Path, prefixes: tuple[str, ...] = ("",)) -> list[str]:
    """Remove what earlier commands left in ``folder`` when they were killed: staging folders and temporary
    files of processes no longer running, and folders moved aside for removal; only names starting with one
    of ``prefixes`` (in a folder that is not ours, only what this writer itself would leave). Returns the
    names removed."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    removed = []
    for path in entries:
        if not path.name.startswith(prefixes):
            continue
        match = _LEFTOVER.match(path.name)
        pid = match and int(match.group("pid") or match.group("tmp_pid"))
        if (pid and pid != os.getpid() and not _alive(pid)) or _TRASH.match(path.name):
            discard(path)
            removed.append(path.name)
    return removed


def write_tables(target: Path, tables: dict[str, list[BaseModel]]) -> dict[str, int]:
    """Write several tables into ``target`` as one unit: all of them, or (on any error) none. ``target`` must
    be new, empty or an earlier output of this kind (:func:`check_out_folder`; a folder of table files alone,
    as older versions wrote without a marker, counts): nothing else is replaced."""
    check_tables_folder(target)
    sweep(target.parent, (f".staging-{target.name}-", f".trash-{target.name}-"))
    try:
        staging = make_staging(target.parent, target.name)
    except OSError as exc:
        raise ExportError(f"--out {target}: cannot write there ({_os_reason(exc)}); nothing was written") from None
    try:
        counts = {name: write_table(staging, name, rows).num_rows for name, rows in tables.items()}
        write_marker(staging, [f"{name}.parquet" for name in tables])
        check_tables_folder(target)  # again, just before the swap: it may have changed meanwhile
        replace_dir(staging, target)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise ExportError(f"--out {target}: cannot write there ({_os_reason(exc)}); nothing was written") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return counts


def _os_reason(exc: OSError) -> str:
    """`strerror: filename` of an OSError, in one line."""
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or str(exc).splitlines()[0]}{where}"


def _file_entry(path: Path, rows: int | None) -> FileEntry:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return FileEntry(rows=rows, bytes=path.stat().st_size, sha256=h.hexdigest())
