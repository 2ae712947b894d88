"""Bad input to `personagen generate`: one `error:` line naming the culprit, exit 2, nothing published."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from pipeline.cli.app import app

REPO = Path(__file__).resolve().parents[1]
TWO_PERIODS = "periods:\n  - {name: INIT, offset_days: 0}\n  - {name: MONTH, offset_days: 30}\n"


def generate(tmp: Path, *args: str, env: dict | None = None) -> Result:
    """`personagen generate` in-process, into tmp/out with a cache under tmp/cache."""
    base = ["generate", "--outputs", str(tmp / "out"), "--cache", str(tmp / "cache" / "llm.sqlite"), "--workers", "1"]
    return CliRunner().invoke(app, [*base, *args], env=env)


def assert_rejected(result: Result, tmp: Path, *culprits: str) -> str:
    """Exit 2, exactly one stderr line `error: ...` naming every culprit, and no version or `latest`."""
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, (result.exit_code, result.output[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for culprit in culprits:
        assert culprit in lines[0], lines[0]
    out = tmp / "out"
    published = [p for p in out.rglob("*") if p.name == "latest" or p.name.startswith("v0")] if out.exists() else []
    assert published == []
    return lines[0]


def profile(tmp: Path, body: str) -> str:
    """A profile YAML file holding `body`; returns its path."""
    path = tmp / "profile.yaml"
    path.write_text(f"dataset: bad\nn_personas: 1\ntopics: [foodRecommendation]\n{body}", encoding="utf-8")
    return str(path)


PERSONAHUB_FILES = {
    "bad_json": (b'{"persona": "a chef"}\n{"persona": "a pilot",\n', ":2: invalid JSON"),
    "missing_key": (b'{"persona": "a chef"}\n{"name": "a pilot"}\n', ':2: missing key "persona"'),
    "empty": (b"", ": empty file"),
    "binary_garbage": (b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x80" * 8, ":1: not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(PERSONAHUB_FILES))
def test_malformed_personahub_file_names_file_and_line(tmp_path, case):
    content, expected = PERSONAHUB_FILES[case]
    seeds = tmp_path / f"{case}.jsonl"
    seeds.write_bytes(content)
    path = profile(tmp_path, f"personas: {{source: personahub, personahub_path: '{seeds}'}}\n")
    result = generate(tmp_path, "--profile", path, "--llm", "fake")
    assert_rejected(result, tmp_path, f"{seeds}{expected}")


def copied_prompts(tmp: Path, template: str, edit) -> Path:
    """A copy of prompts/ with `template` rewritten by `edit(source) -> source`."""
    root = tmp / "prompts"
    shutil.copytree(REPO / "prompts", root)
    path = root / template
    path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
    return root


def test_template_syntax_error_names_the_template(tmp_path):
    root = copied_prompts(tmp_path, "expand_persona/profile.jinja",
                          lambda s: s.replace("{% endif %}", "{% endiff %}", 1))
    result = generate(tmp_path, "--profile", "smoke", "--llm", "fake", env={"PERSONAGEN_PROMPTS": str(root)})
    assert_rejected(result, tmp_path, "expand_persona/profile.jinja:", "syntax error")


def test_template_with_undefined_variable_names_the_variable(tmp_path):
    root = copied_prompts(tmp_path, "write_sessions/beat.jinja",
                          lambda s: s.replace("{% endblock %}", "{{ favourite_colour }}{% endblock %}", 1))
    result = generate(tmp_path, "--profile", "smoke", "--llm", "fake", env={"PERSONAGEN_PROMPTS": str(root)})
    assert_rejected(result, tmp_path, "write_sessions/beat.jinja:", "'favourite_colour'")


CONFIG_CASES = {
    "unknown_topic": ("topics: [foodRecommendation, underwaterBasketWeaving]\n", "underwaterBasketWeaving"),
    "period_without_offset": (TWO_PERIODS.replace(", offset_days: 30", ""), "periods.1.offset_days"),
    "period_by_bare_name": ("periods: [INIT, NEXT_DECADE]\n", "periods.0"),
    "budget_below_one_session": ("assembly: {budgets: [120]}\n", "assembly.budgets"),
    "absurd_budget": ("assembly: {budgets: [1000000000000]}\n", "assembly.budgets"),
    "no_topics": ("topics: []\n", "topics"),
    "unknown_setting": ("text: {sesions_per_period: 2}\n", "text.sesions_per_period"),
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_bad_config_names_file_and_field(tmp_path, case):
    body, culprit = CONFIG_CASES[case]
    path = profile(tmp_path, body)
    result = generate(tmp_path, "--profile", path, "--llm", "fake")
    assert_rejected(result, tmp_path, culprit)


@pytest.mark.parametrize("n", ["0", "-3", "1000000000"])
def test_absurd_persona_count_is_refused(tmp_path, n):
    result = generate(tmp_path, "--profile", "smoke", "--n", n, "--llm", "fake")
    assert_rejected(result, tmp_path, "n_personas")


def test_unknown_llm_string_lists_the_choices(tmp_path):
    result = generate(tmp_path, "--profile", "smoke", "--llm", "gpt-4o-mini")
    assert_rejected(result, tmp_path, "unknown LLM backend 'gpt-4o-mini'", "openai:<model>")


def test_missing_api_key_says_which_variable(tmp_path):
    result = generate(tmp_path, "--profile", "smoke", "--llm", "openai:gpt-4o-mini", env={"OPENAI_API_KEY": None})
    assert_rejected(result, tmp_path, "OPENAI_API_KEY is not set", "openai:gpt-4o-mini")


def test_unreachable_base_url_names_the_url(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    env = {"OPENAI_API_KEY": "sk-test-unused", "OPENAI_BASE_URL": url}
    result = generate(tmp_path, "--profile", "smoke", "--llm", "openai:gpt-4o-mini", env=env)
    assert_rejected(result, tmp_path, f"cannot reach OPENAI_BASE_URL {url}")


def test_unknown_profile_lists_the_known_ones(tmp_path):
    result = generate(tmp_path, "--profile", "smok", "--llm", "fake")
    assert_rejected(result, tmp_path, "unknown profile 'smok'", "smoke")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("option", ["--workers", "--keep"])
def test_zero_workers_or_keep_is_refused_up_front(tmp_path, option):
    result = generate(tmp_path, "--profile", "smoke", "--llm", "fake", option, "0")
    assert_rejected(result, tmp_path, f"{option} 0")


@pytest.mark.parametrize(("args", "culprit"), [(["--runner", "dask", "--dask-timeout", "0"], "--dask-timeout 0"),
                                             (["--dask-address", "tcp://127.0.0.1:8786"], "--runner dask")])
def test_dask_options_are_checked_up_front(tmp_path, args, culprit):
    result = generate(tmp_path, "--profile", "smoke", "--llm", "fake", *args)
    assert_rejected(result, tmp_path, culprit)


def test_a_profile_that_is_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_bytes(b"dataset: bad\nn_personas: 1\n# caf\xe9\n")
    result = generate(tmp_path, "--profile", str(path), "--llm", "fake")
    assert_rejected(result, tmp_path, f"{path}:3: not UTF-8 text (byte 32)")


def test_a_template_that_is_not_utf8_names_the_template(tmp_path):
    from pipeline.cli.app import app

    root = copied_prompts(tmp_path, "write_sessions/beat.jinja", lambda s: s)
    path = root / "write_sessions" / "beat.jinja"
    path.write_bytes(path.read_bytes().replace(b"Topic:", b"Th\xe8me:", 1))
    result = generate(tmp_path, "--profile", "smoke", "--llm", "fake", env={"PERSONAGEN_PROMPTS": str(root)})
    assert_rejected(result, tmp_path, "write_sessions/beat.jinja:7: not UTF-8 text")
    checked = CliRunner().invoke(app, ["prompts", "check"], env={"PERSONAGEN_PROMPTS": str(root)})
    assert checked.exit_code != 0 and "Traceback" not in checked.output
    assert "write_sessions/beat.jinja:7: not UTF-8 text" in checked.output, checked.output


def test_a_template_error_in_a_branch_the_lint_does_not_render_names_template_and_line(tmp_path):
    """The lint's sample session has no routine beat; a session with one fails mid-run, naming the line."""
    root = copied_prompts(tmp_path, "write_sessions/session.jinja", lambda s: s.replace(
        "mentions in passing that they {{ beat.event }}", "mentions in passing that they {{ beat.event.nope.deeper }}", 1))
    busy = profile(tmp_path, "timeline: {routine_per_period: 3.0}\n")  # routine beats in every period
    result = generate(tmp_path, "--profile", busy, "--llm", "fake", env={"PERSONAGEN_PROMPTS": str(root)})
    assert_rejected(result, tmp_path, "write_sessions/session.jinja:10: UndefinedError")


