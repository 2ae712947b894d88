"""The manifest written beside every dataset version."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.config import RunConfig


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


class ValidationReport(BaseModel):
    """What pipeline/dataset/validate.py checked on a staged version and what failed (first messages kept)."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    n_errors: int = 0
    errors: list[str] = Field(default_factory=list)
    checks: list[str] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)


class PublishInfo(BaseModel):
    """What the flow knows about a run and hands to ``publish``; the rest of the manifest is computed."""

    model_config = ConfigDict(extra="forbid")

    config: RunConfig
    config_fingerprint: str | None = Field(default=None, description="None: a digest of the config")
    code_version: str | None = Field(default=None, description="None: git describe, else the package version")
    template_fingerprints: dict[str, str] = Field(default_factory=dict)
    models: list[str] = Field(default_factory=list)
    usage: dict[str, Any] = Field(default_factory=dict, description="UsageSummary.model_dump() of the run")
    failures: list[Failure] = Field(default_factory=list)
    stats: dict[str, Any] = Field(default_factory=dict, description="stage statistics; assembly_unplaced: reason -> count")
    license: str = "cc-by-4.0"
