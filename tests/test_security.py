"""Security: text never executes as a template, the API key is never written, files follow the umask."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import sys
from pathlib import Path

import jinja2
import pytest
from pydantic import BaseModel

import pipeline.llm.fake
from pipeline.config import load_config
from pipeline.prompting import PromptEnv, PromptSpec
from pipeline.run.jobs import persona_job
from pipeline.run.spec import RunSpec
from pipeline.s1_personas.sample_personas import sample_personas
from schemas.llm import LLMSettings
from tests.support.procs import run_in_group

REPO = Path(__file__).resolve().parents[1]
HOSTILE = ("{{ 7*7 }}", "{% for x in range(10**9) %}", "{{ ''.__class__.__mro__ }}")
PLANTED_KEY = "sk-test-PLANTED-123"


@pytest.fixture
def hostile_model(monkeypatch) -> None:
    """The fake model appends every hostile string to each exchange it writes."""
    original = pipeline.llm.fake._apply

    async def hostile(fault, text, request):
        reply = await original(fault, text, request)
        if not request.output.__name__.startswith(("ExchangeDraft", "SessionDraft")):
            return reply
        data = json.loads(reply.text)
        for exchange in data.get("exchanges", [data]):
            exchange.update({k: f"{v} {' '.join(HOSTILE)}" for k, v in exchange.items()})
        return reply.model_copy(update={"text": json.dumps(data)})

    monkeypatch.setattr(pipeline.llm.fake, "_apply", hostile)


def test_hostile_persona_and_model_text_stay_literal(tmp_path, hostile_model):
    """Template syntax in a PersonaHub seed and in model replies is stored and re-sent verbatim, never evaluated."""
    seeds = tmp_path / "seeds.jsonl"
    seed_text = f"A night-shift nurse who types {HOSTILE[0]} and {HOSTILE[1]} and {HOSTILE[2]} into forms."
    seeds.write_text(json.dumps({"persona": seed_text}) + "\n", encoding="utf-8")
    config = load_config("smoke", n_personas=1, personas={"source": "personahub", "personahub_path": str(seeds)})
    cache = tmp_path / "cache" / "llm.sqlite"
    spec = RunSpec(config=config, llm=LLMSettings(llm="fake", cache_path=cache), outputs=tmp_path / "out")
    (seed,) = sample_personas(1, run_seed=config.seed, settings=config.personas)
    text = persona_job(seed, spec).result.text
    assert text.persona.seed_text == seed_text and seed_text in text.persona.profile
    turns = [t.content for s in text.sessions for t in s.turns]
    # a reply carrying template syntax is refused as prompt debris (pipeline/checks/quality.py) and written by code
    assert turns and not any(h in c for c in turns for h in HOSTILE)
    assert text.stats.origin["user_turn"].code >= len(text.sessions)
    prompts = [m["content"] for (request,) in _requests(cache) for m in json.loads(request)]
    assert any(seed_text in p for p in prompts)  # the seed is sent as data
    assert sum(text.persona.profile in p for p in prompts) > 10  # so is the model's profile, in later stages
    everything = "\n".join([text.persona.profile, *turns, *prompts])
    assert "<class" not in everything


def _requests(cache: Path) -> list[tuple[str]]:
    with sqlite3.connect(cache) as db:
        return db.execute("SELECT request FROM calls ORDER BY created_at").fetchall()


class Empty(BaseModel):
    """A context without fields."""


@pytest.mark.parametrize(("body", "error"), [
    ("{{ ''.__class__.__mro__ }}", jinja2.exceptions.SecurityError),
    ("{% for x in range(10**9) %}x{% endfor %}", OverflowError),
    ("{{ cycler.__init__.__globals__ }}", jinja2.exceptions.SecurityError),
])
def test_sandbox_stops_a_hostile_template(tmp_path, body, error):
    """Even a template author cannot reach Python internals or run an unbounded loop."""
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "t.jinja").write_text(f"{{% block system %}}hi{{% endblock %}}{{% block user %}}{body}"
                                               "{% endblock %}", encoding="utf-8")
    spec = PromptSpec(name="evil", template="evil/t.jinja", context=Empty, output=Empty)
    with pytest.raises(error):
        PromptEnv(tmp_path).render(spec, Empty())


@pytest.mark.parametrize("umask", [pytest.param(0o022, marks=pytest.mark.slow), 0o077])
def test_api_key_never_written_and_files_follow_umask(tmp_path, umask):
    """A real-key run against the loopback server: the key is in no produced file, modes follow the umask."""
    from tests.support.openai_server import OpenAIServer

    with OpenAIServer(api_key=PLANTED_KEY) as server:
        env = {**os.environ, "OPENAI_API_KEY": PLANTED_KEY, "OPENAI_BASE_URL": server.base_url,
               "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_LOGGING_LEVEL": "DEBUG"}
        code = _run_cli(tmp_path, env, umask)
        assert server.requests > 0
    assert code == 0, (tmp_path / "run.log").read_text()[-2000:]
    produced = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()]
    assert len(produced) > 15 and any(p.name == "manifest.json" for p in produced)
    assert [p for p in produced if PLANTED_KEY.encode() in p.read_bytes()] == []
    for path in [*(tmp_path / "out").rglob("*"), *(tmp_path / "cache").rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if not path.is_symlink():
            allowed = (0o777 if path.is_dir() else 0o666) & ~umask
            assert mode & ~allowed == 0, (path, oct(mode))
            assert mode & stat.S_IROTH or umask & 0o004, (path, oct(mode))  # not stricter than the umask either


def _run_cli(tmp: Path, env: dict, umask: int) -> int:
    """`personagen generate` (1 persona, openai:test-model) under `umask`, in its own process group."""
    args = [sys.executable, "-m", "pipeline.cli", "generate", "--profile", "smoke", "--n", "1", "--workers", "2",
            "--llm", "openai:test-model", "--outputs", str(tmp / "out"), "--cache", str(tmp / "cache" / "llm.sqlite")]
    return run_in_group(args, tmp / "run.log", env=env, preexec_fn=lambda: os.umask(umask))


class EchoingServer:
    """The loopback server, answering chat requests with ``status`` and an error that quotes the request's
    Authorization header (as some servers and proxies do); /models answers normally."""

    def __new__(cls, status: int, **kwargs):
        from tests.support.openai_server import OpenAIServer

        class Echo(OpenAIServer):
            async def _route(self, method, path, headers, body):
                if method == "POST" and path.rstrip("/").endswith("/chat/completions"):
                    self.requests += 1
                    said = f"Incorrect API key provided: {headers.get('authorization')}"
                    return status, {"error": {"message": said, "type": "invalid_request_error"}}, {}
                return await super()._route(method, path, headers, body)

        return Echo(**kwargs)


def _everything(result, *folders: Path) -> str:
    """What a command printed and every file under ``folders`` (the cache's SQLite included), as text."""
    parts = [result.stdout, result.stderr]
    for folder in folders:
        parts += [p.read_bytes().decode("utf-8", "replace") for p in folder.rglob("*") if p.is_file()]
    return "\n".join(parts)


def _cli(tmp: Path, command: str, env: dict):
    from typer.testing import CliRunner

    from pipeline.cli.app import app

    args = [command, "--profile", "smoke", "--n", "1", "--llm", "openai:test-model",
            "--cache", str(tmp / "cache" / "llm.sqlite")]
    args += ["--outputs", str(tmp / "out"), "--workers", "1"] if command == "generate" else ["--out", str(tmp / "out")]
    return CliRunner().invoke(app, args, env=env)


@pytest.mark.parametrize("key", [f"{PLANTED_KEY}\n", f"{PLANTED_KEY} ", f"{PLANTED_KEY}é", f"\t{PLANTED_KEY}"])
def test_a_key_of_the_wrong_form_is_one_line_naming_the_variable_never_the_value(tmp_path, key):
    from tests.support.openai_server import OpenAIServer

    with OpenAIServer() as server:
        result = _cli(tmp_path, "generate", {"OPENAI_API_KEY": key, "OPENAI_BASE_URL": server.base_url})
        assert server.requests == 0
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "OPENAI_API_KEY" in lines[0], result.output
    assert "Traceback" not in result.output
    assert PLANTED_KEY not in _everything(result, tmp_path)


def test_a_key_is_never_printed_when_the_server_is_down(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = _cli(tmp_path, "generate", {"OPENAI_API_KEY": PLANTED_KEY, "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"})
    assert result.exit_code == 2 and "cannot reach" in result.stderr, result.output
    assert PLANTED_KEY not in _everything(result, tmp_path)


def test_a_401_that_quotes_the_key_is_redacted_from_output_and_cache(tmp_path):
    with EchoingServer(401) as server:
        result = _cli(tmp_path, "text", {"OPENAI_API_KEY": PLANTED_KEY, "OPENAI_BASE_URL": server.base_url})
        assert server.requests > 0
    assert (tmp_path / "cache" / "llm.sqlite").exists()
    everything = _everything(result, tmp_path)
    assert PLANTED_KEY not in everything and "Bearer sk-" not in everything
    assert "[redacted]" in everything


@pytest.mark.parametrize("status", [500, 400])
def test_a_server_error_that_quotes_the_key_is_redacted_from_the_error_and_the_cache(tmp_path, monkeypatch, status):
    from pipeline.llm import LLM
    from pipeline.llm.errors import LLMError

    monkeypatch.setenv("OPENAI_API_KEY", PLANTED_KEY)
    cache = tmp_path / "cache" / "llm.sqlite"
    with EchoingServer(status) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        llm = LLM(LLMSettings(llm="openai:test-model", cache_path=cache, max_retries=1, backoff_s=0))
        with pytest.raises(LLMError) as failed:
            llm.chat([{"role": "user", "content": "hi"}])
        llm.close()
        assert server.requests > 0
    assert PLANTED_KEY not in str(failed.value)
    assert PLANTED_KEY.encode() not in b"".join(p.read_bytes() for p in cache.parent.iterdir())


def test_redact_covers_the_key_its_escapes_sk_tokens_and_bearer_headers(monkeypatch):
    from pipeline.errors import redact

    monkeypatch.setenv("OPENAI_API_KEY", f"{PLANTED_KEY}\n")
    text = redact(f"Illegal header value b'Bearer {PLANTED_KEY}\\n'; key {PLANTED_KEY}; other sk-abcdefgh1234; "
                  "Authorization: Bearer abc.def; task-force stays")
    assert PLANTED_KEY not in text and "abcdefgh1234" not in text and "abc.def" not in text
    assert "task-force stays" in text


def test_redact_hides_every_piece_of_the_key_in_any_case_and_url_credentials(monkeypatch):
    from pipeline.errors import redact

    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-SECRETLEAK0123456789")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://alice:hunter2hunter2@proxy.internal/v1")
    text = redact("bad request for key proj-SECRETLEAK012; lower proj-secretleak0; tail 0123456789 ok; "
                  "password hunter2hunter2 in a log; url http://bob:pw@other.host/v1; short SECRET stays")
    for piece in ("SECRETLEAK", "secretleak", "01234567", "hunter2hunter2", "bob:pw", "alice"):
        assert piece not in text, text
    assert "short SECRET stays" in text and "other.host/v1" in text


class ReflectingServer:
    """The loopback server: a 400 whose message quotes the key without its ``sk-`` prefix and upper-cased, or
    a 200 whose content quotes it."""

    def __new__(cls, status: int):
        from tests.support.openai_server import OpenAIServer, _completion

        class Reflect(OpenAIServer):
            async def _route(self, method, path, headers, body):
                if method == "POST" and path.rstrip("/").endswith("/chat/completions"):
                    self.requests += 1
                    key = headers.get("authorization", "").removeprefix("Bearer sk-")
                    if status == 400:
                        return 400, {"error": {"message": f"bad request for key {key.upper()}",
                                               "type": "invalid_request_error"}}, {}
                    return 200, _completion(json.loads(body), f"Sure. Your key is {key} as asked.", "stop"), {}
                return await super()._route(method, path, headers, body)

        return Reflect()


@pytest.mark.parametrize("status", [400, 200])
def test_a_key_the_server_reflects_is_never_printed_or_stored(tmp_path, monkeypatch, status):
    from pipeline.llm import LLM
    from pipeline.llm.errors import LLMError

    key = "sk-proj-SECRETLEAK0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    cache = tmp_path / "cache" / "llm.sqlite"
    with ReflectingServer(status) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        llm = LLM(LLMSettings(llm="openai:test-model", cache_path=cache, max_retries=0, backoff_s=0))
        said = ""
        try:
            said = llm.chat([{"role": "user", "content": "hi"}])
        except LLMError as exc:
            said = str(exc)
        stored = b"".join(p.read_bytes() for p in cache.parent.iterdir()).decode("utf-8", "replace")
        llm.close()
        assert server.requests > 0
    assert "[redacted]" in str(said) + stored
    for text in (str(said), stored):
        assert "SECRETLEAK" not in text.upper() and "01234567" not in text
