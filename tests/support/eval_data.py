"""A small published dataset version for eval and report tests (fake text, exact annotations)."""

from __future__ import annotations

from pathlib import Path

from pipeline.dataset import publish
from pipeline.s5_assembly.assemble_contexts import assemble_all
from schemas.manifest import PublishInfo
from tests.support.factories import make_bundle, tiny_config


def publish_tiny(root: Path, *, n_personas: int = 3, budgets: tuple[int, ...] = (2000, 4000)) -> Path:
    """Plan, write fake sessions and queries, assemble and publish; returns the version folder."""
    bundle = make_bundle(tiny_config(n_personas=n_personas, budgets=budgets))
    result = assemble_all(bundle.personas, bundle.sessions, bundle.queries,
                          settings=bundle.config.assembly, run_seed=bundle.config.seed)
    tables = bundle.model_copy(update={"sessions": result.sessions}).tables(result.contexts, result.placements)
    return publish(root, tables, PublishInfo(config=bundle.config, code_version="test", models=["fake"]))
