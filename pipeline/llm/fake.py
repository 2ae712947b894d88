"""The fake backend: deterministic, schema-aware answers seeded by the cache key, plus fault injection.

An output model may define `fake_output(cls, context, rng) -> instance` (a classmethod) to make fake
text realistic; otherwise a generic builder walks the model's JSON schema.

Free-text calls (`LLM.chat`) get a scripted multiple-choice answer, chosen by `fake?answer=...`:
`correct` (the letter in the call context's `correct_letter`), a letter such as `a`, `none` (an
unparseable reply), or by default a seeded random letter; the script is part of the model name. An open
question (`open` in the call context) gets the text of that option instead of its letter.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import random
from typing import Any, ClassVar, Literal
from urllib.parse import parse_qsl

from pydantic import BaseModel, Field

from pipeline.llm.backends import BackendReply, BackendRequest
from pipeline.llm.errors import ConfigError, RateLimited, TransientError
from pipeline.tokens import count_tokens

FaultKind = Literal["malformed_json", "schema_violation", "rate_limit", "timeout", "truncation", "server_error"]

WORDS = (
    "morning walk quiet garden coffee novel jazz river mountain kitchen recipe weekend city market "
    "friend family journal budget plan trip museum film concert bicycle yoga tea bakery library "
    "autumn summer ocean trail photo workshop course podcast notebook sketch piano guitar salad "
    "soup pasta lantern balcony window sunset harbor village festival studio lesson habit routine "
    "careful bright gentle simple honest warm calm steady curious practical thoughtful modest"
).split()


class Fault(BaseModel):
    """Inject `kind` on the listed backend-call indices and/or with a probability per call."""

    kind: FaultKind
    probability: float = Field(default=0.0, ge=0, le=1)
    calls: list[int] = Field(default_factory=list)
    retry_after_s: float = 0.05


class FaultPlan(BaseModel):
    """Faults and latency for the fake backend; parsed from `fake?kind=0.2&kind=@0,3&latency_s=0.01`."""

    faults: list[Fault] = Field(default_factory=list)
    latency_s: float = 0.0
    answer: str | None = Field(default=None, description="free-text script: correct | none | a letter")
    exit_after: int | None = Field(default=None, description="kill the process (exit 137) at this backend call")

    @classmethod
    def parse(cls, query: str) -> FaultPlan:
        """Parse the query part of a `fake?...` backend string."""
        plan = cls()
        for name, value in parse_qsl(query, strict_parsing=bool(query)):
            if name == "latency_s":
                plan.latency_s = _number(name, value, float)
            elif name == "exit_after":
                plan.exit_after = _number(name, value, int)
            elif name == "answer":
                plan.answer = _answer_script(value)
            elif name in FaultKind.__args__:
                plan.faults.append(_parse_fault(name, value))
            else:
                raise ConfigError(f"unknown fake backend option {name!r}; faults: {', '.join(FaultKind.__args__)}")
        return plan

    def pick(self, call_index: int, rng: random.Random) -> Fault | None:
        """The fault to inject on this call, if any (first match wins)."""
        for fault in self.faults:
            if call_index in fault.calls or rng.random() < fault.probability:
                return fault
        return None


def _number(name: str, value: str, kind: type):
    """``value`` as a number for the fake backend's option ``name``, or a one-line ConfigError."""
    try:
        number = kind(value)
    except ValueError:
        raise ConfigError(f"fake backend {name}={value!r}: expected a number") from None
    if not 0 <= number < float("inf"):
        raise ConfigError(f"fake backend {name}={value!r}: expected a number of at least 0")
    return number


def _parse_fault(kind: str, value: str) -> Fault:
    """`0.2` is a probability, `@0,3` lists call indices."""
    if value.startswith("@"):
        return Fault(kind=kind, calls=[_number(kind, i, int) for i in value[1:].split(",") if i])
    probability = _number(kind, value, float)
    if probability > 1:
        raise ConfigError(f"fake backend {kind}={value!r}: a probability is at most 1")
    return Fault(kind=kind, probability=probability)


