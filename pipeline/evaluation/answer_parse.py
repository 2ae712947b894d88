"""Parse a model's free-text multiple-choice answer into an option letter, leniently but never by guessing.

The text after the last `<final_answer>` marker is read first, then the whole reply. Rules, in order:
a letter that opens the text ("(b)", "B)", "b."), an answer phrase ("Answer: b", "the answer is
option C", "I'd pick (d)"; the last one wins), a single distinct parenthesized letter, and finally the
text of exactly one option. Anything else is unparseable (None), which the evaluator scores as wrong.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

MARKER = "<final_answer>"
Rule = Literal["leading", "phrase", "parenthesized", "option_text", "none"]

_LETTER = r"(?:\((?P<p>[a-z])\)|\[(?P<b>[a-z])\]|(?P<w>[a-z])(?![a-z0-9'’]))"
_LEADING = re.compile(r"^[\s:>\-–=#]*" + _LETTER, re.IGNORECASE)
_PHRASE = re.compile(
    r"(?:final answer|answer|option|choice|choose|chose|pick|select|selected|go with|going with)"
    r"(?:\s*(?:is|would be|will be|should be|=|:|-)\s*|\s+)(?:(?:option|choice|letter)\s*)?" + _LETTER,
    re.IGNORECASE,
)
_PAREN = re.compile(r"\(([a-z])\)", re.IGNORECASE)
_MARKERS = re.compile(r"</?\s*final_answer\s*>", re.IGNORECASE)
_EMPHASIS = re.compile(r"[*`~]+")
_SPACES = re.compile(r"\s+")


class ParsedAnswer(BaseModel):
    """The option letter a reply names (None: unparseable) and the rule that found it."""

    letter: str | None
    rule: Rule


def letters(n_options: int) -> str:
    """The valid option letters: 'abcd' for four options."""
    return "abcdefghijklmnopqrstuvwxyz"[:n_options]


def parse_answer(text: str, options: list[str]) -> ParsedAnswer:
    """The option letter `text` names, reading after the last `<final_answer>` marker first."""
    clean = _EMPHASIS.sub("", text or "")
    segments = []
    lowered = clean.lower()
    if MARKER in lowered:
        after = clean[lowered.rindex(MARKER) + len(MARKER):]
        segments.append(_MARKERS.split(after)[0])
    segments.append(_MARKERS.sub(" ", clean))
    for segment in segments:
        found = _parse_segment(segment, options)
        if found.letter is not None:
            return found
    return ParsedAnswer(letter=None, rule="none")


def _parse_segment(segment: str, options: list[str]) -> ParsedAnswer:
    valid = letters(len(options))
    for rule, finder in (("leading", _leading), ("phrase", _phrase), ("parenthesized", _parenthesized)):
        letter = finder(segment, valid)
        if letter is not None:
            return ParsedAnswer(letter=letter, rule=rule)
    letter = _option_text(segment, options)
    return ParsedAnswer(letter=letter, rule="option_text" if letter else "none")


def _pick(match: re.Match, valid: str, *, strict_bare: bool) -> str | None:
    """The letter of a _LETTER match; a bare 'a'/'A' before a lowercase word is the article, not an option."""
    letter = (match.group("p") or match.group("b") or match.group("w")).lower()
    if letter not in valid:
        return None
    bare = match.group("w") is not None
    rest = match.string[match.end():]
    if bare and strict_bare and not re.match(r"[ \t]*(?:[).:,;!\]\-–\n]|$)", rest):
        return None
    if match.group("w") == "a" and re.match(r"\s+[a-z]", rest):
        return None
    return letter


def _leading(segment: str, valid: str) -> str | None:
    match = _LEADING.match(segment)
    return _pick(match, valid, strict_bare=True) if match else None


def _phrase(segment: str, valid: str) -> str | None:
    picked = [_pick(m, valid, strict_bare=False) for m in _PHRASE.finditer(segment)]
    picked = [p for p in picked if p is not None]
    return picked[-1] if picked else None


def _parenthesized(segment: str, valid: str) -> str | None:
    found = {m.group(1).lower() for m in _PAREN.finditer(segment)} & set(valid)
    return found.pop() if len(found) == 1 else None


def _normal(text: str) -> str:
    return _SPACES.sub(" ", re.sub(r"[^\w\s]", " ", text.lower())).strip()


def _option_text(segment: str, options: list[str]) -> str | None:
    """The letter of the one option whose text the segment contains (or that contains a long segment)."""
    body = _normal(segment)
    if not body:
        return None
    hits = [i for i, o in enumerate(options) if _normal(o) and _normal(o) in body]
    if not hits and len(body) >= 12:
        hits = [i for i, o in enumerate(options) if body in _normal(o)]
    return letters(len(options))[hits[0]] if len(hits) == 1 else None
