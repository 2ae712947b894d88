"""Shared fixtures. Tests never touch the network and need no API key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
PERSONAHUB = SHARED / "data" / "personahub" / "personas_5000.jsonl"

os.environ.pop("OPENAI_API_KEY", None)
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"  # no network: Prefect's server would phone home


@pytest.fixture
def personahub_file() -> Path:
    if not PERSONAHUB.exists():
        pytest.skip("../shared/data/personahub is absent")
    return PERSONAHUB