class FakeBackend:
    """Deterministic schema-aware backend for tests; `calls` counts every request that reached it."""

    provider = "fake"
    model = "fake"
    _process_calls: ClassVar[itertools.count] = itertools.count()

    def __init__(self, plan: FaultPlan | None = None) -> None:
        self.plan = plan or FaultPlan()
        self.model = fake_model_name(self.plan)
        self.calls = 0
        self.requests: list[BackendRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0

    def preflight(self) -> None:
        """The fake backend always works."""

    async def complete(self, request: BackendRequest) -> BackendReply:
        """Answer from the seeded builder (or the model's fake_output), or inject a fault."""
        index = self.calls
        if self.plan.exit_after is not None and next(FakeBackend._process_calls) >= self.plan.exit_after:
            os._exit(137)  # like kill -9, counted over the whole process: no cleanup, committed work survives
        self.calls += 1
        self.requests.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.plan.latency_s:
                await asyncio.sleep(self.plan.latency_s)
            fault = self.plan.pick(index, _rng(request.key, "fault", request.attempt))
            rng = _rng(request.key, "answer")
            text = scripted_answer(self.plan.answer, request.context, rng) if request.free_text \
                else fake_json(request.output, request.context, rng, request.schema)
            return await _apply(fault, text, request)
        finally:
            self.in_flight -= 1


def fake_model_name(plan: FaultPlan) -> str:
    """The model name: the answer script is part of it, so scripted evals do not share cache rows."""
    return f"fake-answer-{plan.answer}" if plan.answer else "fake"


def _answer_script(value: str) -> str:
    """Check an `answer=` script: correct, none, or one option letter."""
    if value in ("correct", "none") or (len(value) == 1 and value.isalpha()):
        return value.lower()
    raise ConfigError(f"fake backend answer={value!r}: use correct, none or an option letter")


ANSWER_SHAPES = ("<final_answer>({letter})", "I would pick ({letter}).\n<final_answer> {upper}",
                 "The answer is option {upper}.", "Answer: {letter}", "**({letter})**")


OPEN_SHAPES = ("{text}", "Here is what I would say: {text}", "{text} I hope that helps.")


def scripted_answer(script: str | None, context: BaseModel, rng: random.Random) -> str:
    """A free-text multiple-choice reply in one of several real-world shapes; for an open question (the call
    context's `open`), the chosen option's text in a sentence, as a model answering without options would."""
    if script == "none":
        return "I cannot decide between these options."
    letter = script if script and script != "correct" else None
    if script == "correct":
        letter = getattr(context, "correct_letter", None)
        if letter is None:
            raise ConfigError("fake answer=correct needs a call context with correct_letter")
    options = list(getattr(context, "options", []) or [])
    letter = letter or rng.choice("abcdefghijklmnopqrstuvwxyz"[:len(options) or 4])
    if getattr(context, "open", False) and options:
        text = options["abcdefghijklmnopqrstuvwxyz".index(letter) % len(options)]
        return rng.choice(OPEN_SHAPES).format(text=text)
    return rng.choice(ANSWER_SHAPES).format(letter=letter, upper=letter.upper())


def _rng(*parts: object) -> random.Random:
    """An RNG seeded from a stable hash of `parts`."""
    seed = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(seed[:8], "big"))


