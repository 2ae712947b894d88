"""Sampling one token of a request: its seeded sampler chain (penalties, top-k, top-p, min-p, temperature), and
the JSON-schema grammar applied lazily, as llama.cpp's common sampler does: the chain's pick is checked, and
only a rejected pick is resampled among the allowed ones of the ``SHORTLIST`` likeliest (the whole vocabulary
when none of them is allowed)."""

from __future__ import annotations

import ctypes
import math

import numpy as np

from pipeline.llm.errors import CallFailed
from pipeline.llm.slots import Job

TOP_K, MIN_P = 40, 0.05  # llama-cpp-python's defaults, which the pipeline's earlier single-stream calls used
# A mild repetition penalty over the last 64 tokens: on a smoke run's 30 requests SmolLM2-135M fell into a loop
# 6 times without it and 0 times with it, and 24 replies parsed against 18 (1.2: 15 parsed).
REPEAT_PENALTY, REPEAT_LAST_N = 1.1, 64
SHORTLIST = 256  # candidates a rejected token is resampled among before the whole vocabulary is tried


class Sampling:
    """The engine's sampling half (mixed into :class:`pipeline.llm.engine.BatchEngine`, whose ``lib``, ``ctx``,
    ``vocab``, ``n_vocab``, ``stats`` and scratch arrays it uses)."""

    def _make_samplers(self, job: Job) -> None:
        lib = self.lib
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        if job.temperature <= 0:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
        else:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_penalties(
                self.n_vocab, REPEAT_LAST_N, REPEAT_PENALTY, 0.0, 0.0))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(TOP_K))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_p(job.top_p, 1))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_min_p(MIN_P, 1))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_temp(job.temperature))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_dist(job.seed & 0xFFFFFFFF))
        job.chain = chain
        if job.grammar is not None:
            sampler = lib.llama_sampler_init_grammar(self.vocab, job.grammar.encode("utf-8"), b"root")
            if not sampler:
                raise CallFailed("embedded model: llama.cpp could not parse the reply grammar")
            job.gsampler = sampler

    def _sample(self, job: Job, index: int) -> int:
        """The next token of ``job`` from the logits at batch row ``index``; the grammar is applied lazily."""
        lib = self.lib
        token = lib.llama_sampler_sample(job.chain, self.ctx, index)
        if job.gsampler is None:
            return token
        single = self._single
        single.id, single.logit, single.p = token, 1.0, 0.0
        array = lib.llama_token_data_array(data=ctypes.pointer(single), size=1, selected=-1, sorted=False)
        lib.llama_sampler_apply(job.gsampler, ctypes.byref(array))
        if math.isinf(single.logit):  # the grammar rejects the chain's pick: resample among what it allows
            self.stats.grammar_resamples += 1
            logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(self.ctx, index), shape=(self.n_vocab,))
            # First the SHORTLIST likeliest tokens (the chain keeps at most TOP_K, and min_p drops the unlikely
            # anyway): the grammar checks 256 candidates instead of 49k; the whole vocabulary only when it
            # allows none of them (a structural token the model rates low).
            top = np.argpartition(logits, -SHORTLIST)[-SHORTLIST:]
            short = self._shortlist
            short["id"], short["logit"], short["p"] = top, logits[top], 0.0
            array = lib.llama_token_data_array(
                data=short.ctypes.data_as(lib.llama_token_data_p), size=SHORTLIST, selected=-1, sorted=False)
            lib.llama_sampler_apply(job.gsampler, ctypes.byref(array))
            if np.isfinite(short["logit"]).any():
                lib.llama_sampler_apply(job.chain, ctypes.byref(array))
                token = int(short["id"][array.selected])
                lib.llama_sampler_accept(job.gsampler, token)
                return token
            self.stats.grammar_full += 1
            candidates = self._candidates
            candidates["id"] = np.arange(self.n_vocab, dtype=np.intc)
            candidates["logit"] = logits
            candidates["p"] = 0.0
            array = lib.llama_token_data_array(
                data=candidates.ctypes.data_as(lib.llama_token_data_p), size=self.n_vocab, selected=-1, sorted=False)
            lib.llama_sampler_apply(job.gsampler, ctypes.byref(array))
            lib.llama_sampler_apply(job.chain, ctypes.byref(array))
            token = int(candidates["id"][array.selected])
        lib.llama_sampler_accept(job.gsampler, token)
        return token
