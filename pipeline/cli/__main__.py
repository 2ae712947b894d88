"""`python -m pipeline.cli`: the same as the `personagen` command."""

from pipeline.cli.app import main

main()
