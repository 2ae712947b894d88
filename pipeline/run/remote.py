"""The Dask worker's side of a persona task: everything comes in the job, everything made goes back in the reply.

A worker needs only personagen installed (the same version as the driver: the code fingerprint is checked)
and its own temporary folder. It never opens the driver's ``--outputs``, cache or checkpoints: the job carries
the run spec, the persona, the templates' text and fingerprints, and the driver's cached calls recorded for
this persona; the reply carries the persona's tables (its checkpoint payload), its usage, and every call the
worker answered, as cache rows. The driver alone writes the cache, the checkpoints and the dataset.
Jobs and replies travel as zlib-compressed JSON, so driver and worker need not share a Python or a pickle.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import zlib
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from pipeline.errors import UserError
from pipeline.llm import LLM
from pipeline.llm.cache import CallRecord, LLMCache
from pipeline.prompting import PromptEnv
from pipeline.run.checkpoint import PersonaResult, code_fingerprint
from pipeline.run.jobs import make_persona
from pipeline.run.spec import RunSpec
from schemas.llm import UsageSummary
from schemas.persona import PersonaSeed

M = TypeVar("M", bound=BaseModel)
_READY: set[tuple] = set()  # backends this worker process has preflighted (an API's check is a request)
_READY_LOCK = threading.Lock()


class WorkerJob(BaseModel):
    """One persona task as a worker receives it."""

    model_config = ConfigDict(extra="forbid")

    seed: PersonaSeed
    spec: RunSpec
    tag: str
    code: str
    templates: dict[str, str]
    fingerprints: dict[str, str]
    rows: list[CallRecord] = []


class WorkerReply(BaseModel):
    """What a worker sends back: the persona, or one line naming the worker and what failed; its calls either way."""

    model_config = ConfigDict(extra="forbid")

    worker: str
    result: PersonaResult | None = None
    usage: UsageSummary = UsageSummary()
    rows: list[CallRecord] = []
    error: str | None = None
    retry: bool = False


def pack(model: BaseModel) -> bytes:
    """A job or reply as it travels between driver and worker."""
    return zlib.compress(model.model_dump_json().encode())


def unpack(payload: bytes, model: type[M]) -> M:
    """A packed job or reply, read back."""
    return model.model_validate_json(zlib.decompress(payload))


def run_job(payload: bytes) -> bytes:
    """The function a Dask worker runs: a packed `WorkerJob` in, a packed `WorkerReply` out. The code fingerprint
    is checked before the job is read (another version's job may not even validate here)."""
    data = json.loads(zlib.decompress(payload))
    mismatch = _other_code(str(data.get("code")))
    return pack(mismatch or work(WorkerJob.model_validate(data)))


def work(job: WorkerJob) -> WorkerReply:
    """Run one persona in a scratch folder of this worker's own; a failure comes back as a reply, not an exception,
    so the calls it answered still reach the driver."""
    name = worker_name()
    if mismatch := _other_code(job.code):
        return mismatch
    with tempfile.TemporaryDirectory(prefix="personagen-task-") as scratch:
        llm: LLM | None = None
        result, error, retry = None, None, False
        try:
            llm = _gateway(job, Path(scratch))
            _preflight(llm)
            result = make_persona(job.seed, job.spec, llm)
        except UserError as exc:  # configuration (no model file, no key): another attempt would fail the same way
            error = f"worker {name}: {_first_line(exc)}"
        except Exception as exc:
            error, retry = f"worker {name}: {type(exc).__name__}: {_first_line(exc)}", True
        finally:
            rows = llm.cache.records(exclude={r.key for r in job.rows}) if llm else []
            if llm:
                llm.close()
    usage = llm.usage_summary() if llm else UsageSummary()
    return WorkerReply(worker=name, result=result, usage=usage, rows=rows, error=error, retry=retry)


def _other_code(driver_code: str) -> WorkerReply | None:
    """The refusal of a worker whose personagen differs from the driver's (it would make other tables)."""
    if driver_code == code_fingerprint():
        return None
    name = worker_name()
    return WorkerReply(worker=name, error=f"worker {name}: its personagen code differs from the driver's (code "
                       f"fingerprint {code_fingerprint()[:12]}, the driver's {driver_code[:12]}): install the same "
                       "version on every worker")


def _gateway(job: WorkerJob, scratch: Path) -> LLM:
    """A gateway over the job's templates (written to ``scratch``), pinned to the driver's fingerprints, with a
    response cache in ``scratch`` holding the shipped rows (re-asks and retries within the task use it too)."""
    for name, text in job.templates.items():
        path = scratch / "prompts" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    settings = job.spec.llm.model_copy(update={"cache_path": scratch / "llm.sqlite"})
    cache = LLMCache(settings.cache_path, tag=job.tag)
    cache.put_many(job.rows)
    return LLM(settings, cache=cache, prompts=PromptEnv(scratch / "prompts"), fingerprints=job.fingerprints)


def _preflight(llm: LLM) -> None:
    """The backend's preflight, once per backend per worker process."""
    identity = (llm.name, getattr(llm.backend, "base_url", None), llm.settings.cache_only)
    with _READY_LOCK:
        if identity in _READY:
            return
    llm.preflight()
    with _READY_LOCK:
        _READY.add(identity)


def worker_name() -> str:
    """This Dask worker's name and address, or host and pid outside a worker."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return f"{socket.gethostname()} pid {os.getpid()}"
    name, address = str(worker.name), worker.address
    return address if name == address else f"{name} ({address})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
