"""A folder nobody can write into, root included: `chattr +i` as root (root writes through permission
bits), mode 0o555 otherwise; the test is skipped where neither is possible."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """``folder`` made read-only for the block, writable again after it."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)
        return
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot make {folder} immutable as root: {made.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
