"""Seed fan-out: one run seed -> independent, reproducible RNGs per (persona, stage)."""

from __future__ import annotations

import hashlib
import random


def derive_seed(run_seed: int, *keys: object) -> int:
    """A 64-bit seed from the run seed and any keys; stable across processes and machines."""
    blob = "\x1f".join([str(run_seed), *map(str, keys)]).encode("utf-8")
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big")


def derive_rng(run_seed: int, *keys: object) -> random.Random:
    """A fresh ``random.Random`` for (run seed, keys...), e.g. ``derive_rng(7, persona_id, "simulate_timeline")``."""
    return random.Random(derive_seed(run_seed, *keys))
