"""Prefect's exit hook stops the temporary server without a "--- Logging error ---" once the output is closed.

pytest closes its capture before the interpreter's exit hooks run; Prefect's hook then logs "Stopping temporary
server" to the closed stream, and `make test` ended in a traceback after its summary line. The scripts below
take that exit path for real (a stand-in server process, the hook registered as Prefect registers it).
"""

from __future__ import annotations

import io
import logging
import subprocess
import sys

from flows.server import closed_streams, quiet_when_closed
from tests.conftest import REPO

EXIT_PATH = """
import atexit, io, subprocess, sys
import prefect.server.api.server as module
from flows.server import own_group_server
from prefect.logging.configuration import setup_logging
sys.stderr = stream = io.StringIO()  # as pytest captures: Prefect's console handler keeps this stream
setup_logging()
sys.stderr = sys.__stderr__
server = (own_group_server() if sys.argv[1] == "ours" else module.SubprocessASGIServer)()
server.port = 1
server.server_process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
atexit.register(server.stop)
stream.close()
print("summary line", flush=True)
"""


def _exit(kind: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", EXIT_PATH, kind], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                                            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HOME": str(REPO)})


def test_our_server_stops_quietly_at_exit_where_prefects_own_prints_a_logging_error():
    ours = _exit("ours")
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.strip().endswith("summary line")
    assert "Logging error" not in ours.stderr and "Traceback" not in ours.stderr, ours.stderr
    theirs = _exit("prefect")
    assert "--- Logging error ---" in theirs.stderr and "closed file" in theirs.stderr


def test_a_logger_is_muted_only_while_its_stream_is_closed(capsys):
    parent = logging.getLogger("quiet_exit_test")
    parent.propagate = False
    child = logging.getLogger("quiet_exit_test.child")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    parent.addHandler(handler)
    try:
        with quiet_when_closed(child):
            child.warning("kept")
        assert stream.getvalue() == "kept\n" and not closed_streams(child)
        stream.close()
        assert closed_streams(child)
        with quiet_when_closed(child):
            child.warning("dropped")
        assert not child.disabled
        assert "Logging error" not in capsys.readouterr().err
    finally:
        parent.removeHandler(handler)
