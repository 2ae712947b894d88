"""Errors a user can fix; the CLI prints their one-line message and exits non-zero. Secrets are redacted
from every message (`redact`)."""

import os
import re


class UserError(Exception):
    """Bad input or configuration. ``str(err)`` is one line naming the file, field or line."""


def first_validation_error(exc, where: str) -> str:
    """One line from a pydantic ValidationError: ``where: field.path: message``."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "(top level)"
    return f"{where}: {field}: {err['msg']}"


# Environment variables whose values are secrets: never printed, logged or stored (see `redact`).
SECRET_VARS = ("OPENAI_API_KEY",)
_SECRET_VAR_NAME = re.compile(r"(API_KEY|_TOKEN|_SECRET|PASSWORD)$")
_SECRET_PATTERNS = (
    (re.compile(r"(?i)\b(bearer)\s+[^\s'\",;)]+"), r"\1 [redacted]"),  # an Authorization header's value
    (re.compile(r"\bsk-[A-Za-z0-9_\-.~+/\\]{6,}"), "sk-[redacted]"),                # OpenAI-style keys
)
REDACTED = "[redacted]"


def _secret_values() -> list[str]:
    values = {v for name, v in os.environ.items() if v and (name in SECRET_VARS or _SECRET_VAR_NAME.search(name))}
    forms = set()
    for value in values:
        for form in (value, value.strip(), repr(value)[1:-1], value.encode("unicode_escape").decode("ascii")):
            if len(form) >= 8:
                forms.add(form)
    return sorted(forms, key=len, reverse=True)


def redact(text: object) -> str:
    """``text`` with every secret replaced: the values of secret environment variables (OPENAI_API_KEY and
    any ``*API_KEY``/``*_TOKEN``/``*_SECRET``/``*PASSWORD``, also as Python escapes them), ``sk-...`` tokens
    and Bearer credentials."""
    out = str(text)
    for value in _secret_values():
        out = out.replace(value, REDACTED)
    for pattern, replacement in _SECRET_PATTERNS:
        out = pattern.sub(replacement, out)
    return out


def key_form_problem(value: str) -> str | None:
    """Why a credential cannot go into an HTTP header (never quoting it), or None."""
    for i, ch in enumerate(value):
        if ord(ch) < 32 or ord(ch) == 127:
            return f"holds a control character at position {i + 1}"
        if ch.isspace():
            return f"holds whitespace at position {i + 1}"
        if ord(ch) > 126:
            return f"holds a non-ASCII character at position {i + 1}"
    return None
