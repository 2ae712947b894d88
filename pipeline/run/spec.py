"""What a run is: its spec (config, model settings, outputs, limits, all picklable for Dask workers) and its
identity, the fingerprint a persona's checkpoint is kept under (config, model settings, templates, code)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from pipeline.errors import UserError
from pipeline.llm.factory import backend_name, resolve_backend_string
from pipeline.prompting import PromptEnv
from pipeline.run.checkpoint import Checkpoints, run_fingerprint
from pipeline.specs import ALL_SPECS
from schemas.config import RunConfig
from schemas.llm import LLMSettings


class RunFailed(UserError):
    """Too many personas failed; nothing was published."""


class RunSpec(BaseModel):
    """Everything a job needs, picklable so Dask workers can receive it."""

    model_config = ConfigDict(extra="forbid")

    config: RunConfig
    llm: LLMSettings
    outputs: Path = Path("outputs")
    keep: int | None = None
    max_failure_fraction: float = Field(default=0.05, ge=0.0, le=1.0)

    @property
    def checkpoints(self) -> Checkpoints:
        return Checkpoints(self.llm.cache_path.parent / "personas")


DASK_WORKERS = 4  # worker processes when --runner dask is not given --workers (each loads its own embedded model)


def default_workers(settings: LLMSettings, runner: str = "thread") -> int:
    """Personas processed at once when the user names no number: as many as the backend takes calls in
    flight (``max_concurrency``), so the embedded model's batch and a server's concurrency are filled (a
    persona's stages mostly wait on each other: about one call in flight each); with Dask, ``DASK_WORKERS``
    processes."""
    return DASK_WORKERS if runner == "dask" else settings.max_concurrency


def model_name(settings: LLMSettings) -> str:
    """``provider:model`` of the backend the settings select, without building it, opening a cache or loading it."""
    return backend_name(resolve_backend_string(settings), settings)


def template_fingerprints() -> dict[str, str]:
    """Fingerprint of every registered template; recomputed only when a file under prompts/ changed."""
    env = PromptEnv()
    stamp = tuple(sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in env.root.rglob("*.jinja")))
    return dict(_fingerprints(str(env.root), stamp))


@lru_cache(maxsize=8)
def _fingerprints(root: str, stamp: tuple) -> tuple[tuple[str, str], ...]:
    env = PromptEnv(Path(root))
    return tuple((spec.template, env.fingerprint(spec.template)) for spec in ALL_SPECS.values())


def fingerprint(spec: RunSpec, llm_name: str) -> str:
    s = spec.llm
    llm_key = {"llm": llm_name, "temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens,
               "seed": s.seed, "reask": s.reask}
    return run_fingerprint(spec.config, llm_key=llm_key, templates=template_fingerprints())
