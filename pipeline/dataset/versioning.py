"""Versions of one dataset: numbering, the ``latest`` link, retention, and the pins that keep a live
publisher's version from being pruned by another process."""

from __future__ import annotations

import fcntl
import os
import secrets
from contextlib import contextmanager
from pathlib import Path

from pipeline.dataset.reading import read_manifest, verify
from pipeline.dataset.store import LATEST, OUT_MARKER, VERSION, PublishError, discard, marker_files
from pipeline.errors import UserError


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


def prune(directory: Path, keep: int, *, locked: bool = False, spare: str | None = None,
          kept: list[str] | None = None) -> list[str]:
    """Remove complete versions older than the newest ``keep``: never the one ``latest`` names, nor ``spare``
    (the version this process just published), nor one that another live process published (pinned), nor
    a folder this tool cannot prove it published (:func:`not_ours`; each is added to ``kept`` with why)."""
    if keep < 1:
        raise PublishError(f"--keep {keep}: must keep at least one version")
    if not locked:
        with _locked(directory):
            return prune(directory, keep, locked=True, spare=spare, kept=kept)
    latest = os.readlink(directory / LATEST) if (directory / LATEST).is_symlink() else None
    removed = []
    for old in versions(directory)[:-keep]:
        if old.name in (latest, spare) or _pinned_elsewhere(old):
            continue
        if (why := not_ours(old)) is not None:
            if kept is not None:
                kept.append(f"{old.name} ({why})")
            continue
        _unpin(old)
        trash = directory / f".trash-{old.name}-{secrets.token_hex(4)}"
        os.rename(old, trash)
        discard(trash)
        removed.append(old.name)
    return removed


def not_ours(version: Path) -> str | None:
    """Why ``version`` is not provably a version this tool published, or None: its manifest must validate and
    name this folder, every file it lists must match its checksum, and the folder may hold nothing else but
    the report and eval runs this tool wrote (each listing its files in its marker)."""
    if version.is_symlink() or not version.is_dir():
        return "a link, not a folder" if version.is_symlink() else "not a folder"
    try:
        manifest = read_manifest(version)
        if manifest.version != version.name or manifest.dataset != version.parent.name:
            return f"its manifest names {manifest.dataset}/{manifest.version}"
        if not manifest.files:
            return "its manifest lists no files"
        verify(version, manifest)
    except (UserError, OSError) as exc:
        return str(exc).replace(f"{version}/", "")  # "manifest.json: damaged: ...", "queries.parquet: damaged ..."
    foreign = _foreign(version, set(manifest.files) | {"manifest.json"}, subfolders={"report", "evals"})
    return f"holds {foreign}, which personagen did not write" if foreign else None


def _foreign(folder: Path, known: set[str], subfolders: set[str] | None = None) -> str | None:
    """The first entry of ``folder`` this tool did not write: not in ``known`` (nor in the folder's marker), or
    a subfolder (any, unless ``subfolders`` names them) that holds one."""
    known = known | (marker_files(folder) or set()) | {OUT_MARKER}
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return folder.name
    for entry in entries:
        if entry.is_symlink():
            return str(entry.relative_to(folder))
        if entry.is_dir() and (subfolders is None or entry.name in subfolders):
            inner = _foreign(entry, set())
            if inner is not None:
                return f"{entry.name}/{inner}"
        elif entry.name not in known or not entry.is_file():
            return entry.name
    return None


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