def test_a_huge_personahub_persona_names_file_and_line(tmp_path):
    seeds = tmp_path / "huge.jsonl"
    seeds.write_text('{"persona": "a chef"}\n{"persona": "' + "x" * 1_000_000 + '"}\n', encoding="utf-8")
    path = profile(tmp_path, f"personas: {{source: personahub, personahub_path: '{seeds}'}}\n")
    result = generate(tmp_path, "--profile", path, "--llm", "fake")
    assert_rejected(result, tmp_path, f"{seeds}:2: \"persona\" is 1,000,000 characters; at most 2,000")


def test_a_budget_too_narrow_to_assemble_is_refused_at_load(tmp_path):
    result = generate(tmp_path, "--profile", profile(tmp_path, "assembly: {budgets: [1000]}\n"), "--llm", "fake")
    assert_rejected(result, tmp_path, "assembly.budgets: a 1,000-token context must end within 20 tokens")


def test_a_server_answering_html_is_one_line(tmp_path):
    from tests.support.openai_server import OpenAIServer

    with OpenAIServer(html=True) as server:
        url = server.base_url
        result = generate(tmp_path, "--profile", "smoke", "--llm", "openai:test-model",
                          env={"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": url})
    assert_rejected(result, tmp_path, f"{url}/models answered HTTP 200 with text/html",
                    'an HTML page titled "Sign in"')


