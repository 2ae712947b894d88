"""The ``personagen`` command line: the top layer, the only part of pipeline/ that may import flows/."""

from pipeline.cli.app import app, main

__all__ = ["app", "main"]
