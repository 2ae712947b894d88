"""The scheduled refresh against a real Prefect server on loopback (slow: the server takes ~30 s to start)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from flows.schedules import refresh_seed
from pipeline.config import load_config

REPO = Path(__file__).resolve().parents[1]


def test_seed_policies(tmp_path):
    config = load_config("smoke")
    assert refresh_seed(config, tmp_path) == config.seed
    rolled = config.model_copy(update={"refresh": config.refresh.model_copy(update={"seed_policy": "roll"})})
    assert refresh_seed(rolled, tmp_path) != config.seed
    assert refresh_seed(rolled, tmp_path) == refresh_seed(rolled, tmp_path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/health", timeout=2)
        return True
    except OSError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_served_deployment_publishes_on_schedule(tmp_path):
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_HOME": str(tmp_path / "prefect"),
           "PREFECT_LOGGING_LEVEL": "WARNING"}
    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                               "--port", str(port)], env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    serve = None
    try:
        deadline = time.monotonic() + 180
        while not _healthy(api):
            assert time.monotonic() < deadline and server.poll() is None, "prefect server did not start"
            time.sleep(1)
        outputs = tmp_path / "out"
        serve = subprocess.Popen([sys.executable, "-m", "flows.schedules", "serve", "--profile", "smoke", "--n", "1",
                                  "--llm", "fake", "--outputs", str(outputs), "--interval", "10"],
                                 env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
        deadline = time.monotonic() + 300
        while not list((outputs / "smoke").glob("v0001/manifest.json")):
            assert time.monotonic() < deadline, "no scheduled run published a version"
            assert serve.poll() is None, "serve exited"
            time.sleep(2)
    finally:
        if serve is not None:
            _stop(serve)
        _stop(server)
    assert server.returncode is not None and (serve is None or serve.returncode is not None)
