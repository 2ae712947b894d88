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
        messages = _env(prompts_dir).render(spec, values)
    if as_json:
        payload = {"messages": [m.model_dump() for m in messages], "output_schema": spec.output.model_json_schema()}
        typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))
        return
    for message in messages:
        typer.echo(f"--- {message.role} ---\n{message.content}\n")
    typer.echo(f"--- output schema: {spec.output.__name__} ---")
    typer.echo(json.dumps(spec.output.model_json_schema(), indent=2))


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