async def _apply(fault: Fault | None, text: str, request: BackendRequest) -> BackendReply:
    """Turn a good answer into the reply (or exception) a fault calls for."""
    kind = fault.kind if fault else None
    if kind == "rate_limit":
        raise RateLimited("fake 429 Too Many Requests", retry_after_s=fault.retry_after_s)
    if kind == "server_error":
        raise TransientError("fake 500 Internal Server Error")
    if kind == "timeout":
        await asyncio.sleep(request.timeout_s + 3600)
    finish = "stop"
    if kind == "malformed_json":
        text = text[: max(1, len(text) // 2)] + ' "oops'
    elif kind == "schema_violation":
        text = json.dumps([1, 2, 3])
    elif kind == "truncation":
        text, finish = text[: max(1, len(text) // 2)], "length"
    prompt = "\n".join(m["content"] for m in request.messages)
    return BackendReply(text=text, finish_reason=finish, input_tokens=count_tokens(prompt),
                        output_tokens=count_tokens(text))


def fake_json(output: type[BaseModel], context: BaseModel, rng: random.Random, schema: dict | None = None) -> str:
    """A valid JSON instance of `output`: its `fake_output` hook when defined, else built from its schema."""
    hook = getattr(output, "fake_output", None)
    if callable(hook):
        instance = hook(context, rng)
        if not isinstance(instance, output):
            raise TypeError(f"{output.__name__}.fake_output returned {type(instance).__name__}")
        return instance.model_dump_json()
    schema = schema or output.model_json_schema()
    return json.dumps(SchemaFaker(schema, rng).build(schema))


class SchemaFaker:
    """Builds a random instance of a JSON schema (pydantic's dialect: $defs, anyOf, bounds, enums)."""

    def __init__(self, root: dict, rng: random.Random) -> None:
        self.root = root
        self.rng = rng

    def build(self, node: dict) -> Any:
        """A random value that satisfies `node`."""
        if "$ref" in node:
            return self.build(self.root["$defs"][node["$ref"].rsplit("/", 1)[-1]])
        if "const" in node:
            return node["const"]
        if "enum" in node:
            return self.rng.choice(node["enum"])
        for combinator in ("anyOf", "oneOf"):
            if combinator in node:
                options = [o for o in node[combinator] if o.get("type") != "null"] or node[combinator]
                return self.build(self.rng.choice(options))
        if "allOf" in node:
            return self.build(node["allOf"][0])
        kind = node.get("type", "string")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        return getattr(self, f"_{kind}")(node)

    def _object(self, node: dict) -> dict:
        if "properties" in node:
            return {name: self.build(sub) for name, sub in node["properties"].items()}
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            count = self._count(node, "minProperties", "maxProperties")
            return {f"{self.rng.choice(WORDS)}_{i}": self.build(extra) for i in range(count)}
        return {}

    def _array(self, node: dict) -> list:
        if "prefixItems" in node:
            return [self.build(item) for item in node["prefixItems"]]
        items: list = []
        for _ in range(self._count(node, "minItems", "maxItems")):
            item = self.build(node.get("items", {}))
            for _retry in range(20 if node.get("uniqueItems") else 0):
                if item not in items:
                    break
                item = self.build(node.get("items", {}))
            items.append(item)
        return items

    def _count(self, node: dict, low_key: str, high_key: str) -> int:
        high = node.get(high_key)
        low = node.get(low_key, 1 if high is None else min(1, high))
        high = min(low + 3, high if high is not None else low + 2)
        return self.rng.randint(low, max(low, high))

    def _string(self, node: dict) -> str:
        fmt = node.get("format")
        if fmt in _FORMATS:
            return _FORMATS[fmt](self.rng)
        low, high = node.get("minLength", 0), node.get("maxLength")
        target = self.rng.randint(max(low, 12), max(low, 12) + 60)
        if high is not None:
            target = min(target, high)
        return _sentence(self.rng, target, low)

    def _integer(self, node: dict) -> int:
        low, high = _bounds(node, 0, 100, step=1)
        value = self.rng.randint(int(low), int(max(low, high)))
        step = node.get("multipleOf")
        return value - value % step if step and (value - value % step) >= low else value

    def _number(self, node: dict) -> float:
        low, high = _bounds(node, 0.0, 100.0, step=1e-6)
        return round(self.rng.uniform(low, max(low, high)), 6)

    def _boolean(self, node: dict) -> bool:
        return self.rng.random() < 0.5

    def _null(self, node: dict) -> None:
        return None


def _bounds(node: dict, low: float, high: float, *, step: float) -> tuple[float, float]:
    """Inclusive numeric bounds from minimum/maximum and their exclusive forms."""
    low = node.get("minimum", node["exclusiveMinimum"] + step if "exclusiveMinimum" in node else low)
    high = node.get("maximum", node["exclusiveMaximum"] - step if "exclusiveMaximum" in node else high)
    return low, high if high >= low else low + 100


def _sentence(rng: random.Random, target: int, low: int) -> str:
    """Plausible words, capitalised, about `target` characters and at least `low`."""
    if target <= 0:
        return ""
    words: list[str] = []
    while len(" ".join(words)) < target:
        words.append(rng.choice(WORDS))
    text = " ".join(words)[:target].strip() or rng.choice(WORDS)[:max(target, 1)]
    text = text[:1].upper() + text[1:]
    return text.ljust(low, "x")


_FORMATS = {
    "date-time": lambda rng: f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z",
    "date": lambda rng: f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
    "time": lambda rng: f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00",
    "email": lambda rng: f"{rng.choice(WORDS)}@example.com",
    "uri": lambda rng: f"https://example.com/{rng.choice(WORDS)}",
    "uuid": lambda rng: f"{rng.getrandbits(32):08x}-0000-4000-8000-{rng.getrandbits(48):012x}",
}
