"""Errors a user can fix; the CLI prints their one-line message and exits non-zero."""


class UserError(Exception):
    """Bad input or configuration. ``str(err)`` is one line naming the file, field or line."""


def first_validation_error(exc, where: str) -> str:
    """One line from a pydantic ValidationError: ``where: field.path: message``."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "(top level)"
    return f"{where}: {field}: {err['msg']}"
