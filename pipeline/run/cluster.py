"""The driver's side of a Dask run: connect, ship each persona its job, merge what comes back, watch for no workers.

The driver alone writes the response cache, the checkpoints and (later) the dataset. Before it submits a
persona it reads the calls its cache recorded for that persona (`persona_tag`, a column outside the key), so
a persona run again after a crash, a template edit or a thread run repeats no completed call, whichever worker
takes it. As each task comes back, its calls are merged into the cache and its checkpoint written: a driver
killed mid-run loses at most the calls of the personas in flight.
"""

from __future__ import annotations

import contextlib
import queue
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from pipeline.errors import UserError
from pipeline.llm.cache import LLMCache
from pipeline.llm.factory import resolve_backend_string
from pipeline.prompting import PromptEnv
from pipeline.run.checkpoint import code_fingerprint
from pipeline.run.jobs import JobResult, persona_tag
from pipeline.run.remote import WorkerJob, WorkerReply, pack, run_job, unpack
from pipeline.run.spec import DASK_WORKERS, RunSpec, fingerprint, model_name, template_fingerprints
from schemas.persona import PersonaSeed

RETRIES = 2  # further attempts of a persona whose worker failed on something other than configuration
POLL_S = 1.0


class DaskSettings(BaseModel):
    """Where the persona tasks run: an existing scheduler, or a local cluster of ``workers`` processes."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = None
    workers: int = Field(default=DASK_WORKERS, ge=1, description="local cluster processes; on an existing "
                         "cluster the fewest personas in flight (else twice the worker threads connected)")
    timeout_s: float = Field(default=300.0, gt=0, description="fail when no worker has taken a task this long")


class NoWorkers(UserError):
    """No Dask worker took a task within the timeout."""


class WorkerFailed(UserError):
    """A worker could not run a persona; the message is the worker's one line."""


class Pool:
    """A connected Dask client, the shipping tallies, and the no-worker watch."""

    def __init__(self, client, settings: DaskSettings, notify: Callable[[str], None]) -> None:
        self.client, self.settings, self.notify = client, settings, notify
        self.where = settings.address or "a local cluster"
        self.sent = self.received = self.tasks = 0
        self.idle_since = time.monotonic()
        self.noticed = False

    def threads(self) -> int:
        """Worker threads connected now."""
        return sum(self.client.nthreads().values())

    def window(self) -> int:
        """Personas to keep submitted: enough that no worker waits for its next job."""
        return max(self.settings.workers, 2 * self.threads())

    def submit(self, job: WorkerJob, done: queue.Queue):
        """Send one job; its future lands in ``done`` when it finishes, fails or is cancelled."""
        payload = pack(job)
        if not self.tasks:  # the watch starts with the first job, not with the driver's preparations
            self.idle_since = time.monotonic()
        self.sent += len(payload)
        self.tasks += 1
        future = self.client.submit(run_job, payload, key=f"persona-{job.seed.index}-{secrets.token_hex(4)}",
                                    pure=False)
        future.add_done_callback(done.put)
        return future

    def watch(self, running, progressed: bool) -> None:
        """Say when no worker has taken a task for a while; raise `NoWorkers` past the timeout."""
        now = time.monotonic()
        if progressed or self._taken(running):
            self.idle_since, self.noticed = now, False
            return
        idle, limit = now - self.idle_since, self.settings.timeout_s
        if idle >= min(30.0, limit / 2) and not self.noticed:
            self.noticed = True
            self.notify(f"no Dask worker has taken a task for {idle:.0f} s ({self.where}: "
                        f"{len(self.client.nthreads())} workers connected); giving up after {limit:.0f} s")
        if idle >= limit:
            raise NoWorkers(f"no Dask worker took a task within {limit:.0f} s ({self.where}: "
                            f"{len(self.client.nthreads())} workers connected); nothing published")

    def _taken(self, running) -> bool:
        keys = {future.key for future in running}
        return any(key in keys for tasks in self.client.processing().values() for key in tasks)

    def stats(self) -> dict:
        """The manifest's record of what travelled: bytes each way, per persona task."""
        per = max(1, self.tasks)
        return {"tasks": self.tasks, "bytes_to_workers": self.sent, "bytes_from_workers": self.received,
                "bytes_per_task": round((self.sent + self.received) / per)}


