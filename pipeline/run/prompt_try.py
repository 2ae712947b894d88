"""`personagen prompts try`: one template, a real persona's context, one call, and what the pipeline does with it.

The persona's own stages run on the fake backend (seconds) and make every call as a run would; the first call
of the template tried (or the ``call``-th distinct context of it) goes to the chosen backend instead, and so
does every re-ask of that same context, so the stage's own checks decide on the real model's drafts: kept as
the model wrote them, asked again, or replaced by code's wording. The stages tell their verdicts through
``pipeline.checks.verdicts``. The real calls go through the usual cache, so a second try of an unchanged
template answers at once, and an edited one makes the call again."""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
from pydantic import BaseModel

from pipeline.checks.verdicts import listening
from pipeline.config import load_config, with_writing
from pipeline.errors import UserError
from pipeline.llm import LLM, LLMError
from pipeline.llm.factory import make_backend, resolve_backend_string
from pipeline.prompting import ChatMessage, PromptEnv, PromptSpec
from pipeline.s1_personas.sample_personas import persona_from_seed, sample_personas
from pipeline.specs import ALL_SPECS
from schemas.config import RunConfig
from schemas.llm import LLMSettings
from schemas.persona import PersonaSeed

# the writing mode whose stage makes a template's calls (the others follow the backend, as a run does)
WRITING = {"write_sessions.turn_user": "turn", "write_sessions.turn_assistant": "turn",
           "write_sessions.beat": "exchange", "write_sessions.small_talk": "exchange",
           "write_sessions.session": "session",
           "write_sessions.reveal": "exchange"}  # the turn mode's implicit messages are code's: nothing to reveal-check
QUERY_STAGE = ("generate_queries.", "evaluate.")  # templates whose calls need the persona's queries
SEARCHED = 5  # with no --persona, the first of this many whose run calls the template (a judge needs its query type)
NO_PERSONA = ("gateway.ping", "filler.session")
ONE_CALL = ("filler.session",)  # a context asked again is another session (the pool cycles its subjects), not a re-ask


@dataclass
class TriedCall:
    """One call of the tried context on the chosen backend."""

    sample: int
    output: BaseModel | None
    error: str = ""
    seconds: float = 0.0
    cached: bool = False
    verdicts: list[str | None] = field(default_factory=list)  # the stage's, on the draft or its parts

    @property
    def passed(self) -> bool | None:
        """True when every verdict passed, False when one refused, None when no check of the pipeline read it."""
        if self.output is None:
            return False
        return None if not self.verdicts else all(v is None for v in self.verdicts)


@dataclass
class Tried:
    """What `prompts try` shows: the template's rendered messages for the persona and the chosen backend's calls."""

    spec: PromptSpec
    persona: str
    backend: str
    messages: list[ChatMessage]
    calls: list[TriedCall]
    contexts: int  # distinct contexts of the template in the persona's run
    decision: str


def resolve_template(name: str, env: PromptEnv) -> PromptSpec:
    """A prompt by the name `prompts list` prints, or by its template file (``prompts/a/b.jinja`` or ``a/b.jinja``)."""
    if name in ALL_SPECS:
        return ALL_SPECS[name]
    path, root = Path(name).resolve(), env.root.resolve()
    relative = path.relative_to(root).as_posix() if path.is_relative_to(root) else name.removeprefix("prompts/")
    found = [s for s in ALL_SPECS.values() if s.template == relative]
    if not found:
        raise UserError(f"unknown prompt {name!r}: give a name from `personagen prompts list` or its template file")
    return found[0]


