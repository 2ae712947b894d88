"""Versions of one dataset: numbering, the ``latest`` link, retention, and the pins that keep a live
publisher's version from being pruned by another process."""

from __future__ import annotations

import fcntl
import os
import secrets
from contextlib import contextmanager
from pathlib import Path

from pipeline.dataset.store import LATEST, VERSION, PublishError, discard


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
        discard(trash)
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
