"""Loads the built-in item catalog and taxonomy shipped in ``pipeline/data/``."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml
from pydantic import ValidationError

from pipeline.errors import UserError, first_validation_error
from schemas.catalog import Catalog, InventoryItem, Taxonomy

DATA_DIR = Path(__file__).parents[1] / "data"


class DataFileError(UserError, ValueError):
    """A data or config file is malformed; the message names the file and the field."""


def load_yaml_model(path: Path, model: type):
    """Parse ``path`` as YAML into ``model``; errors name the file and the first bad field."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise DataFileError(f"{path}: file not found") from exc
    except IsADirectoryError:
        raise DataFileError(f"{path}: is a folder; give a YAML file") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise DataFileError(f"{path}:{line}: not UTF-8 text (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise DataFileError(f"{path}{where}: invalid YAML ({getattr(exc, 'problem', exc)})") from exc
    try:
        return model.model_validate(raw or {})
    except ValidationError as exc:
        raise DataFileError(first_validation_error(exc, str(path))) from exc


@cache
def load_catalog(path: Path = DATA_DIR / "catalog.yaml") -> Catalog:
    return load_yaml_model(path, Catalog)


@cache
def load_taxonomy(path: Path = DATA_DIR / "taxonomy.yaml") -> Taxonomy:
    return load_yaml_model(path, Taxonomy)


def catalog_inventory(topics: list[str], catalog: Catalog | None = None) -> dict[str, list[InventoryItem]]:
    """The per-topic candidate items from the catalog; an unknown topic is an error naming it."""
    catalog = catalog or load_catalog()
    unknown = [t for t in topics if t not in catalog.topics]
    if unknown:
        known = ", ".join(sorted(catalog.topics))
        raise DataFileError(f"unknown topic(s) {', '.join(unknown)}; the catalog knows: {known}")
    return {t: [InventoryItem(name=i.name, tags=list(i.tags)) for i in catalog.topics[t].items] for t in topics}
