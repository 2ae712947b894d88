"""Prompt templates: one sandboxed, strict Jinja environment, rendering to chat messages, fingerprints.

Convention: a template `prompts/<stage>/<purpose>.jinja` defines exactly two blocks,
`{% block system %}` and `{% block user %}`, each rendered separately into one chat message;
nothing outside the blocks may produce text. Shared fragments come in by `{% include %}` or
`{% import %}` (macros). The context model's fields are the template's variables; their values are
data (persona text with `{{ }}` in it stays literal) and are never themselves rendered.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

import jinja2
from jinja2 import meta, nodes
from jinja2.debug import rewrite_traceback_stack
from jinja2.sandbox import SandboxedEnvironment
from pydantic import BaseModel

from pipeline.errors import UserError

BLOCKS = ("system", "user")
PROMPTS_ENV = "PERSONAGEN_PROMPTS"  # a templates folder to use instead of the repository's prompts/


class ChatMessage(BaseModel):
    """One chat message sent to a model."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class PromptSpec:
    """The contract of one prompt: template file, context model (its variables), output model."""

    name: str
    template: str
    context: type[BaseModel]
    output: type[BaseModel]

    @property
    def stage(self) -> str:
        """The stage folder of the template (`narrate_events` for `narrate_events/reason.jinja`)."""
        return self.template.split("/", 1)[0]

    def sample_context(self) -> BaseModel:
        """The first `examples` entry of the context model's `json_schema_extra`, validated."""
        extra = self.context.model_config.get("json_schema_extra") or {}
        examples = extra.get("examples") if isinstance(extra, dict) else None
        if not examples:
            raise ValueError(f"{self.context.__name__} has no json_schema_extra examples to use as a sample")
        return self.context.model_validate(examples[0])


def introduced(profile: str, name: str) -> str:
    """``profile`` naming the person once, first (``{{ profile | introduced(name) }}``): as it is where it begins with
    the name or the first name (code stores "Quinn Lopez. A 40-year-old ..." or the model's "Quinn Lopez is 40 ..."),
    else led by "Name." -- never "I am Quinn Lopez. Quinn Lopez. A 40-year-old ..."."""
    text = profile.strip()
    first = name.split()[0] if name.split() else name
    return text if not name or text.startswith((name, f"{first} ")) else f"{name}. {text}"


def default_prompts_dir() -> Path:
    """$PERSONAGEN_PROMPTS when set, else the repository's `prompts/` folder (next to the `pipeline` package)."""
    override = os.environ.get(PROMPTS_ENV)
    return Path(override) if override else Path(__file__).resolve().parents[1] / "prompts"


