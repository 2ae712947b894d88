"""What one ask sends and how its reply is judged: the schema check, the re-ask that shows the rejected reply, the
resample that does not, and the labels the cache records."""

from __future__ import annotations

import json
from dataclasses import replace

from pydantic import BaseModel, ValidationError

from pipeline.errors import redact
from pipeline.llm.backends import BackendReply, BackendRequest
from pipeline.prompting import PromptSpec

REASK = "Your previous reply was rejected: {problem}\nReply again with a corrected answer to the request above."


RESAMPLE = "(An earlier answer to this was rejected: {problem}.)"


def call_label(spec: PromptSpec) -> str:
    """What the cache records as a call's spec: its name and output model, e.g.
    ``expand_persona.inventory/InventoryDraft10`` (sized outputs carry their size, so the plan can tell
    a 10-item inventory call from a 4-item one)."""
    return f"{spec.name}/{spec.output.__name__}"


def first_ask(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The messages of a call's first ask, from those of any later ask (`reasked`, `resampled`)."""
    if any(m["role"] == "assistant" for m in messages):
        messages = messages[:next(i for i, m in enumerate(messages) if m["role"] == "assistant")]
    note = "\n\n" + RESAMPLE.split("{problem}")[0]
    last = messages[-1]["content"] if messages else ""
    if note in last:
        messages = [*messages[:-1], {**messages[-1], "content": last[:last.index(note)]}]
    return messages


def validate_reply(reply: BackendReply, output: type[BaseModel]) -> tuple[BaseModel | None, str]:
    """The parsed output, or None and a one-paragraph reason to feed back."""
    if reply.finish_reason in ("length", "content_filter"):
        return None, f"the reply stopped early (finish_reason={reply.finish_reason}); answer more briefly"
    if reply.finish_reason == "repetition":
        return None, "the reply fell into repeating itself and was cut off; write each part once, briefly"
    try:
        # strict=False: raw newlines inside strings (small models under a grammar write them) are accepted
        data = json.loads(reply.text, strict=False)
    except json.JSONDecodeError as exc:
        return None, f"it is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    try:
        return output.model_validate(data), ""
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors()[:8])
        return None, f"it did not match the required schema ({details})"


def reasked(request: BackendRequest, reply: BackendReply, problem: str, ask: int) -> BackendRequest:
    """The request extended with the rejected reply (cut to what the token cap allows: a server that ignores
    ``max_tokens`` must not have its whole reply echoed back, re-ask after re-ask) and the reason."""
    messages = [*request.messages, {"role": "assistant", "content": _echo(reply.text, request.max_tokens)},
                {"role": "user", "content": REASK.format(problem=problem)}]
    return replace(request, messages=messages, attempt=100 * ask)


ECHO_CHARS_PER_TOKEN = 4


def _echo(text: str, max_tokens: int) -> str:
    """``text`` as a re-ask shows it: at most about ``max_tokens`` tokens, the cut said."""
    limit = ECHO_CHARS_PER_TOKEN * max_tokens
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit:,} more characters cut]"


def resampled(request: BackendRequest, problem: str, ask: int) -> BackendRequest:
    """The original request, the reason added to its last message and a new seed: a fresh sample for
    backends whose rejected replies only mislead the next ask (a small local model copies its own loop)."""
    messages = [dict(m) for m in first_ask(request.messages)]  # one note, the latest, however many asks
    messages[-1]["content"] = f"{messages[-1]['content']}\n\n{RESAMPLE.format(problem=problem)}"
    return replace(request, messages=messages, seed=request.seed + 1000 * ask, attempt=100 * ask)


def with_attempt(request: BackendRequest, retry: int) -> BackendRequest:
    """`attempt` numbers tries as 100 * re-ask + transport retry (seeds the fake backend's faults)."""
    return replace(request, attempt=request.attempt - request.attempt % 100 + retry)


def describe_error(error: Exception | None) -> str:
    """One line naming a transport error."""
    if isinstance(error, TimeoutError):
        return "timed out"
    return redact(str(error).splitlines()[0]) if error and str(error) else type(error).__name__
