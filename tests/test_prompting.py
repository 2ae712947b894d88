"""Prompt templates: strict sandboxed rendering, fingerprints, the lint, and the prompts CLI."""

from __future__ import annotations

import json

import jinja2
import pytest
from jinja2.sandbox import SecurityError
from pydantic import BaseModel
from typer.testing import CliRunner

from pipeline.cli.prompts import prompts_app
from pipeline.prompting import PromptEnv, PromptSpec, check_specs
from pipeline.specs import ALL_SPECS, PING
from schemas.llm import PingContext
from tests.support.llm_helpers import SPEC, TopicContext, TopicNote, write_prompts


def test_persona_with_jinja_syntax_renders_literally():
    persona = "I am {{ 7*7 }} years old {% for x in range(3) %}loop{% endfor %} {# hi #}"
    messages = PromptEnv().render(PING, PingContext(persona=persona, topic="books"))
    assert messages[1].content == f"About me: {persona}\nSuggest one books item I would enjoy."
    assert "49" not in messages[1].content


def test_render_gives_system_then_user_message(tmp_path):
    messages = write_prompts(tmp_path).render(SPEC, TopicContext(name="Ada", topic="tea"))
    assert [(m.role, m.content) for m in messages] == [("system", "You help Ada."), ("user", "Tell me about tea.")]


def test_render_rejects_wrong_context_type(tmp_path):
    with pytest.raises(TypeError, match="TopicContext"):
        write_prompts(tmp_path).render(SPEC, PingContext(persona="p", topic="t"))


def test_undefined_variable_raises(tmp_path):
    env = write_prompts(tmp_path, "{% block system %}{{ nope }}{% endblock %}{% block user %}x{% endblock %}")
    with pytest.raises(jinja2.UndefinedError):
        env.render(SPEC, TopicContext(name="a", topic="b"))


def test_sandbox_blocks_unsafe_attributes(tmp_path):
    env = write_prompts(tmp_path, "{% block system %}{{ name.__class__.__mro__ }}{% endblock %}"
                                  "{% block user %}{{ topic }}{% endblock %}")
    with pytest.raises(SecurityError):
        env.render(SPEC, TopicContext(name="a", topic="b"))


def test_fingerprint_covers_included_templates_only(tmp_path):
    env = write_prompts(tmp_path, '{% block system %}{% include "test/_part.jinja" %}{% endblock %}'
                                  "{% block user %}{{ topic }}{% endblock %}")
    (tmp_path / "test" / "_part.jinja").write_text("You help {{ name }}.")
    (tmp_path / "test" / "_other.jinja").write_text("unrelated")
    before = env.fingerprint(SPEC.template)
    (tmp_path / "test" / "_other.jinja").write_text("changed")
    assert env.fingerprint(SPEC.template) == before
    (tmp_path / "test" / "_part.jinja").write_text("You assist {{ name }}.")
    assert env.fingerprint(SPEC.template) != before
    assert env.render(SPEC, TopicContext(name="Ada", topic="tea"))[0].content == "You assist Ada."


def test_check_accepts_the_repository_specs():
    assert check_specs(ALL_SPECS.values()) == []


def test_check_reports_unknown_and_unused_variables_with_lines(tmp_path):
    env = write_prompts(tmp_path, "{% block system %}\nHi.\n{% endblock %}\n{% block user %}\n"
                                  "{{ topic }} and {{ mood }}\n{% endblock %}\n")
    messages = [str(p) for p in check_specs([SPEC], env)]
    assert any(m.endswith("topic.jinja:5: 'mood' is not a field of TopicContext") for m in messages)
    assert any(m.endswith("topic.jinja:1: field 'name' of TopicContext is never used") for m in messages)


def test_check_counts_variables_used_by_includes(tmp_path):
    env = write_prompts(tmp_path, '{% block system %}{% include "test/_part.jinja" %}{% endblock %}'
                                  "{% block user %}{{ topic }}{% endblock %}")
    (tmp_path / "test" / "_part.jinja").write_text("You help {{ name }}.")
    assert check_specs([SPEC], env) == []


def test_check_reports_syntax_error_with_line(tmp_path):
    env = write_prompts(tmp_path, "{% block system %}\nHi {{ name }\n{% endblock %}")
    [problem] = check_specs([SPEC], env)
    assert problem.line == 2 and "syntax error" in problem.message


def test_check_reports_structure_and_format_prose(tmp_path):
    env = write_prompts(tmp_path, "Preamble\n{% block system %}{{ name }}{% endblock %}\n"
                                  "Reply in JSON about {{ topic }}.\n")
    messages = [p.message for p in check_specs([SPEC], env)]
    assert "missing {% block user %}" in messages
    assert sum("text outside" in m for m in messages) == 2
    assert any(m.startswith("output-format prose") for m in messages)


def test_check_reports_orphan_templates_and_missing_files(tmp_path):
    env = write_prompts(tmp_path)
    (tmp_path / "test" / "orphan.jinja").write_text("{% block system %}{% endblock %}")
    missing = PromptSpec(name="x.y", template="x/y.jinja", context=TopicContext, output=TopicNote)
    messages = [str(p) for p in check_specs([SPEC, missing], env)]
    assert any(m.endswith("orphan.jinja:1: no PromptSpec in pipeline/specs.py uses this template") for m in messages)
    assert any("template not found: x/y.jinja" in m for m in messages)


def test_check_reports_unrenderable_sample(tmp_path):
    class NoExample(BaseModel):
        name: str
        topic: str

    spec = PromptSpec(name="test.topic", template="test/topic.jinja", context=NoExample, output=TopicNote)
    [problem] = check_specs([spec], write_prompts(tmp_path))
    assert "sample context does not render" in problem.message


def test_cli_list_render_and_check():
    runner = CliRunner()
    listed = runner.invoke(prompts_app, ["list"])
    assert listed.exit_code == 0 and "gateway.ping\tgateway/ping.jinja\tPingContext -> PingReply" in listed.output
    rendered = runner.invoke(prompts_app, ["render", "gateway.ping"])
    assert rendered.exit_code == 0 and "--- user ---\nAbout me: A retired teacher" in rendered.output
    assert runner.invoke(prompts_app, ["check"]).exit_code == 0


def test_cli_render_context_file_and_json(tmp_path):
    path = tmp_path / "ctx.json"
    path.write_text(json.dumps({"persona": "{{ 7*7 }}", "topic": "films"}))
    result = CliRunner().invoke(prompts_app, ["render", "gateway.ping", "--context", str(path), "--json"])
    payload = json.loads(result.output)
    assert payload["messages"][1]["content"].startswith("About me: {{ 7*7 }}")
    assert payload["output_schema"]["title"] == "PingReply"


def test_cli_check_fails_with_file_and_line(tmp_path):
    (tmp_path / "gateway").mkdir()
    (tmp_path / "gateway" / "ping.jinja").write_text("{% block system %}{{ persona }}{% endblock %}\n"
                                                      "{% block user %}{{ topik }}{% endblock %}\n")
    result = CliRunner().invoke(prompts_app, ["check", "--prompts-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "ping.jinja:2: 'topik' is not a field of PingContext" in result.output