@dataclass
class PromptEnv:
    """The one Jinja environment over a prompts folder; also computes fingerprints."""

    root: Path = field(default_factory=default_prompts_dir)

    @cached_property
    def jinja(self) -> SandboxedEnvironment:
        """Sandboxed, strict, whitespace-trimming, no autoescape (the output is plain text)."""
        env = SandboxedEnvironment(
            loader=jinja2.FileSystemLoader(str(self.root)),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=False,
            autoescape=False,
        )
        env.filters["introduced"] = introduced
        return env

    def source(self, name: str) -> str:
        """The raw source text of template `name`; a file that is not UTF-8 raises TemplateProblem."""
        try:
            return self.jinja.loader.get_source(self.jinja, name)[0]
        except UnicodeDecodeError as exc:
            line = (self.root / name).read_bytes()[:exc.start].count(b"\n") + 1
            raise TemplateProblem(_problem(self, name, line, f"not UTF-8 text (byte {exc.start})")) from None

    def parsed(self, name: str) -> dict[str, nodes.Template]:
        """The parsed AST of `name` and of every template it includes, extends or imports, recursively."""
        asts: dict[str, nodes.Template] = {}
        stack = [name]
        while stack:
            current = stack.pop()
            if current in asts:
                continue
            asts[current] = ast = self.jinja.parse(self.source(current), name=current, filename=current)
            stack.extend(ref for ref in meta.find_referenced_templates(ast) if ref is not None)
        self._refuse_cycle(name, asts)
        return asts

    def _refuse_cycle(self, name: str, asts: dict[str, nodes.Template]) -> None:
        """A template that includes, extends or imports itself (directly or through others) would recurse
        until Python's stack runs out: one TemplateProblem naming the file and line of the tag instead."""
        def refs(template: str) -> list[tuple[str, int]]:
            found = asts[template].find_all((nodes.Include, nodes.Extends, nodes.Import, nodes.FromImport))
            return [(node.template.value, node.lineno) for node in found
                    if isinstance(node.template, nodes.Const) and isinstance(node.template.value, str)]

        path: list[str] = []

        def visit(template: str) -> None:
            path.append(template)
            for ref, line in refs(template):
                if ref in path:
                    chain = " -> ".join([*path[path.index(ref):], ref])
                    raise TemplateProblem(_problem(self, template, line, f"includes itself ({chain})"))
                if ref in asts:
                    visit(ref)
            path.pop()

        visit(name)

    def referenced(self, name: str) -> list[str]:
        """`name` plus every template it includes, extends or imports, recursively, sorted."""
        return sorted(self.parsed(name))

    def fingerprint(self, name: str) -> str:
        """sha256 over the sources of the template and everything it references."""
        digest = hashlib.sha256()
        for ref in self.referenced(name):
            digest.update(ref.encode() + b"\0" + self.source(ref).encode() + b"\0")
        return digest.hexdigest()

    def render(self, spec: PromptSpec, context: BaseModel) -> list[ChatMessage]:
        """Render the spec's template with `context` into [system, user] messages."""
        if not isinstance(context, spec.context):
            raise TypeError(f"{spec.name} expects {spec.context.__name__}, got {type(context).__name__}")
        self.source(spec.template)  # a file that is not UTF-8 fails here with its name and line
        template = self.jinja.get_template(spec.template)
        variables = {name: getattr(context, name) for name in type(context).model_fields}
        missing = [block for block in BLOCKS if block not in template.blocks]
        if missing:
            raise ValueError(f"{spec.template} lacks {{% block {missing[0]} %}}")
        try:
            return [ChatMessage(role=block, content=_render_block(template, block, variables).strip())
                    for block in BLOCKS]
        except RecursionError:  # a template that includes itself: name the tag, not 1,000 frames
            self.parsed(spec.template)
            raise TemplateProblem(_problem(self, spec.template, 1, "recursion too deep while rendering")) from None

    def render_located(self, spec: PromptSpec, context: BaseModel) -> list[ChatMessage]:
        """`render`, with a rendering error (e.g. in an {% if %} branch the lint's sample never takes)
        raised as TemplateProblem naming the template and line."""
        try:
            return self.render(spec, context)
        except jinja2.TemplateSyntaxError as exc:
            name = exc.name or spec.template
            raise TemplateProblem(_problem(self, name, self.tag_line(name, exc.lineno),
                                           f"syntax error: {exc.message}")) from None
        except jinja2.TemplateError:
            exc = rewrite_traceback_stack()  # frames of template lines, as Jinja's own render() shows them
            name, line = _template_line(exc, self.root, spec.template)
            raise TemplateProblem(_problem(self, name, line, f"{type(exc).__name__}: {exc}")) from None

    def tag_line(self, name: str, lineno: int) -> int:
        """The line of the tag a syntax error is in: Jinja reports where it met the unexpected token, which is the
        next line when the tag is left open at the end of its own (``{% if x`` then a newline)."""
        try:
            lines = self.source(name).splitlines()
        except (OSError, jinja2.TemplateNotFound, TemplateProblem):
            return lineno
        for number in range(min(lineno, len(lines)), 0, -1):
            line = lines[number - 1]
            opened = max(line.rfind("{%"), line.rfind("{{"), line.rfind("{#"))
            closed = max(line.rfind("%}"), line.rfind("}}"), line.rfind("#}"))
            if opened > closed:  # the last tag on this line is left open
                return number
            if number < lineno and max(opened, closed) >= 0:  # an earlier line whose tags all close
                return lineno
        return lineno

    def template_names(self) -> list[str]:
        """Every `*.jinja` file under the root, as loader names."""
        return sorted(p.relative_to(self.root).as_posix() for p in self.root.rglob("*.jinja"))


def _template_line(exc: BaseException, root: Path, default: str) -> tuple[str, int]:
    """The template and line a rendering error happened at, from Jinja's rewritten traceback."""
    found = (default, 1)
    tb = exc.__traceback__
    while tb is not None:
        filename = Path(tb.tb_frame.f_code.co_filename)
        if filename.suffix == ".jinja" and filename.is_relative_to(root):
            found = (filename.relative_to(root).as_posix(), tb.tb_lineno)
        tb = tb.tb_next
    return found


def _render_block(template: jinja2.Template, block: str, variables: dict) -> str:
    """Render one named block of `template` on its own."""
    context = template.new_context(variables)
    return "".join(template.blocks[block](context))


class PromptProblem(BaseModel):
    """One lint finding, printed as `file:line: message`."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


_FORMAT_PROSE = re.compile(r"\bjson\b", re.IGNORECASE)


def check_specs(specs: Iterable[PromptSpec], env: PromptEnv | None = None) -> list[PromptProblem]:
    """Lint every spec's template against its context model, and flag templates no spec uses."""
    env = env or PromptEnv()
    specs = list(specs)
    problems: list[PromptProblem] = []
    used: set[str] = set()
    for spec in specs:
        spec_problems, refs = _check_spec(spec, env)
        problems.extend(spec_problems)
        used.update(refs)
    for name in env.template_names():
        if name not in used and not Path(name).name.startswith("_"):
            problems.append(_problem(env, name, 1, "no PromptSpec in pipeline/specs.py uses this template"))
    return problems