def test_a_base_url_server_needs_no_api_key(tmp_path):
    from tests.support.openai_server import OpenAIServer

    with OpenAIServer() as server:
        env = {"OPENAI_API_KEY": None, "OPENAI_BASE_URL": server.base_url}
        result = generate(tmp_path, "--profile", "smoke", "--llm", "openai:test-model", "--dry-run", env=env)
    assert result.exit_code == 0, result.output[-2000:]
    assert "expected LLM calls" in result.output


@pytest.mark.parametrize("fault", ["empty_body", "not_json", "no_choices"])
def test_a_bad_200_reply_during_the_plan_is_retried_not_a_traceback(tmp_path, fault):
    from tests.support.openai_server import OpenAIServer

    with OpenAIServer() as server:
        server.schedule(0, fault)  # the plan's probe call
        env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": server.base_url}
        result = generate(tmp_path, "--profile", "smoke", "--llm", "openai:test-model", "--dry-run", env=env)
        assert server.requests >= 2  # asked again
    assert result.exit_code == 0, result.output[-2000:]
    assert "Traceback" not in result.output and "expected LLM calls" in result.output


@pytest.mark.parametrize("fault", ["empty_body", "not_json", "no_choices"])
def test_a_bad_200_reply_is_a_transient_error_of_one_line(tmp_path, monkeypatch, fault):
    from pipeline.llm import LLM
    from pipeline.llm.errors import TransportFailed
    from pipeline.specs import ALL_SPECS
    from schemas.llm import LLMSettings, PingContext
    from tests.support.openai_server import OpenAIServer

    with OpenAIServer() as server:
        for index in range(3):
            server.schedule(index, fault)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        llm = LLM(LLMSettings(llm="openai:test-model", cache_path=tmp_path / "c.sqlite", max_retries=2, backoff_s=0))
        with pytest.raises(TransportFailed, match="answered 200 with") as failed:
            llm.generate(ALL_SPECS["gateway.ping"], PingContext(persona="a nurse", topic="books"))
        llm.close()
    assert "\n" not in str(failed.value) and llm.usage_summary().total.retries == 2


