"""A human audit recorded on a dataset: published versions are immutable, so the audited figures go into a
new version of the same tables (the same files, byte for byte, checksums unchanged) whose manifest carries
``stats.audit`` (``of`` names the version the raters saw) and whose card gains a "Human audit" section."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

from pipeline.dataset.card import render_card
from pipeline.dataset.publishing import PUBLISHED, _read_only
from pipeline.dataset.reading import read_manifest
from pipeline.dataset.store import PublishError, _file_entry, make_staging
from pipeline.dataset.versioning import _locked, _next_version, _pin, _point_latest


def publish_audit(version: Path, audit: dict, tables: dict) -> Path:
    """Publish ``version``'s tables again as the next version, with ``audit`` in its manifest and card."""
    source = read_manifest(version)
    parent = version.parent
    with _locked(parent):
        staging = make_staging(parent, "audit")
        try:
            for name in source.files:
                if name != "README.md":
                    _link_or_copy(version / name, staging / name)
            manifest = source.model_copy(update={
                "version": _next_version(parent), "created_at": datetime.now(UTC).replace(microsecond=0),
                "stats": source.stats | {"audit": audit | {"of": source.version}},
                "files": {n: e for n, e in source.files.items() if n != "README.md"}})
            (staging / "README.md").write_text(render_card(manifest, tables), encoding="utf-8")
            manifest.files["README.md"] = _file_entry(staging / "README.md", None)
            (staging / "manifest.json").write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
            _read_only(staging)
            target = parent / manifest.version
            os.rename(staging, target)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise PublishError(f"{parent}: cannot write the audited version ({exc.strerror or exc}); "
                               "nothing published") from None
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        PUBLISHED.append(target)
        _pin(target)
        _point_latest(parent)
    return target


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link where the file system allows (read-only files are never written again), else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