class TemplateProblem(UserError):
    """A template would fail or mislead at run time; the message is `file:line: what is wrong`."""

    def __init__(self, problem: PromptProblem | str) -> None:
        super().__init__(str(problem))
        self.problem = problem


def preflight_templates(specs: Iterable[PromptSpec], env: PromptEnv | None = None) -> None:
    """Raise TemplateProblem naming the first lint finding, before a run spends any model call."""
    problems = check_specs(specs, env)
    if problems:
        more = f" (+{len(problems) - 1} more: personagen prompts check)" if len(problems) > 1 else ""
        raise TemplateProblem(f"{problems[0]}{more}")


def _problem(env: PromptEnv, name: str, line: int, message: str) -> PromptProblem:
    """A problem located in template `name` of `env`."""
    path = env.root / name
    try:
        shown = path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        shown = path.as_posix()
    return PromptProblem(file=shown, line=line, message=message)


def _check_spec(spec: PromptSpec, env: PromptEnv) -> tuple[list[PromptProblem], list[str]]:
    """Problems of one spec, and the template names it references."""
    try:
        asts = env.parsed(spec.template)
        refs = sorted(asts)
    except jinja2.TemplateNotFound as exc:
        return [_problem(env, spec.template, 1, f"{spec.name}: template not found: {exc.name}")], []
    except jinja2.TemplateSyntaxError as exc:
        name = exc.name or spec.template
        return [_problem(env, name, env.tag_line(name, exc.lineno), f"syntax error: {exc.message}")], [spec.template]
    except TemplateProblem as exc:
        return [exc.problem], [spec.template]
    problems = _check_structure(env, spec.template, asts[spec.template])
    problems += _check_variables(spec, env, asts)
    problems += _check_prose(env, refs)
    if not problems:
        problems += _check_sample(spec, env)
    return problems, refs


def _check_structure(env: PromptEnv, name: str, ast: nodes.Template) -> list[PromptProblem]:
    """Both blocks present, no `extends`, and no text outside the blocks."""
    problems = []
    blocks = {block.name for block in ast.find_all(nodes.Block)}
    for missing in (b for b in BLOCKS if b not in blocks):
        problems.append(_problem(env, name, 1, f"missing {{% block {missing} %}}"))
    for node in ast.body:
        if isinstance(node, nodes.Extends):
            problems.append(_problem(env, name, node.lineno, "{% extends %} is not supported; use include/import"))
        elif isinstance(node, nodes.Output) and not _is_blank(node):
            problems.append(_problem(env, name, node.lineno, "text outside {% block system %}/{% block user %}"))
    return problems


def _is_blank(node: nodes.Output) -> bool:
    """True when an output node only holds whitespace."""
    return all(isinstance(n, nodes.TemplateData) and not n.data.strip() for n in node.nodes)


def _check_variables(spec: PromptSpec, env: PromptEnv, asts: dict[str, nodes.Template]) -> list[PromptProblem]:
    """Variables used but not in the context model, and context fields never used."""
    fields = set(spec.context.model_fields)
    known = set(env.jinja.globals)
    problems, used = [], set()
    for name, ast in asts.items():
        undeclared = meta.find_undeclared_variables(ast) - known
        used |= undeclared
        for var in sorted(undeclared - fields):
            line = next((n.lineno for n in ast.find_all(nodes.Name) if n.name == var), 1)
            problems.append(_problem(env, name, line, f"'{var}' is not a field of {spec.context.__name__}"))
    hidden = {n for n, f in spec.context.model_fields.items() if (f.json_schema_extra or {}).get("unrendered")}
    for var in sorted(fields - used - hidden):  # a field marked unrendered is for code, never shown to the model
        problems.append(_problem(env, spec.template, 1, f"field '{var}' of {spec.context.__name__} is never used"))
    return problems


def _check_prose(env: PromptEnv, refs: list[str]) -> list[PromptProblem]:
    """Output-format prose belongs in the output model, not in templates."""
    problems = []
    for name in refs:
        for number, text in enumerate(env.source(name).splitlines(), start=1):
            if _FORMAT_PROSE.search(text):
                message = "output-format prose: the output model is sent as the schema; use Field(description=...)"
                problems.append(_problem(env, name, number, message))
    return problems


def _check_sample(spec: PromptSpec, env: PromptEnv) -> list[PromptProblem]:
    """The context model's sample validates and renders."""
    try:
        env.render_located(spec, spec.sample_context())
    except TemplateProblem as exc:  # located at the template and line that failed
        problem = exc.problem
        return [problem.model_copy(update={"message": f"sample context does not render: {problem.message}"})]
    except (ValueError, TypeError, jinja2.TemplateError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return [_problem(env, spec.template, 1, f"sample context does not render: {first_line}")]
    return []