@contextlib.contextmanager
def open_pool(settings: DaskSettings, notify: Callable[[str], None]) -> Iterator[Pool]:
    """A client of the scheduler at ``settings.address`` (one line when it cannot be reached), or of a local
    cluster of ``settings.workers`` processes; closed, with whatever is still queued, on the way out."""
    import distributed

    with contextlib.ExitStack() as stack:
        if settings.address:
            client = stack.enter_context(_connect(settings.address, min(30.0, settings.timeout_s)))
        else:
            cluster = stack.enter_context(distributed.LocalCluster(
                n_workers=settings.workers, processes=True, threads_per_worker=1, dashboard_address=None))
            client = stack.enter_context(distributed.Client(cluster, set_as_default=False))
        pool = Pool(client, settings, notify)
        workers = client.nthreads()
        notify(f"Dask: {pool.where}, {len(workers)} workers ({sum(workers.values())} threads) connected")
        yield pool


def _connect(address: str, timeout_s: float):
    import distributed

    try:
        return distributed.Client(address, timeout=timeout_s, set_as_default=False)
    except (OSError, ValueError, TimeoutError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"cannot reach the Dask scheduler at {address} ({reason}); is `dask scheduler` running "
                        "there, and its port open to this machine?") from None


class Driver:
    """What every job of a run shares, and the driver's cache and checkpoints that take the replies."""

    def __init__(self, spec: RunSpec) -> None:
        llm = spec.llm.model_copy(update={"llm": resolve_backend_string(spec.llm)})  # not the worker's environment
        self.spec = spec.model_copy(update={"llm": llm})
        self.name = model_name(spec.llm)
        self.key = fingerprint(spec, self.name)
        self.templates = template_sources(PromptEnv().root)
        self.fingerprints = template_fingerprints()
        self.code = code_fingerprint()
        self.cache = LLMCache(spec.llm.cache_path)

    def job(self, seed: PersonaSeed) -> WorkerJob:
        """The persona's job, with every call the driver's cache recorded for it."""
        tag = persona_tag(seed, self.name)
        return WorkerJob(seed=seed, spec=self.spec, tag=tag, code=self.code, templates=self.templates,
                         fingerprints=self.fingerprints, rows=self.cache.tagged(tag))

    def receive(self, seed: PersonaSeed, reply: WorkerReply) -> JobResult | WorkerFailed:
        """Merge the reply's calls into the cache, then checkpoint the persona (or return its failure)."""
        if reply.rows:
            self.cache.put_many(reply.rows)
        if reply.error is not None or reply.result is None:
            return WorkerFailed(reply.error or f"worker {reply.worker}: no result")
        result = reply.result.model_copy(update={"usage": reply.usage})
        if not reply.usage.total.transport_failures:  # else a rerun asks its unanswered calls again
            self.spec.checkpoints.save(seed, self.key, result)
        return JobResult(result=result, usage=reply.usage, from_checkpoint=False)

    def close(self) -> None:
        self.cache.close()


def template_sources(root: Path) -> dict[str, str]:
    """Every template file under the prompts folder, by loader name (a worker may have another checkout)."""
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.jinja"))}


def remote_personas(pool: Pool, seeds: list[PersonaSeed], spec: RunSpec
                    ) -> Iterator[tuple[PersonaSeed, JobResult | Exception]]:
    """Each persona's outcome as its task comes back, in completion order; a persona whose worker failed on
    anything but configuration is tried again, with the calls its failed attempt answered."""
    driver, waiting, done = Driver(spec), deque(seeds), queue.Queue()
    running: dict = {}
    try:
        while waiting or running:
            while waiting and len(running) < pool.window():
                seed = waiting.popleft()
                running[pool.submit(driver.job(seed), done)] = (seed, 0)
            finished = _finished(done, running)
            pool.watch(running, bool(finished))
            for future in finished:
                seed, attempt = running.pop(future)
                outcome, retry = _outcome(pool, driver, seed, future)
                if retry and attempt < RETRIES:
                    running[pool.submit(driver.job(seed), done)] = (seed, attempt + 1)
                else:
                    yield seed, outcome
    finally:
        if running:
            pool.client.cancel(list(running))
        driver.close()


def _finished(done: queue.Queue, running: dict) -> list:
    """The futures that finished since the last look, waiting up to `POLL_S` for the first."""
    found = []
    with contextlib.suppress(queue.Empty):
        found.append(done.get(timeout=POLL_S))
        while True:
            found.append(done.get_nowait())
    return [f for f in found if f in running]


def _outcome(pool: Pool, driver: Driver, seed: PersonaSeed, future) -> tuple[JobResult | Exception, bool]:
    """A finished task's persona or failure, and whether to try it again."""
    try:
        payload = future.result()
    except ImportError as exc:  # the worker could not even load the task's function
        return WorkerFailed(f"a Dask worker cannot import personagen ({exc}): install it on every worker"), False
    except Exception as exc:  # the task itself failed: a worker died repeatedly, or the task was cancelled
        return exc, False
    pool.received += len(payload)
    reply = unpack(payload, WorkerReply)
    outcome = driver.receive(seed, reply)
    return outcome, isinstance(outcome, WorkerFailed) and reply.retry
