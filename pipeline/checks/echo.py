"""Does a model-written text repeat its prompt? A small model often answers with the instructions it was given
("You are a helpful AI assistant. You give practical, friendly advice about travel planning..."), a role line,
or the persona's profile copied out. Pure code: word n-grams shared with the prompts' own text (every
template's literal text, outside its tags, so whatever a template is edited to say counts), role lines, and
long spans of the profile."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from jinja2 import nodes

from pipeline.checks.quality import words
from pipeline.prompting import PromptEnv, default_prompts_dir

PROMPT_SPAN = 6  # consecutive words shared with a template's own text: instructions, not a turn of phrase
PROFILE_SPAN = 8  # consecutive words of the persona's profile: copied out, not said
ROLE_LINE = re.compile(
    r"\b(?:you are|you're|i am|i'm) (?:a |an |my |the |your )?(?:very )?(?:helpful|friendly|harmless|honest|useful)?,? ?"
    r"(?:ai |artificial intelligence )?(?:assistant|chatbot|language model)\b|\bas an ai (?:assistant|language model|model)\b|"
    r"\bi am (?:an|a|your) (?:ai|artificial intelligence|language model|large language model)\b", re.IGNORECASE)


def _grams(text: str, n: int) -> set[tuple[str, ...]]:
    ws = [w.lower() for w in words(text)]
    return {tuple(ws[i:i + n]) for i in range(len(ws) - n + 1)}


@lru_cache(maxsize=4)
def prompt_grams(root: Path) -> frozenset[tuple[str, ...]]:
    """The ``PROMPT_SPAN``-word sequences of every template's literal text under ``root`` (tags and
    comments left out: a variable's value is data, which a turn may well repeat)."""
    env = PromptEnv(root)
    out: set[tuple[str, ...]] = set()
    for name in env.template_names():
        ast = env.jinja.parse(env.source(name), name=name, filename=name)
        for node in ast.find_all(nodes.TemplateData):
            out |= _grams(node.data, PROMPT_SPAN)
    return frozenset(out)


def echo_problem(text: str, profile: str = "", *, root: Path | None = None) -> str | None:
    """Why ``text`` repeats its prompt (an instruction, a role line, the persona's profile), or None."""
    role = ROLE_LINE.search(text)
    if role:
        return f"repeats a role line ({role.group(0)!r})"
    shared = _grams(text, PROMPT_SPAN) & prompt_grams(root or default_prompts_dir())
    if shared:
        return f"repeats the prompt's instructions ({' '.join(min(shared))!r})"
    if profile and (copied := _grams(text, PROFILE_SPAN) & _grams(profile, PROFILE_SPAN)):
        return f"copies the persona's profile ({' '.join(min(copied))!r})"
    return None