def persona_seeds(*, plan: Path | None, persona: str | None, profile: str,
                  seed: int | None) -> tuple[list[PersonaSeed], RunConfig]:
    """The personas to try with, in order, and their run's config: from a plan folder or dataset version (``plan``:
    its manifest's config where it has one, else the profile and seed given), the one named by id or row number
    (``persona``, from 0), else the first ``SEARCHED`` (the first whose run calls the template is tried)."""
    ids: list[str] = []
    config = None
    if plan is not None:
        table = plan / "personas.parquet"
        if not table.is_file():
            raise UserError(f"{plan}: no personas.parquet (give a `personagen plan` folder or a dataset version)")
        ids = _ids(plan)
        if (plan / "manifest.json").is_file():
            try:
                config = RunConfig.model_validate(json.loads((plan / "manifest.json").read_text())["config"])
            except (KeyError, TypeError, ValueError) as exc:  # ValidationError and JSONDecodeError are ValueErrors
                raise UserError(f"{plan / 'manifest.json'}: not a dataset manifest with its run's config "
                                f"({type(exc).__name__})") from None
    row = int(persona) if persona is not None and persona.isdigit() and persona not in ids else None
    if config is None:
        config = load_config(profile, n_personas=len(ids) or max(SEARCHED, (row or 0) + 1), seed=seed)
    seeds = sample_personas(config.n_personas, run_seed=config.seed, settings=config.personas)
    by_id = {persona_from_seed(s, run_seed=config.seed, split=config.personas.split).persona_id: s for s in seeds}
    known = ids or list(by_id)
    where = plan / "personas.parquet" if plan else f"profile {profile!r}"
    if row is not None and row >= len(known):
        raise UserError(f"{where}: no persona at row {row} ({len(known)} personas)")
    wanted = [known[row]] if row is not None else [persona] if persona else known[:SEARCHED]
    for one in wanted:
        if one not in known:
            raise UserError(f"{where}: no persona {one!r} (first ones: {', '.join(known[:3])})")
        if one not in by_id:
            raise UserError(f"{plan}: persona {one!r} is not one profile {profile!r} with seed {config.seed} samples "
                            "(give the --profile and --seed the plan was made with)")
    return [by_id[one] for one in wanted], config


class _Routing(LLM):
    """The fake backend for every call but the tried template's chosen context, which goes to ``real``."""

    def __init__(self, target: str, pick: int, real: LLM, **kwargs) -> None:
        super().__init__(**kwargs)
        self.target, self.pick, self.real = target, pick, real
        self.seen: list[BaseModel] = []  # distinct contexts of the target, in the order asked
        self.chosen: BaseModel | None = None
        self.calls: list[TriedCall] = []

    async def _generate(self, spec, context, sample_index, stage):
        if spec.name != self.target:
            return await super()._generate(spec, context, sample_index, stage)
        if context not in self.seen:
            self.seen.append(context)
            if len(self.seen) == self.pick:
                self.chosen = context
        if self.chosen is None or context != self.chosen or (self.target in ONE_CALL and self.calls):
            return await super()._generate(spec, context, sample_index, stage)
        self.chosen_spec = spec
        started = time.perf_counter()
        call = TriedCall(sample=sample_index, output=None,
                         cached=self.real.cache.get(self.real.cache_key(spec, context, sample_index=sample_index)) is not None)
        self.calls.append(call)
        try:
            call.output = await self.real._generate(spec, context, sample_index, stage)
            return call.output
        except LLMError as exc:
            call.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise
        finally:
            call.seconds = time.perf_counter() - started


def _parts(output: BaseModel) -> list[object]:
    """The draft and every model nested in it (a session's exchanges): what a stage may give a verdict on."""
    found: list[object] = [output]
    for name in type(output).model_fields:
        value = getattr(output, name)
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, BaseModel):
                found += _parts(v)
    return found


def try_prompt(name: str, *, llm: str | None, cache: Path, plan: Path | None = None, persona: str | None = None,
               profile: str = "default", seed: int | None = None, call: int = 1,
               prompts_dir: Path | None = None) -> Tried:
    """Run one persona's stages with the tried template's ``call``-th context on ``llm`` (see the module)."""
    env = PromptEnv(prompts_dir) if prompts_dir else PromptEnv()
    spec = resolve_template(name, env)
    seeds, config = persona_seeds(plan=plan, persona=persona, profile=profile, seed=seed)  # bad input: before the cache
    settings = LLMSettings(llm=llm, cache_path=cache)
    try:  # the backend first: one that cannot work is one line, and no cache file is made for it
        backend = make_backend(resolve_backend_string(settings), settings)
        backend.preflight()
    except LLMError as exc:
        raise UserError(str(exc)) from exc
    real = LLM(settings, backend=backend, prompts=env)
    try:
        tried, ran = _config_for(spec, config, real), 0
        for seed_row in seeds:
            ran += 1
            routing = _Routing(spec.name, call, real, settings=LLMSettings(llm="fake", cache_path=cache), prompts=env)
            try:
                with listening() as verdicts:
                    who = _run(spec, seed_row, tried, routing)
            finally:
                routing.close()
            if routing.chosen is not None or routing.seen or spec.name in NO_PERSONA:
                break
    finally:
        real.close()
    if routing.chosen is None:
        whose = "the persona's run" if persona is not None else f"the runs of the first {ran} personas"
        hint = "try another --persona" if routing.seen or persona is not None else f"profile {profile!r} makes none"
        raise UserError(f"{spec.name}: {whose} made {len(routing.seen) or 'no'} call(s) of this template"
                        + (f", fewer than --call {call}" if routing.seen else "") + f" ({hint})")
    for c in routing.calls:
        parts = _parts(c.output) if c.output is not None else []
        c.verdicts = [problem for draft, problem in verdicts if any(draft is p for p in parts)]
    messages = env.render_located(routing.chosen_spec, routing.chosen)
    return Tried(spec=spec, persona=who, backend=real.name, messages=messages, calls=routing.calls,
                 contexts=len(routing.seen), decision=decision(routing.calls))