def one_error_line(result: Result, code: int = 2, *needles: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == code, (result.exit_code, result.output[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output and "Aborted" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(("edit", "culprit"), [(lambda path: path.write_bytes(b"\xff\xfe bad"), "not UTF-8"),
                                               (lambda path: path.write_text("{% block system %}x{% endblok %}"),
                                                "syntax error")])
def test_prompts_list_and_render_on_a_broken_template_are_one_line(tmp_path, edit, culprit):
    root = tmp_path / "prompts"
    shutil.copytree(REPO / "prompts", root)
    edit(root / "gateway" / "ping.jinja")
    runner = CliRunner()
    one_error_line(runner.invoke(app, ["prompts", "render", "gateway.ping", "--prompts-dir", str(root)]), 2,
                   "ping.jinja", culprit)
    if culprit == "not UTF-8":
        one_error_line(runner.invoke(app, ["prompts", "list", "--prompts-dir", str(root)]), 2, "ping.jinja", culprit)


def test_prompts_render_with_bad_context_json_is_one_line(tmp_path):
    bad = tmp_path / "ctx.json"
    bad.write_text("{bad", encoding="utf-8")
    one_error_line(CliRunner().invoke(app, ["prompts", "render", "gateway.ping", "--context", str(bad)]), 2,
                   f"--context {bad}", "Invalid JSON")


@pytest.mark.parametrize("command", ["plan", "export"])
def test_sigterm_during_plan_or_export_is_one_line_like_ctrl_c(tmp_path, monkeypatch, command):
    """SIGTERM (really delivered) ends the command in one line with exit 143, Ctrl-C in the same line with 130."""
    import os
    import signal

    import pipeline.dataset.export
    import pipeline.run.plan
    from tests.support.eval_data import publish_tiny

    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM was not raised")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    if command == "plan":
        args, module, name = ["plan", "--n", "1", "--profile", "smoke", "--out", str(tmp_path / "plan")], \
            pipeline.run.plan, "build_plan"
    else:
        version = publish_tiny(tmp_path / "out")
        args, module, name = ["export", "jsonl", str(version), "--out", str(tmp_path / "all.jsonl")], \
            pipeline.dataset.export, "jsonl_records"
    previous = signal.getsignal(signal.SIGTERM)
    for stop, code in ((terminated, 143), (interrupted, 130)):
        monkeypatch.setattr(module, name, stop)
        line = one_error_line(CliRunner().invoke(app, args), code)
        assert "nothing half-written" in line
    assert signal.getsignal(signal.SIGTERM) is previous  # the handler is the command's only
    assert not (tmp_path / "plan").exists() and not (tmp_path / "all.jsonl").exists()


def test_a_budget_below_one_topics_own_text_is_refused_at_the_plan(tmp_path):
    """default.yaml with budgets [1500]: refused before the run's calls, not after all of them."""
    import yaml

    config = yaml.safe_load((REPO / "pipeline" / "config" / "default.yaml").read_text(encoding="utf-8"))
    config["assembly"]["budgets"] = [1500]
    path = tmp_path / "narrow.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = generate(tmp_path, "--profile", str(path), "--n", "1", "--llm", "fake")
    assert_rejected(result, tmp_path, "assembly.budgets: a 1,500-token context cannot hold one topic")
    for profile_name in ("smoke", "default", "paper"):  # the shipped profiles pass
        ok = generate(tmp_path / profile_name, "--profile", profile_name, "--n", "1", "--llm", "fake", "--dry-run")
        assert ok.exit_code == 0, ok.output[-2000:]


@pytest.mark.parametrize(("body", "culprit"), [
    ("start_date: 9999-12-01\n", "start_date: 9999-12-01"),
    (TWO_PERIODS.replace("offset_days: 30", "offset_days: 1000000000"), "periods.1.offset_days"),
    ("personas: {source: personahub, personahub_path: \"a\\0b\"}\n", "NUL"),
])
def test_config_values_that_broke_the_plan_are_one_line(tmp_path, body, culprit):
    result = CliRunner().invoke(app, ["plan", "--profile", profile(tmp_path, body), "--out", str(tmp_path / "p")])
    one_error_line(result, 2, culprit)


def test_a_profile_path_that_is_a_folder_a_bad_base_url_and_a_bad_fake_option_are_one_line(tmp_path):
    folder = tmp_path / "p.yaml"
    folder.mkdir()
    one_error_line(generate(tmp_path, "--profile", str(folder), "--llm", "fake"), 2, "is a folder")
    result = generate(tmp_path, "--profile", "smoke", "--llm", "openai:x", env={"OPENAI_BASE_URL": "http://[::1"})
    one_error_line(result, 2, "OPENAI_BASE_URL", "not a URL")
    one_error_line(generate(tmp_path, "--profile", "smoke", "--llm", "fake?latency_s=abc"), 2, "latency_s='abc'")


def test_a_300_character_out_name_is_one_line(tmp_path):
    from tests.support.eval_data import publish_tiny

    long = tmp_path / ("a" * 300)
    one_error_line(CliRunner().invoke(app, ["plan", "--n", "1", "--profile", "smoke", "--out", str(long)]), 2,
                   "File name too long")
    version = publish_tiny(tmp_path / "out")
    for args in (["jsonl", "--out", f"{long}.jsonl"], ["personamem", "--out", str(long)],
                 ["longmemeval", "--out", str(long)]):
        one_error_line(CliRunner().invoke(app, ["export", args[0], str(version), *args[1:]]), 2, "too long")


def test_show_on_a_damaged_plan_table_is_one_line(tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "plan"
    assert CliRunner().invoke(app, ["plan", "--n", "1", "--profile", "smoke", "--out", str(out)]).exit_code == 0
    persona_id = pq.read_table(out / "personas.parquet").column("persona_id")[0].as_py()
    events = out / "events.parquet"
    events.write_bytes(events.read_bytes()[: events.stat().st_size // 2])
    one_error_line(CliRunner().invoke(app, ["show", persona_id, "--plan", str(out)]), 2, "damaged")


def test_a_dead_prefect_api_url_is_one_line_before_the_run(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(REPO), "PREFECT_API_URL": f"http://127.0.0.1:{closed_port()}/api",
           "PREFECT_HOME": str(tmp_path / "prefect")}
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "generate", "--profile", "smoke", "--n", "1",
                           "--llm", "fake", "--outputs", str(tmp_path / "out"),
                           "--cache", str(tmp_path / "cache" / "llm.sqlite")],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "PREFECT_API_URL" in lines[0], done.stderr[-2000:]
    assert "cannot reach the Prefect API" in lines[0] and not list((tmp_path / "out").rglob("v0*"))
