"""`personagen prompts try`: a template with a real persona's context, its call, and the stage's own verdicts."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from pipeline.cli.app import app
from pipeline.errors import UserError
from pipeline.prompting import PromptEnv, introduced
from pipeline.run.prompt_try import NO_PERSONA, try_prompt
from pipeline.specs import ALL_SPECS


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("try") / "llm.sqlite"


@pytest.mark.parametrize("name", sorted(ALL_SPECS))
def test_every_template_is_tried_with_a_real_persona_on_the_fake_backend(name, cache):
    profile = "default" if name == "write_sessions.small_talk" else "smoke"  # smoke sessions have no small talk
    tried = try_prompt(name, llm="fake", cache=cache, profile=profile)
    assert tried.calls and tried.calls[0].output is not None
    assert tried.decision.startswith(("kept", "not kept", "used as the model wrote it")), tried.decision
    user = next(m.content for m in tried.messages if m.role == "user")
    assert user and tried.contexts >= 1
    if name not in NO_PERSONA:
        assert tried.persona.startswith("per_")
    if name.startswith(("write_sessions.", "narrate_events.", "expand_persona.", "generate_queries.query")):
        # the persona's own context, not the context model's example, and the stage's verdict on the draft
        assert tried.calls[-1].verdicts, tried
        assert tried.messages != PromptEnv().render(tried.spec, tried.spec.sample_context())


def test_only_the_chosen_context_and_its_re_asks_reach_the_tried_backend(cache):
    """The persona's run asks the template for many contexts; only the chosen one goes to --llm (the others and
    every other template are answered by the fake backend), and --call picks another."""
    first = try_prompt("write_sessions.turn_user", llm="fake", cache=cache, profile="smoke")
    second = try_prompt("write_sessions.turn_user", llm="fake", cache=cache, profile="smoke", call=2)
    assert first.contexts >= 3 and 1 <= len(first.calls) <= 4  # turn_attempts: the chosen context's samples only
    assert [c.sample for c in first.calls] == list(range(len(first.calls)))
    assert first.messages != second.messages and second.contexts == first.contexts
    with pytest.raises(UserError, match="fewer than --call 999"):
        try_prompt("write_sessions.turn_user", llm="fake", cache=cache, profile="smoke", call=999)


def test_a_draft_the_stage_refuses_is_shown_with_the_check_that_refused_it(cache):
    """The fake backend's inventory items ("budget food01") are not item names: refused, the catalog's kept."""
    tried = try_prompt("expand_persona.inventory", llm="fake", cache=cache, profile="smoke")
    assert tried.calls[0].verdicts and "none of its" in tried.calls[0].verdicts[0]
    assert tried.decision.startswith("not kept")


def test_an_edited_template_is_called_again_and_an_unchanged_one_is_cached(tmp_path):
    root = tmp_path / "prompts"
    shutil.copytree(PromptEnv().root, root)
    cache = tmp_path / "llm.sqlite"
    first = try_prompt("narrate_events.narrative", llm="fake", cache=cache, profile="smoke", prompts_dir=root)
    again = try_prompt("narrate_events.narrative", llm="fake", cache=cache, profile="smoke", prompts_dir=root)
    assert not first.calls[0].cached and again.calls[0].cached
    path = root / "narrate_events" / "narrative.jinja"
    path.write_text(path.read_text().replace("{% block system %}\n", "{% block system %}\nKeep it short.\n", 1))
    edited = try_prompt("narrate_events.narrative", llm="fake", cache=cache, profile="smoke", prompts_dir=root)
    assert not edited.calls[0].cached
    assert edited.messages[0].content.startswith("Keep it short.")


def test_the_cli_prints_messages_output_verdict_and_decision(tmp_path):
    result = CliRunner().invoke(app, ["prompts", "try", "prompts/write_sessions/turn_user.jinja", "--llm", "fake",
                                      "--profile", "smoke", "--cache", str(tmp_path / "c.sqlite")])
    assert result.exit_code == 0, result.output
    for part in ("write_sessions.turn_user (write_sessions/turn_user.jinja): persona per_", "--- system ---",
                 "--- user ---", "--- fake:fake, sample 0", "checks: pass", "pipeline: kept: the model's text"):
        assert part in result.output, result.output


def test_the_persona_comes_from_a_plan_folder_by_id_or_row(tmp_path):
    runner = CliRunner()
    plan = tmp_path / "plan"
    assert runner.invoke(app, ["plan", "--n", "3", "--profile", "smoke", "--out", str(plan)]).exit_code == 0
    import pyarrow.parquet as pq

    ids = pq.read_table(plan / "personas.parquet").column("persona_id").to_pylist()
    cache = tmp_path / "c.sqlite"
    by_row = try_prompt("expand_persona.profile", llm="fake", cache=cache, plan=plan, persona="2", profile="smoke")
    by_id = try_prompt("expand_persona.profile", llm="fake", cache=cache, plan=plan, persona=ids[2], profile="smoke")
    assert by_row.persona.startswith(ids[2]) and by_id.persona == by_row.persona
    wrong = runner.invoke(app, ["prompts", "try", "expand_persona.profile", "--llm", "fake", "--plan", str(plan),
                                "--persona", "per_nobody", "--profile", "smoke", "--cache", str(cache)])
    assert wrong.exit_code == 2 and f"{plan / 'personas.parquet'}: no persona 'per_nobody'" in wrong.output
    other = runner.invoke(app, ["prompts", "try", "expand_persona.profile", "--llm", "fake", "--plan", str(plan),
                                "--profile", "smoke", "--seed", "999", "--cache", str(cache)])
    assert other.exit_code == 2 and "give the --profile and --seed the plan was made with" in other.output


def _edited_narrative(tmp_path, found, edit) -> tuple:
    """A copy of the prompts whose narrative template has the first line ``found`` accepts changed by ``edit``:
    the folder and that line's number."""
    root = tmp_path / "prompts"
    shutil.copytree(PromptEnv().root, root)
    path = root / "narrate_events" / "narrative.jinja"
    lines = path.read_text().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if found(line))
    lines[number - 1] = edit(lines[number - 1])
    path.write_text("\n".join(lines) + "\n")
    return root, number