def _config_for(spec: PromptSpec, config: RunConfig, real: LLM) -> RunConfig:
    """The run's config as the chosen backend would run it, in the writing mode whose stage calls the template."""
    config = with_writing(config, real)
    if spec.name in WRITING:
        config = config.model_copy(update={"text": config.text.model_copy(update={"writing": WRITING[spec.name]})})
    if spec.name == "generate_queries.query":
        config = config.model_copy(update={"queries": config.queries.model_copy(update={"wording": "model"})})
    return config


def _ids(plan: Path) -> list[str]:
    table = plan / "personas.parquet"
    try:
        return [str(i) for i in pq.read_table(table, columns=["persona_id"]).column("persona_id").to_pylist()]
    except (OSError, ValueError, KeyError) as exc:  # ArrowInvalid is a ValueError
        raise UserError(f"{table}: not a personas table ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                        ) from None


def _run(spec: PromptSpec, seed_row: PersonaSeed, config: RunConfig, llm: LLM) -> str:
    """The persona's stages as a run makes them, as far as the tried template needs; returns "id (name)"."""
    from pipeline.run.persona_text import build_persona_text

    if spec.name == NO_PERSONA[0]:
        with contextlib.suppress(LLMError):  # shown as the call's error
            llm.generate(spec, spec.sample_context())
        return "(none: the ping has no persona)"
    if spec.name == NO_PERSONA[1]:
        from pipeline.s3_text.filler import write_filler_pool

        write_filler_pool(llm=llm, config=config)
        return "(none: filler is the dataset's)"
    text = build_persona_text(seed_row, config=config, llm=llm)
    who = f"{text.persona.persona_id} ({text.persona.name})"
    if spec.name.startswith(QUERY_STAGE):
        from pipeline.s4_queries.generate_queries import generate_queries

        queries, _ = generate_queries(text.persona, text.timeline, text.sessions, llm=llm, config=config,
                                      inventory=text.inventory)
        _judge(spec, queries, config, llm)
    return who


def _judge(spec: PromptSpec, queries: list, config: RunConfig, llm: LLM) -> None:
    """The judges' calls, which a run makes only when asked to (a no-context judge, `eval --answer open`): one
    query's, as the run would make them (the open-answer judge grades the key's own reply)."""
    import random

    if spec.name == "generate_queries.judge" and queries:
        from pipeline.s4_queries.gates import judge_hits

        judge_hits(queries[0], llm, config.queries, random.Random(config.seed))
    elif spec.name.startswith("evaluate.judge_"):
        from pipeline.evaluation.judge import judge_context, judge_spec

        kind = spec.name.removeprefix("evaluate.judge_")
        found = [q for q in queries if ("abstention" if q.abstains() else q.type) == kind]
        if found:
            q = found[0]
            with contextlib.suppress(LLMError):  # shown as the call's error
                llm.generate(judge_spec(q), judge_context(q, q.options[q.correct_index].text), stage="evaluate")


def decision(calls: list[TriedCall]) -> str:
    """What the pipeline made of the tried context, from its stage's verdicts on each call."""
    if not calls:
        return "no call"
    last = calls[-1]
    asked = f" after {len(calls) - 1} refused draft(s)" if len(calls) > 1 else ""
    if last.passed is None:
        return "used as the model wrote it (the pipeline checks nothing of this output before using it)"
    if last.passed:
        return f"kept: the model's text{asked}" if not asked else f"kept: the model's text of sample {last.sample}{asked}"
    if len(last.verdicts) > 1 and any(v is None for v in last.verdicts):
        kept = sum(v is None for v in last.verdicts)
        return f"kept in part: {kept} of {len(last.verdicts)} parts of the model's text{asked}, the others dropped"
    return f"not kept: code's wording or nothing in its place, after {len(calls)} refused draft(s)"


