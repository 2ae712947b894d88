"""The manifest written beside every dataset version."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rows: int | None = None
    bytes: int
    sha256: str


class Failure(BaseModel):
    model_config = ConfigDict(extra="forbid")

    persona_index: int | None = None
    stage: str
    reason: str


class Manifest(BaseModel):
    """What a dataset version is and how it was made; enough to reproduce or audit it."""

    model_config = ConfigDict(extra="forbid")

    dataset: str
    version: str
    created_at: datetime
    code_version: str
    seed: int
    config: dict[str, Any]
    config_fingerprint: str
    template_fingerprints: dict[str, str] = Field(default_factory=dict)
    models: list[str] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    usage: dict[str, Any] = Field(default_factory=dict)
    validation: dict[str, Any] = Field(default_factory=dict)
    failures: list[Failure] = Field(default_factory=list)
    stats: dict[str, Any] = Field(default_factory=dict)
    files: dict[str, FileEntry] = Field(default_factory=dict)
