"""Per-persona checkpoints: a finished persona's results, keyed by everything that decides them.

With the LLM cache this makes a rerun cheap twice over: the model is never asked again, and a
persona whose inputs did not change is not even recomputed. Growing N reuses every finished persona.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from functools import cache
from pathlib import Path

from pydantic import BaseModel, Field

from pipeline.run.persona_text import PersonaText
from schemas.config import RunConfig
from schemas.ids import digest
from schemas.llm import UsageSummary
from schemas.persona import PersonaSeed
from schemas.query import Query

CODE_DIRS = ("pipeline", "schemas")


class PersonaResult(BaseModel):
    """Everything one persona contributes to a dataset."""

    text: PersonaText
    queries: list[Query]
    query_stats: dict = {}
    usage: UsageSummary = Field(default_factory=UsageSummary)  # the calls that made it (a rerun reports them)


@cache
def code_fingerprint() -> str:
    """sha256 over the project's Python sources and data files (a code change invalidates checkpoints)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for folder in CODE_DIRS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in {".py", ".yaml"} and "__pycache__" not in path.parts:
                h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def run_fingerprint(config: RunConfig, *, llm_key: dict, templates: dict[str, str]) -> str:
    """What decides a persona's results, minus N and the dataset name (so N can grow)."""
    content = config.model_dump(mode="json", exclude={"n_personas", "dataset", "refresh"})
    return digest(content, llm_key, sorted(templates.items()), code_fingerprint(), length=24)


class FilteredQueries(BaseModel):
    """The run-level probe and filter's outcome: the queries it kept (redrawn ones reworded) and its report."""

    queries: list[Query]
    report: dict = {}


class Checkpoints:
    """One JSON file per finished persona under ``root``; written atomically, read leniently."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, seed: PersonaSeed, fingerprint: str) -> Path:
        return self.root / f"{digest(fingerprint, seed.source, seed.text, length=24)}.json"

    def load(self, seed: PersonaSeed, fingerprint: str) -> PersonaResult | None:
        path = self.path(seed, fingerprint)
        try:
            return PersonaResult.model_validate_json(path.read_bytes())
        except (OSError, ValueError):
            return None  # absent or torn: recompute (the LLM cache still serves every call)

    def save(self, seed: PersonaSeed, fingerprint: str, result: PersonaResult) -> None:
        self._write(self.path(seed, fingerprint), result.model_dump_json())

    @staticmethod
    def _write(path: Path, text: str) -> None:
        """Atomically: a reader sees the old file or the whole new one."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)  # a full disk leaves no empty temporary file

    def load_filtered(self, key: str) -> FilteredQueries | None:
        """The probe and filter's outcome for a run whose personas and fingerprint digest to ``key``."""
        try:
            return FilteredQueries.model_validate_json((self.root / f"filtered-{key}.json").read_bytes())
        except (OSError, ValueError):
            return None

    def save_filtered(self, key: str, filtered: FilteredQueries) -> None:
        self._write(self.root / f"filtered-{key}.json", filtered.model_dump_json())