def test_errors_are_one_line_naming_the_template_and_the_line_of_the_broken_tag(tmp_path):
    # the tag left open: Jinja meets the next line's text
    root, number = _edited_narrative(tmp_path, lambda line: line.startswith("{% if causes %}"),
                                     lambda line: "{% if causes ")
    base = ["--prompts-dir", str(root)]
    for args in (["prompts", "check", *base], ["prompts", "render", "narrate_events.narrative", *base],
                 ["prompts", "try", "narrate_events.narrative", "--llm", "fake", "--profile", "smoke",
                  "--cache", str(tmp_path / "c.sqlite"), *base]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code != 0 and "Traceback" not in result.output, result.output
        assert f"narrative.jinja:{number}: syntax error" in result.output, (args, result.output)
    unknown = CliRunner().invoke(app, ["prompts", "try", "no.such", "--llm", "fake"])
    assert unknown.exit_code == 2 and "unknown prompt 'no.such'" in unknown.output


def test_an_undefined_field_in_render_names_its_line(tmp_path):
    root, number = _edited_narrative(tmp_path, lambda line: "{{ date }}" in line,
                                     lambda line: line.replace("{{ date }}", "{{ datee }}"))
    result = CliRunner().invoke(app, ["prompts", "render", "narrate_events.narrative", "--prompts-dir", str(root)])
    assert result.exit_code == 2 and f"narrative.jinja:{number}: UndefinedError" in result.output, result.output


def test_the_profile_is_not_led_by_the_name_twice(cache):
    from pipeline.s1_personas.expand_persona import named

    assert named("Quinn Lopez", "Quinn Lopez is 40 and teaches.") == "Quinn Lopez is 40 and teaches."
    assert named("Quinn Lopez", " A 40-year-old teacher.") == "Quinn Lopez. A 40-year-old teacher."
    assert introduced("Quinn Lopez. A 40-year-old teacher.", "Quinn Lopez") == "Quinn Lopez. A 40-year-old teacher."
    assert introduced("Quinn is 40.", "Quinn Lopez") == "Quinn is 40."
    assert introduced("A 40-year-old teacher.", "Quinn Lopez") == "Quinn Lopez. A 40-year-old teacher."
    for name in ("narrate_events.narrative", "write_sessions.session", "expand_persona.inventory"):
        tried = try_prompt(name, llm="fake", cache=cache, profile="smoke")
        user, who = tried.messages[-1].content, tried.persona.split(" (")[1].rstrip(")")
        assert user.count(who) == 1 or name == "expand_persona.inventory", user
        assert f"{who}. {who}" not in user, user


def test_bad_input_is_one_line_and_makes_no_cache_file(tmp_path, monkeypatch):
    runner = CliRunner()
    cache = tmp_path / "c.sqlite"
    outside = runner.invoke(app, ["prompts", "try", "/etc/passwd", "--llm", "fake", "--cache", str(cache)])
    assert outside.exit_code == 2 and "unknown prompt '/etc/passwd'" in outside.output
    plan = tmp_path / "plan"
    plan.mkdir()
    (plan / "personas.parquet").write_bytes(b"{}\n")
    torn = runner.invoke(app, ["prompts", "try", "expand_persona.profile", "--llm", "fake", "--plan", str(plan),
                               "--cache", str(cache)])
    assert torn.exit_code == 2 and f"{plan / 'personas.parquet'}: not a personas table" in torn.output, torn.output
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    keyless = runner.invoke(app, ["prompts", "try", "expand_persona.profile", "--llm", "openai:gpt-4o-mini",
                                  "--profile", "smoke", "--cache", str(cache)])
    assert keyless.exit_code == 2 and "OPENAI_API_KEY is not set" in keyless.output, keyless.output
    assert "Traceback" not in outside.output + torn.output + keyless.output and not cache.exists()
