"""Errors a user can fix; the CLI prints their one-line message and exits non-zero. Secrets are redacted
from every message (`redact`)."""

import functools
import os
import re
from urllib.parse import unquote


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
# Variables holding a URL whose credentials (user:password@) are secret.
URL_VARS = ("OPENAI_BASE_URL",)
_SECRET_PATTERNS = (
    (re.compile(r"(?i)\b(bearer)\s+[^\s'\",;)]+"), r"\1 [redacted]"),  # an Authorization header's value
    (re.compile(r"\bsk-[A-Za-z0-9_\-.~+/\\]{6,}"), "sk-[redacted]"),                # OpenAI-style keys
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@?#]+@"), r"\1[redacted]@"),  # credentials in a URL
)
REDACTED = "[redacted]"
# The shortest piece of a secret that is redacted wherever it appears, in any case.
SECRET_PIECE = 8


def _url_credentials(url: str) -> list[str]:
    """The user and password parts of ``url``'s authority (percent-encoded as written, and decoded)."""
    match = re.match(r"(?i)^\s*[a-z][a-z0-9+.-]*://([^/\s@?#]+)@", url)
    if not match:
        return []
    parts = [match.group(1), *match.group(1).split(":", 1)]
    return parts + [unquote(part) for part in parts]


def _secret_values() -> list[str]:
    values = {v for name, v in os.environ.items() if v and (name in SECRET_VARS or _SECRET_VAR_NAME.search(name))}
    values |= {part for name in URL_VARS for part in _url_credentials(os.environ.get(name, ""))}
    forms = set()
    for value in values:
        for form in (value, value.strip(), repr(value)[1:-1], value.encode("unicode_escape").decode("ascii")):
            if len(form) >= SECRET_PIECE:
                forms.add(form.lower())
    return sorted(forms, key=len, reverse=True)


@functools.lru_cache(maxsize=16)
def _pieces(secrets: tuple[str, ...]) -> frozenset[str]:
    """Every piece of ``SECRET_PIECE`` characters of the (lower-cased) secrets; built once per set of secrets
    (``redact`` runs on every reply and cache row)."""
    return frozenset(s[i:i + SECRET_PIECE] for s in secrets for i in range(len(s) - SECRET_PIECE + 1))


def _secret_spans(text: str, secrets: list[str]) -> list[tuple[int, int]]:
    """Where ``text`` holds a piece of ``SECRET_PIECE`` or more characters of a secret, in any case: every
    window of that length that is a piece of one (found with str.find), merged into spans."""
    lowered, starts = text.lower(), set()
    for piece in _pieces(tuple(secrets)):
        i = lowered.find(piece)
        while i != -1:
            starts.add(i)
            i = lowered.find(piece, i + 1)
    spans: list[tuple[int, int]] = []
    for i in sorted(starts):
        if spans and i <= spans[-1][1]:
            spans[-1] = (spans[-1][0], i + SECRET_PIECE)
        else:
            spans.append((i, i + SECRET_PIECE))
    return spans


def redact(text: object) -> str:
    """``text`` with every secret replaced: any piece of 8 or more characters, in any case, of the values of
    secret environment variables (OPENAI_API_KEY and any ``*API_KEY``/``*_TOKEN``/``*_SECRET``/``*PASSWORD``,
    also as Python escapes them) and of the credentials in OPENAI_BASE_URL; ``sk-...`` tokens, Bearer
    credentials and the user:password part of any URL."""
    out = str(text)
    secrets = _secret_values()
    if secrets and len(out) >= SECRET_PIECE:
        for start, end in reversed(_secret_spans(out, secrets)):
            out = out[:start] + REDACTED + out[end:]
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
