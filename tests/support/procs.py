"""The CLI in a process group of its own, and cleaning up what it leaves (Prefect's temporary server)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def start_in_group(args: list[str], log: Path, *, env: dict, **popen) -> subprocess.Popen:
    """Start `args` in its own process group (so the whole group can be signalled), output to `log`."""
    with log.open("wb") as out:
        return subprocess.Popen(args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, **popen)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL whatever is left of the process's group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_in_group(args: list[str], log: Path, *, env: dict, timeout: float = 600, **popen) -> int:
    """Run `args` in its own process group to the end; afterwards kill what the group left behind."""
    proc = start_in_group(args, log, env=env, **popen)
    try:
        return proc.wait(timeout=timeout)
    finally:
        kill_group(proc)
