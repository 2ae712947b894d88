"""Prefect's temporary API server, started by us in a process group of its own.

A terminal's Ctrl-C (and `timeout`) signals the whole foreground process group. Started by Prefect
itself, the temporary server is in that group and dies at once, and the interrupted run then spends
a minute retrying its lost API before it ends in a traceback. Started here, the server is outside the
group: the run stops its model calls, reports its state, and Prefect's own exit hook stops the server.
On Linux the server also gets SIGTERM when this process dies (kill -9 leaves no server behind).
Prefect's exit hook logs "Stopping temporary server"; when the stream its handler writes to is
already closed (pytest closes its capture before the interpreter's exit hooks run), that line is
dropped instead of ending the output in a "--- Logging error ---" traceback.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import signal
import subprocess
import sys
import threading
import types

from pipeline.errors import UserError

PR_SET_PDEATHSIG = 1
STARTUP_TIMEOUT_S = 60  # Prefect's default of 20 s is too short on a loaded machine


def _die_with_parent() -> None:
    """In the child before exec: ask for SIGTERM when the parent dies (Linux; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@contextlib.contextmanager
def _popen_in_own_group(module: types.ModuleType):
    """While active, ``module.subprocess.Popen`` starts its child in a new process group."""
    popen = functools.partial(subprocess.Popen, process_group=0, preexec_fn=_die_with_parent)
    real = module.subprocess
    module.subprocess = types.SimpleNamespace(**{**vars(subprocess), "Popen": popen})
    try:
        yield
    finally:
        module.subprocess = real


def closed_streams(logger: logging.Logger) -> bool:
    """Whether a handler ``logger`` reaches (itself, then its parents while records propagate) writes to a
    closed stream."""
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if getattr(getattr(handler, "stream", None), "closed", False):
                return True
        current = current.parent if current.propagate else None
    return False


@contextlib.contextmanager
def quiet_when_closed(logger: logging.Logger):
    """While active, ``logger`` drops its records if any of its handlers' streams is closed."""
    if not closed_streams(logger):
        yield
        return
    disabled, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = disabled


def uses_temporary_server() -> bool:
    """Whether a flow run here would start Prefect's temporary server (no PREFECT_API_URL set)."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    return not PREFECT_API_URL.value() and bool(PREFECT_SERVER_EPHEMERAL_ENABLED.value())


@functools.cache
def own_group_server() -> type:
    """Prefect's ``SubprocessASGIServer``, started in a process group of its own and stopped quietly once
    the output is closed."""
    import prefect.server.api.server as module

    class OwnGroupServer(module.SubprocessASGIServer):
        def _run_uvicorn_command(self) -> subprocess.Popen:
            with _popen_in_own_group(module):
                return super()._run_uvicorn_command()

        def stop(self) -> None:  # also Prefect's exit hook (atexit holds this bound method)
            with quiet_when_closed(module.subprocess_server_logger):
                super().stop()

    return OwnGroupServer
def api_problem(timeout_s: float = 5.0) -> str | None:
    """Why the configured PREFECT_API_URL cannot take a flow run (one line), or None (it answers, or no URL is
    set and a temporary server will be started)."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        return None
    try:
        reply = httpx.get(f"{url.rstrip('/')}/health", timeout=timeout_s)
    except (httpx.HTTPError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"PREFECT_API_URL {url}: cannot reach the Prefect API ({reason}); start it, or unset PREFECT_API_URL " \
               "to use a temporary server"
    if reply.status_code >= 400:
        return f"PREFECT_API_URL {url}: the Prefect API answered HTTP {reply.status_code} at /health"
    return None


def start_temporary_server() -> int | None:
    """Start the temporary server outside our process group, unless a server is configured or running.

    Prefect's clients find it as their own (one instance per process), and its exit hook stops it.
    Returns the server's pid, or None when no temporary server is used.
    """
    if not uses_temporary_server():
        return None
    server_class = own_group_server()
    from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

    timeout = max(STARTUP_TIMEOUT_S, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
    server = server_class()  # the process-wide instance: an already running one is returned as it is
    try:
        server.start(timeout=timeout)
    except RuntimeError as exc:  # Prefect's message carries the server's whole output
        raise UserError(f"Prefect's temporary server did not start within {timeout} s "
                        f"({str(exc).splitlines()[0][:200]}); on a busy machine raise "
                        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, or set PREFECT_API_URL") from None
    return server.server_process.pid if server.server_process else None


HEALTH_EVERY_S = 5.0  # a configured API's /health is asked this often ...
HEALTH_MISSES = 3  # ... and is lost after this many unanswered asks in a row


def api_lost_reason(misses: list[int]) -> str | None:
    """Why the Prefect API this run reports to is gone (one line), or None while it is there: our temporary
    server's process has exited, or a configured PREFECT_API_URL missed ``HEALTH_MISSES`` health checks."""
    if uses_temporary_server():
        process = getattr(own_group_server()(), "server_process", None)
        code = process.poll() if process is not None else None
        return None if code is None else f"Prefect's temporary server (pid {process.pid}) stopped mid-run (exit {code})"
    if api_problem(timeout_s=HEALTH_EVERY_S) is None:
        misses[0] = 0
        return None
    misses[0] += 1
    if misses[0] < HEALTH_MISSES:
        return None
    from prefect.settings import PREFECT_API_URL

    return f"the Prefect API at PREFECT_API_URL {PREFECT_API_URL.value()} stopped answering mid-run"


def watch_api(on_lost, stop: threading.Event, every_s: float = 1.0) -> threading.Thread:
    """A daemon thread that calls ``on_lost(reason)`` once the run's Prefect API is gone, until ``stop`` is set.

    Without it a run whose server died spent minutes in Prefect's client retries, then ended in an httpx
    traceback."""
    def run() -> None:
        misses, waited = [0], 0.0
        while not stop.wait(every_s):
            waited += every_s
            temporary = uses_temporary_server()
            if not temporary and waited < HEALTH_EVERY_S:
                continue
            waited = 0.0
            reason = api_lost_reason(misses)
            if reason is not None and not stop.is_set():
                on_lost(reason)
                return

    thread = threading.Thread(target=run, name="prefect-api-watch", daemon=True)
    thread.start()
    return thread
