"""Loads run configuration: a named profile or a YAML file, then command-line overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pipeline.catalog import DataFileError, load_yaml_model
from pipeline.errors import first_validation_error
from schemas.config import RunConfig

PROFILE_DIR = Path(__file__).parent / "config"


def profile_path(profile: str) -> Path:
    """``default`` -> the shipped profile file; a path is taken as is."""
    path = Path(profile)
    if path.suffix in {".yaml", ".yml"}:
        return path
    candidate = PROFILE_DIR / f"{profile}.yaml"
    if not candidate.exists():
        known = ", ".join(sorted(p.stem for p in PROFILE_DIR.glob("*.yaml")))
        raise DataFileError(f"unknown profile {profile!r}; known profiles: {known}")
    return candidate


def load_config(profile: str = "default", **overrides: Any) -> RunConfig:
    """The profile's config with non-None overrides applied (e.g. ``n_personas=5, seed=7``)."""
    config = load_yaml_model(profile_path(profile), RunConfig)
    updates = {k: v for k, v in overrides.items() if v is not None}
    if not updates:
        return config
    try:
        return RunConfig.model_validate({**config.model_dump(), **updates})
    except ValidationError as exc:
        raise DataFileError(first_validation_error(exc, "command line")) from exc
