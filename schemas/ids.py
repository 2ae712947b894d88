"""Stable ids: short hashes of the seed and content that define a thing, never uuid4."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def digest(*parts: Any, length: int = 12) -> str:
    """Hex digest of the canonical JSON of ``parts``; equal inputs give equal ids on every machine."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:length]


def stable_id(prefix: str, *parts: Any) -> str:
    """A readable id such as ``per_3f2a9c01b7de`` derived from ``parts``."""
    return f"{prefix}_{digest(*parts)}"


def pref_id(persona_id: str, topic: str, item: str) -> str:
    """The id of one preference (persona x topic x item); its versions share it."""
    return stable_id("pref", persona_id, topic, item)


def version_key(pref: str, version: int) -> str:
    """The reference a turn or option uses for one preference version: ``pref_x@2``."""
    return f"{pref}@{version}"


def parse_version_key(key: str) -> tuple[str, int]:
    """Inverse of :func:`version_key`."""
    pref, _, version = key.rpartition("@")
    if not pref or not version.isdigit():
        raise ValueError(f"not a preference version key: {key!r}")
    return pref, int(version)
