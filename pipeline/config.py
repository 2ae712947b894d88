"""Run configuration: a named profile or a YAML file, command-line overrides, and the writing mode a backend
decides; the YAML loader every data file goes through (errors name the file, the line and the field)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from pipeline.errors import UserError, first_validation_error
from schemas.config import RunConfig

if TYPE_CHECKING:
    from pipeline.llm import LLM

PROFILE_DIR = Path(__file__).parent / "config"


class DataFileError(UserError, ValueError):
    """A data or config file is malformed; the message names the file and the field."""


# libyaml's safe loader where PyYAML was built with it (the taxonomy and catalog parse ~10x faster), else Python's
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml_model(path: Path, model: type):
    """Parse ``path`` as YAML into ``model``; errors name the file and the first bad field."""
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except FileNotFoundError as exc:
        raise DataFileError(f"{path}: file not found") from exc
    except IsADirectoryError:
        raise DataFileError(f"{path}: is a folder; give a YAML file") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise DataFileError(f"{path}:{line}: not UTF-8 text (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise DataFileError(f"{path}{where}: invalid YAML ({getattr(exc, 'problem', exc)})") from exc
    try:
        return model.model_validate(raw or {})
    except ValidationError as exc:
        raise DataFileError(first_validation_error(exc, str(path))) from exc


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


def writing_mode(config: RunConfig, llm: LLM) -> str:
    """``text.writing``, with ``auto`` chosen by the backend: a turn per call on the embedded small model,
    whole sessions elsewhere."""
    if config.text.writing != "auto":
        return config.text.writing
    return "turn" if llm.backend.provider == "local" else "session"


def query_wording(config: RunConfig, llm: LLM) -> str:
    """``queries.wording``, with ``auto`` chosen by the backend: code on the embedded small model (SmolLM2-135M's
    wordings failed a gate in every query of its runs: first person, length, not a question), the model
    elsewhere."""
    if config.queries.wording != "auto":
        return config.queries.wording
    return "code" if llm.backend.provider == "local" else "model"


def with_writing(config: RunConfig, llm: LLM) -> RunConfig:
    """``config`` with its writing mode and query wording decided for ``llm`` (so the plan, the manifest and the
    run agree)."""
    mode, wording = writing_mode(config, llm), query_wording(config, llm)
    if mode == config.text.writing and wording == config.queries.wording:
        return config
    return config.model_copy(update={"text": config.text.model_copy(update={"writing": mode}),
                                     "queries": config.queries.model_copy(update={"wording": wording})})
