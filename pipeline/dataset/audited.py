"""A human audit recorded on a dataset: published versions are immutable, so the audited figures go into a
new version of the same tables (the same files, byte for byte, checksums unchanged) whose manifest carries
``stats.audit`` (``of`` names the version the raters saw) and whose card gains a "Human audit" section."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

from pipeline.dataset.publishing import _check_latest, announce, seal
from pipeline.dataset.reading import read_manifest
from pipeline.dataset.store import PublishError, make_staging
from pipeline.dataset.versioning import _locked, _next_version


def publish_audit(version: Path, audit: dict, tables: dict) -> Path:
    """Publish ``version``'s tables again as the next version, with ``audit`` in its manifest and card."""
    source = read_manifest(version)
    parent = version.parent
    with _locked(parent):
        _check_latest(parent)
        staging = make_staging(parent, "audit")
        try:
            for name in source.files:
                if name != "README.md":
                    _link_or_copy(version / name, staging / name)
            manifest = source.model_copy(update={
                "version": _next_version(parent), "created_at": datetime.now(UTC).replace(microsecond=0),
                "stats": source.stats | {"audit": audit | {"of": source.version}},
                "files": {n: e for n, e in source.files.items() if n != "README.md"}})
            target = seal(staging, manifest, tables)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise PublishError(f"{parent}: cannot write the audited version ({exc.strerror or exc}); "
                               "nothing published") from None
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        announce(target)
    return target


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link where the file system allows (read-only files are never written again), else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
