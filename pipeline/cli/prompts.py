"""`personagen prompts list | render NAME | check`: inspect and lint the prompt templates."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import jinja2
import typer
from pydantic import ValidationError

from pipeline.cli.common import fail, interruptible
from pipeline.errors import UserError, first_validation_error
from pipeline.prompting import PromptEnv, PromptSpec, check_specs
from pipeline.specs import ALL_SPECS

prompts_app = typer.Typer(help="Inspect and lint the prompt templates (prompts/<stage>/<purpose>.jinja).",
                          no_args_is_help=True)

PromptsDir = Annotated[Path | None, typer.Option("--prompts-dir", help="templates folder (default: the repository's prompts/)")]


def _env(prompts_dir: Path | None) -> PromptEnv:
    return PromptEnv(prompts_dir) if prompts_dir else PromptEnv()


@contextmanager
def _one_line(where: str):
    """A template or context file that cannot be read or rendered: one `error:` line naming it, exit 2."""
    try:
        yield
    except UserError as exc:
        raise fail(exc) from None
    except ValidationError as exc:
        raise fail(first_validation_error(exc, where)) from None
    except UnicodeDecodeError as exc:
        raise fail(f"{where}: not UTF-8 (byte {exc.start})") from None
    except OSError as exc:
        raise fail(f"{where}: cannot read ({exc.strerror or exc})") from None
    except jinja2.TemplateError as exc:
        line = f":{exc.lineno}" if getattr(exc, "lineno", None) else ""
        raise fail(f"{where}{line}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None


def _spec(name: str) -> PromptSpec:
    if name not in ALL_SPECS:
        known = ", ".join(sorted(ALL_SPECS)) or "none"
        raise typer.BadParameter(f"unknown prompt {name!r} (known: {known})")
    return ALL_SPECS[name]


@prompts_app.command("list")
@interruptible
def list_prompts(prompts_dir: PromptsDir = None) -> None:
    """One line per prompt: name, template, context -> output, fingerprint."""
    env = _env(prompts_dir)
    for name, spec in sorted(ALL_SPECS.items()):
        with _one_line(spec.template):
            fingerprint = env.fingerprint(spec.template)[:12]
        typer.echo(f"{name}\t{spec.template}\t{spec.context.__name__} -> {spec.output.__name__}\t{fingerprint}")


@prompts_app.command("render")
@interruptible
def render(
    name: Annotated[str, typer.Argument(help="prompt name, as `prompts list` shows it")],
    context: Annotated[Path | None, typer.Option("--context", help="JSON file with the context model's fields")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the messages and the output schema as JSON")] = False,
    prompts_dir: PromptsDir = None,
) -> None:
    """Show the exact messages that would be sent (the context model's first example by default)."""
    spec = _spec(name)
    with _one_line(f"--context {context}"):
        values = spec.context.model_validate_json(context.read_bytes()) if context else spec.sample_context()
    with _one_line(spec.template):
        messages = _env(prompts_dir).render_located(spec, values)
    if as_json:
        payload = {"messages": [m.model_dump() for m in messages], "output_schema": spec.output.model_json_schema()}
        typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))
        return
    for message in messages:
        typer.echo(f"--- {message.role} ---\n{message.content}\n")
    typer.echo(f"--- output schema: {spec.output.__name__} ---")
    typer.echo(json.dumps(spec.output.model_json_schema(), indent=2))


@prompts_app.command("try")
@interruptible
def try_command(
    name: Annotated[str, typer.Argument(help="prompt name as `prompts list` prints it, or its template file")],
    plan: Annotated[Path | None, typer.Option("--plan", help="a `personagen plan` folder or a dataset version to take the persona from")] = None,
    persona: Annotated[str | None, typer.Option("--persona", help="persona id, or row number from 0 (default: the first)")] = None,
    llm: Annotated[str | None, typer.Option("--llm", help="fake | local[:path.gguf] | openai:<model>")] = None,
    call: Annotated[int, typer.Option("--call", min=1, help="which of the persona's contexts of this template (1: the first)")] = 1,
    profile: Annotated[str, typer.Option(help="profile name or YAML file, where the plan has no manifest")] = "default",
    seed: Annotated[int | None, typer.Option(help="run seed, where the plan has no manifest (default: the profile's)")] = None,
    cache: Annotated[Path, typer.Option(help="LLM response cache")] = Path("outputs/.cache/llm.sqlite"),
    prompts_dir: PromptsDir = None,
) -> None:
    """Render a template with a real persona's context, make its call, and show what the pipeline keeps.

    The persona's other calls are answered by the fake backend; this template's chosen context, and every re-ask
    of it, go to --llm, and the stage's own checks give their verdict on each draft."""
    from pipeline.run.prompt_try import try_prompt

    with _one_line(name):
        tried = try_prompt(name, llm=llm, cache=cache, plan=plan, persona=persona, profile=profile, seed=seed,
                           call=call, prompts_dir=prompts_dir)
    spec = tried.spec
    typer.echo(f"{spec.name} ({spec.template}): persona {tried.persona}, context {call} of {tried.contexts} in its run")
    for message in tried.messages:
        typer.echo(f"--- {message.role} ---\n{message.content}\n")
    for c in tried.calls:
        how = "cached" if c.cached else f"{c.seconds:.1f} s"
        typer.echo(f"--- {tried.backend}, sample {c.sample} ({how}) ---")
        typer.echo(c.output.model_dump_json(indent=2) if c.output is not None else f"call failed: {c.error}")
        if c.output is not None and not c.verdicts:
            typer.echo("checks: none (the pipeline checks nothing of this output before using it)")
        for v in c.verdicts:
            typer.echo("checks: pass" if v is None else f"checks: refused: {v}")
        typer.echo("")
    typer.echo(f"pipeline: {tried.decision}")


@prompts_app.command("check")
@interruptible
def check(prompts_dir: PromptsDir = None) -> None:
    """Lint every template against its context model; exit 1 with `file:line: message` lines."""
    problems = check_specs(ALL_SPECS.values(), _env(prompts_dir))
    for problem in problems:
        typer.echo(str(problem), err=True)
    if problems:
        raise typer.Exit(code=1)
    typer.echo(f"{len(ALL_SPECS)} prompt(s) OK")
