"""A real `dask scheduler` and `dask worker` processes whose workers cannot see a folder of the driver's.

Each worker runs in a mount namespace of its own (``unshare --mount``, as root) where the hidden folder is
covered by an empty, read-only tmpfs with mode 000: the worker can neither read what the driver keeps there
nor write anything into it, as on a machine that shares no disk with the driver.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.procs import REPO, kill_group

# The worker's command comes after the hidden folder ($0): cover it, then become the worker.
HIDE = 'mount -t tmpfs -o ro,size=4k,mode=000 personagen-hidden "$0" && exec "$@"'


def isolation_problem() -> str | None:
    """Why workers cannot be kept off the driver's folder here, or None when they can."""
    if not sys.platform.startswith("linux"):
        return "workers are kept off the driver's folder by a Linux mount namespace"
    if os.geteuid() != 0:
        return "a mount namespace for the workers (unshare --mount) needs root"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", HIDE, "/tmp", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare --mount is not permitted here ({(probe.stderr.strip() or 'no reason').splitlines()[0]})"
    return None


def worker_command(hidden: Path, *command: str) -> list[str]:
    """``command`` in a mount namespace where ``hidden`` is an empty read-only folder."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", HIDE, str(hidden), *command]


def _start(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


@contextlib.contextmanager
def isolated_cluster(hidden: Path, scratch: Path, *, workers: int = 2, env: dict | None = None,
                     timeout_s: float = 120) -> Iterator[str]:
    """Yield the address of a scheduler with ``workers`` single-thread workers connected, none of which can see
    ``hidden``; ``scratch`` holds their logs and their own temporary folders."""
    env = {**(env or os.environ), "PYTHONPATH": str(REPO)}
    scratch.mkdir(parents=True, exist_ok=True)
    dask = [sys.executable, "-m", "dask"]
    file = scratch / "scheduler.json"
    procs = [_start([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                     "--scheduler-file", str(file)], scratch / "scheduler.log", env)]
    try:
        address = _wait_for_file(file, procs[0], timeout_s)
        for i in range(workers):
            own = scratch / f"worker-{i}"
            own.mkdir(parents=True, exist_ok=True)
            command = worker_command(hidden, *dask, "worker", address, "--nworkers", "1", "--nthreads", "1",
                                     "--no-dashboard", "--name", f"worker-{i}", "--local-directory", str(own))
            procs.append(_start(command, scratch / f"worker-{i}.log", {**env, "TMPDIR": str(own)}))
        _wait_for_workers(address, workers, procs, timeout_s)
        yield address
    finally:
        for proc in reversed(procs):
            kill_group(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


def _wait_for_file(file: Path, proc: subprocess.Popen, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the scheduler exited"
        with contextlib.suppress(OSError, ValueError, KeyError):
            return json.loads(file.read_text())["address"]
        time.sleep(0.2)
    raise TimeoutError(f"no scheduler address in {file} after {timeout_s} s")


def _wait_for_workers(address: str, n: int, procs: list[subprocess.Popen], timeout_s: float) -> None:
    import distributed

    with distributed.Client(address, timeout=timeout_s, set_as_default=False) as client:
        deadline = time.monotonic() + timeout_s
        while len(client.nthreads()) < n:
            assert all(p.poll() is None for p in procs), "a worker exited; see its log"
            assert time.monotonic() < deadline, f"{len(client.nthreads())} of {n} workers after {timeout_s} s"
            time.sleep(0.2)
