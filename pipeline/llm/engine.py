"""Continuous batching for the embedded model: up to `slots` requests decode together on one llama.cpp context.

One llama.cpp forward pass over 8 sequences costs little more than over one on a small model (the weights
are read once per pass), so the embedded model's aggregate speed grows with the requests in flight
(measured on 2 cores: 54 tokens/s alone, 116 at 8 sequences with llama-batched-bench). The engine owns the
context on one thread and runs llama.cpp's continuous-batching loop, as llama-server does:

- a new request takes a free slot (a sequence id with its own KV stream) and its prompt is evaluated; the
  slot keeps its KV afterwards, and a request is put in the free slot whose cached tokens share the longest
  prefix with its prompt, so a persona's fixed prompt prefix is evaluated once per slot, not once per call;
- then every step decodes one token of each active sequence in one batch and samples each with its own
  sampler chain (seeded) and JSON-schema grammar;
- the grammar is applied lazily, as llama.cpp's common sampler does: the token the chain picks is checked
  against the grammar, and only when the grammar rejects it is the token resampled among the allowed ones
  of the 256 likeliest (the whole vocabulary if none is allowed; applying the grammar to 49k candidates
  for every token cost ~40% of the single-stream speed, and about 10 ms a resample);
- a sequence ends at an end-of-generation token, at its token cap, when it falls into a loop
  (:func:`looping`), when its caller gave up, or when the run is stopping.

Replies do not depend on which other requests shared a pass only up to floating-point detail, so a batched
run may word things differently from another engine: the cache key names the engine (``ENGINE``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from pipeline.llm.errors import CallFailed, ConfigError, Interrupted, PromptTooLong
from pipeline.llm.limits import Runtime
from pipeline.llm.sampling import SHORTLIST, Sampling
from pipeline.llm.slots import Completion, EngineStats, Job, Slot, common_prefix, looping

log = logging.getLogger(__name__)

ENGINE = "batch1"  # named in cache keys: change it when the engine's output for a request can change
GUARD_EVERY = 8  # check for a loop every this many generated tokens
MEASURE = 2  # named in the measured speeds' key: change it when `measure` measures differently (2: rows sampled)
COPY_MIN = 16  # copy another slot's KV stream when it shares this many more prompt tokens than the chosen slot


class BatchEngine(Sampling):
    """One llama.cpp context with ``slots`` sequences of ``n_ctx`` tokens each, driven by one thread."""

    def __init__(self, path: Path, *, n_ctx: int, n_threads: int, slots: int, n_batch: int = 512) -> None:
        import llama_cpp
        from llama_cpp import _internals
        from llama_cpp._logger import set_verbose

        set_verbose(False)  # llama.cpp's own log: errors only (it prints its set-up and first graph otherwise)

        self.lib = llama_cpp
        self.path, self.n_ctx, self.n_slots, self.n_batch = path, n_ctx, slots, n_batch
        model_params = llama_cpp.llama_model_default_params()
        try:
            self.model = _internals.LlamaModel(path_model=str(path), params=model_params, verbose=False)
        except ValueError as exc:
            raise ConfigError(f"cannot load embedded model {path}: {exc}") from None
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx * slots
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = slots
        params.n_threads = params.n_threads_batch = n_threads
        params.kv_unified = False  # one KV stream per sequence: each attends to its own tokens only
        params.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(self.model.model, params)
        if not self.ctx:
            raise ConfigError(f"cannot create a context of {n_ctx} x {slots} tokens for {path}")
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.vocab = self.model.vocab
        self.n_vocab = self.model.n_vocab()
        self.batch = llama_cpp.llama_batch_init(max(n_batch, slots), 0, 1)
        self._candidates = np.zeros(self.n_vocab, dtype=np.dtype(
            [("id", np.intc), ("logit", np.single), ("p", np.single)], align=True))
        self._candidates["id"] = np.arange(self.n_vocab, dtype=np.intc)
        self._shortlist = np.zeros(SHORTLIST, dtype=self._candidates.dtype)
        self._single = llama_cpp.llama_token_data()
        self.slots = [Slot(seq=i) for i in range(slots)]
        self.queue: deque[Job] = deque()
        self.calls: deque[tuple[object, Future]] = deque()  # functions to run on the loop's thread
        self.stats = EngineStats()
        self._wake = threading.Condition()
        self._closed = False
        self._failed: str | None = None  # why the loop died, if it did
        self._thread = threading.Thread(target=self._run, name="llama-batch", daemon=True)
        self._thread.start()

    # --- the callers' side -------------------------------------------------------------------------------
    def submit(self, prompt: list[int], *, grammar: str | None, temperature: float, top_p: float, seed: int,
               max_tokens: int) -> Job:
        """Queue one request; its ``future`` resolves to a :class:`Completion` (or raises CallFailed or
        Interrupted). A caller that stops waiting sets ``abandoned`` and the engine frees its slot."""
        if len(prompt) >= self.n_ctx:
            raise PromptTooLong(f"embedded model rejected the request: the prompt is {len(prompt)} tokens, "
                             f"the context {self.n_ctx}")
        job = Job(prompt=prompt, grammar=grammar, temperature=temperature, top_p=top_p, seed=seed,
                  max_tokens=max(1, min(max_tokens, self.n_ctx - len(prompt))))
        with self._wake:
            if self._failed is not None:
                raise CallFailed(self._failed)
            if self._closed:
                raise Interrupted("the embedded model is shut down")
            self.queue.append(job)
            self._wake.notify()
        return job

    def close(self) -> None:
        """Stop the loop: queued and running requests end with Interrupted."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    def call(self, fn) -> Future:
        """Run ``fn(engine)`` on the loop's thread between two steps (the context is not thread-safe)."""
        future: Future = Future()
        with self._wake:
            if self._closed:
                raise Interrupted("the embedded model is shut down")
            self.calls.append((fn, future))
            self._wake.notify()
        return future

    def _run_calls(self) -> None:
        while True:
            with self._wake:
                if not self.calls:
                    return
                fn, future = self.calls.popleft()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(self))
                except Exception as exc:  # handed to the caller
                    future.set_exception(exc)

    def measure(self, *, prompt_tokens: int = 192, steps: int = 12, widths: tuple[int, ...] | None = None) -> dict:
        """This machine's speeds on this model: prompt tokens/s, and seconds per decoding pass at each width.

        Runs on the loop's thread (``engine.call(BatchEngine.measure).result()``) while no request is under way:
        one prompt is evaluated, its KV copied to every slot, then ``steps`` passes are decoded at each width,
        each row sampled by a request's sampler chain (penalties over the vocabulary, top-k, top-p: a real
        run pays for them on every token, more of them the wider the pass). The slots are emptied afterwards.
        """
        if self._active():
            raise RuntimeError("the engine is busy")
        widths = widths or tuple(sorted({1, 2, 4, 8, self.n_slots} & set(range(1, self.n_slots + 1))))
        tokens = [self.model.token_bos() if i == 0 else 1000 + (i * 37) % 20000 for i in range(prompt_tokens)]
        lib, batch = self.lib, self.batch
        lib.llama_memory_clear(self.memory, True)
        for slot in self.slots:
            slot.tokens = []
        self._one_pass(1, 0)  # the first pass allocates the graph: not part of the measure
        lib.llama_memory_clear(self.memory, True)
        started = time.perf_counter()
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, i, 1, False
            batch.seq_id[i][0] = 0
        batch.logits[len(tokens) - 1] = True
        self._decode()
        prompt_s = time.perf_counter() - started
        for slot in self.slots[1:]:
            lib.llama_memory_seq_cp(self.memory, 0, slot.seq, -1, -1)
        self._one_pass(widths[-1], prompt_tokens)  # applies the copies; warms the wider graphs
        step_s = {}
        jobs = [Job(prompt=[], grammar=None, temperature=0.7, top_p=0.95, seed=i, max_tokens=steps)
                for i in range(widths[-1])]
        for job in jobs:
            self._make_samplers(job)
        try:
            for width in widths:
                started = time.perf_counter()
                for step in range(steps):
                    self._one_pass(width, prompt_tokens + 1 + step)
                    for row in range(width):
                        lib.llama_sampler_sample(jobs[row].chain, self.ctx, row)
                step_s[width] = (time.perf_counter() - started) / steps
                for slot in self.slots:
                    lib.llama_memory_seq_rm(self.memory, slot.seq, prompt_tokens + 1, -1)
        finally:
            for job in jobs:
                lib.llama_sampler_free(job.chain)
        lib.llama_memory_clear(self.memory, True)
        return {"prompt_tokens_per_s": prompt_tokens / prompt_s, "step_s": step_s}

    def _one_pass(self, width: int, pos: int) -> None:
        batch = self.batch
        batch.n_tokens = width
        for i in range(width):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = 1000 + i, pos, 1, True
            batch.seq_id[i][0] = i
        self._decode()

    def tokenize(self, text: str, *, add_special: bool) -> list[int]:
        """The prompt's tokens (special tokens parsed, as the chat template writes them; ``add_special``: let
        the vocabulary add its BOS when the template did not)."""
        return self.model.tokenize(text.encode("utf-8"), add_bos=add_special, special=True)

    # --- the loop ----------------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                with self._wake:
                    while not self._closed and not self.queue and not self.calls and not self._active():
                        self._wake.wait(timeout=0.5)
                    if self._closed:
                        break
                self._run_calls()
                started = time.perf_counter()
                self._step()
                self.stats.busy_s += time.perf_counter() - started
        except BaseException as exc:  # a decode failure ends every request with its reason
            log.exception("embedded model loop failed")
            with self._wake:
                self._closed, self._failed = True, f"embedded model failed: {type(exc).__name__}: {exc}"
            self._fail_all(CallFailed(self._failed))
            return
        self._fail_all(Interrupted("the embedded model is shut down"))

    def _active(self) -> list[Slot]:
        return [s for s in self.slots if s.job is not None]

    def _step(self) -> None:
        stopped = Runtime.get().stopped
        if stopped is not None:
            self._fail_all(Interrupted(stopped))
            return
        for slot in self._active():
            if slot.job.abandoned:  # its caller gave up (a timeout, a cancelled task)
                self._finish(slot, Interrupted("the caller stopped waiting"))
        self._admit()
        self._compact()
        active = [s for s in self._active() if s.job.pending is not None]
        if not active:
            return
        self.stats.ubatches += 1 + sum(b.seq != a.seq + 1 for a, b in zip(active, active[1:], strict=False))
        batch = self.batch
        batch.n_tokens = len(active)
        for i, slot in enumerate(active):
            batch.token[i] = slot.job.pending
            batch.pos[i] = len(slot.tokens)
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = slot.seq
            batch.logits[i] = True
        started = time.perf_counter()
        self._decode()
        self.stats.decode_steps += 1
        self.stats.widths += len(active)
        for i, slot in enumerate(active):
            slot.tokens.append(slot.job.pending)
            slot.job.pending = None
            self._advance(slot, i)
        self.stats.decode_s += time.perf_counter() - started

    def _admit(self) -> None:
        """Move queued jobs into free slots, evaluate their prompts and sample each one's first token."""
        while True:
            with self._wake:
                free = [s for s in self.slots if s.job is None]
                if not self.queue or not free:
                    return
                job = self.queue.popleft()
            if not job.future.set_running_or_notify_cancel():
                continue  # cancelled while queued
            if job.abandoned or Runtime.get().stopped is not None:  # given up while queued, or the run stops
                job.future.set_exception(Interrupted(Runtime.get().stopped or "the caller stopped waiting"))
                continue
            slot, keep = self._place(job, free)
            slot.job, slot.used_at = job, time.monotonic()
            try:
                self._make_samplers(job)
            except CallFailed as exc:
                self._finish(slot, exc)
                continue
            started = time.perf_counter()
            rest, last_row = job.prompt[keep:], 0
            job.evaluated = len(rest)
            for start in range(0, len(rest), self.n_batch):
                chunk = rest[start:start + self.n_batch]
                self.batch.n_tokens = len(chunk)
                for i, token in enumerate(chunk):
                    self.batch.token[i] = token
                    self.batch.pos[i] = len(slot.tokens) + i
                    self.batch.n_seq_id[i] = 1
                    self.batch.seq_id[i][0] = slot.seq
                    self.batch.logits[i] = False
                last = start + len(chunk) >= len(rest)
                self.batch.logits[len(chunk) - 1] = last
                self._decode()
                slot.tokens.extend(chunk)
                last_row = len(chunk) - 1
            self.stats.prompt_tokens += len(job.prompt)
            self.stats.prompt_evaluated += len(rest)
            self._advance(slot, last_row)
            self.stats.prefill_s += time.perf_counter() - started

    def _place(self, job: Job, free: list[Slot]) -> tuple[Slot, int]:
        """The free slot for ``job`` and how many of its prompt tokens are already in that slot's KV.

        The lowest free slot, so the sequences under way stay in consecutive slots: llama.cpp evaluates a batch
        over separate KV streams one run of consecutive sequence ids at a time, so every gap costs a whole
        extra pass over the weights. When another slot, busy or free, shares a longer prefix with the prompt
        by ``COPY_MIN`` tokens or more, its KV stream is copied into the chosen slot (one buffer copy, the
        cost of evaluating a few tokens) and cut back to the shared prefix: a persona's calls of one stage
        share their instructions and persona lines, and a re-ask shares all of its first ask but the note at
        the end.
        """
        slot = min(free, key=lambda s: s.seq)
        keep = common_prefix(slot.tokens, job.prompt)
        donor = max(self.slots, key=lambda s: common_prefix(s.tokens, job.prompt))
        shared = common_prefix(donor.tokens, job.prompt)
        if donor is not slot and shared >= keep + COPY_MIN:
            self.lib.llama_memory_seq_cp(self.memory, donor.seq, slot.seq, -1, -1)  # applied at the next decode
            slot.tokens = list(donor.tokens)
            keep = shared
            self.stats.prefix_copies += 1
        keep = min(keep, len(job.prompt) - 1)  # evaluate at least one token: its logits start the reply
        self.lib.llama_memory_seq_rm(self.memory, slot.seq, keep, -1)
        del slot.tokens[keep:]
        return slot, keep

    def _compact(self) -> None:
        """Close the gaps between the sequences under way: while a free slot lies below the highest busy one,
        that one's KV stream is copied down (applied at the next decode) and its job moves with it. A gap
        would split every decoding pass in two graph evaluations (see ``_place``); a copy costs about as much
        as evaluating a few tokens. The vacated slot keeps its tokens as a cached prefix for reuse."""
        while True:
            free = [s for s in self.slots if s.job is None]
            busy = [s for s in self.slots if s.job is not None]
            if not free or not busy or free[0].seq > busy[-1].seq:
                return
            low, high = free[0], busy[-1]
            self.lib.llama_memory_seq_cp(self.memory, high.seq, low.seq, -1, -1)
            low.tokens, low.job, low.used_at = list(high.tokens), high.job, high.used_at
            high.job = None
            self.stats.moves += 1

    def _decode(self) -> None:
        code = self.lib.llama_decode(self.ctx, self.batch)
        if code != 0:
            raise RuntimeError(f"llama_decode returned {code}")

    def _advance(self, slot: Slot, index: int) -> None:
        """Sample the slot's next token from row ``index`` and end its job when it is done."""
        job = slot.job
        token = self._sample(job, index)
        if self.lib.llama_vocab_is_eog(self.vocab, token):
            self._finish(slot, "stop")
            return
        job.generated.append(token)
        self.stats.generated += 1
        n = len(job.generated)
        if n >= job.max_tokens or len(slot.tokens) + 1 >= self.n_ctx:
            self._finish(slot, "length")
        elif n % GUARD_EVERY == 0 and looping(job.generated):
            self._finish(slot, "repetition")
        else:
            job.pending = token

    def _finish(self, slot: Slot, outcome: str | BaseException) -> None:
        job = slot.job
        self._release(slot)
        if job.future.done():
            return
        if isinstance(outcome, BaseException):
            job.future.set_exception(outcome)
            return
        text = self.model.detokenize(job.generated, special=False).decode("utf-8", errors="ignore")
        job.future.set_result(Completion(text=text, finish_reason=outcome, prompt_tokens=len(job.prompt),
                                         completion_tokens=len(job.generated), prompt_evaluated=job.evaluated))

    def _release(self, slot: Slot) -> None:
        job, slot.job = slot.job, None
        if job is None:
            return
        for sampler in (job.chain, job.gsampler):
            if sampler:
                self.lib.llama_sampler_free(sampler)
        job.chain = job.gsampler = None
        job.pending = None

    def _fail_all(self, exc: BaseException) -> None:
        for slot in self._active():
            job = slot.job
            self._release(slot)
            if not job.future.done():
                job.future.set_exception(exc)
        with self._wake:
            queued, self.queue = list(self.queue), deque()
        for job in queued:
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(exc)
