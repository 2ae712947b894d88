"""Versioned publish: staging + validation + atomic rename, manifest, retention, concurrency, readers."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.dataset import (
    PublishError,
    load,
    publish,
    publish_staged,
    resolve,
    stage_tables,
    versions,
)
from pipeline.s5_assembly.assemble_contexts import assemble_all
from schemas.manifest import Manifest, PublishInfo
from schemas.tables import TABLES
from tests.support.factories import make_bundle, tiny_config


@pytest.fixture(scope="module")
def bundle():
    return make_bundle(tiny_config(n_personas=2))


@pytest.fixture(scope="module")
def tables(bundle):
    result = assemble_all(bundle.personas, bundle.sessions, bundle.queries,
                          settings=bundle.config.assembly, run_seed=bundle.config.seed)
    return bundle.model_copy(update={"sessions": result.sessions}).tables(result.contexts, result.placements)


@pytest.fixture(scope="module")
def info(bundle):
    return PublishInfo(config=bundle.config, code_version="test", models=["fake"])


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_publish_writes_an_immutable_version_with_manifest_and_latest(tmp_path, tables, info):
    path = publish(tmp_path, tables, info)
    assert path == tmp_path / "tiny" / "v0001"
    assert os.readlink(tmp_path / "tiny" / "latest") == "v0001"
    manifest = Manifest.model_validate_json((path / "manifest.json").read_text())
    assert manifest.validation["ok"] and manifest.seed == 7 and manifest.models == ["fake"]
    assert manifest.counts == {name: len(rows) for name, rows in tables.items()}
    assert set(manifest.files) == {f"{n}.parquet" for n in TABLES} | {"README.md"}
    for name, entry in manifest.files.items():
        assert entry.sha256 == _sha(path / name) and entry.bytes == (path / name).stat().st_size
    assert manifest.config["assembly"]["budgets"] == [4000, 8000]
    assert sorted(p.name for p in (tmp_path / "tiny").iterdir()) == [".lock", "latest", "v0001"]
    assert all(not f.stat().st_mode & 0o222 for f in path.iterdir())


def test_tables_use_zstd_and_nested_types_not_json_strings(tmp_path, tables, info):
    path = publish(tmp_path, tables, info)
    meta = pq.ParquetFile(path / "queries.parquet").metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    schema = pq.read_schema(path / "queries.parquet")
    assert pa.types.is_list(schema.field("options").type)
    assert pa.types.is_struct(schema.field("options").type.value_type)
    assert pq.read_schema(path / "contexts.parquet").field("session_ids").type == pa.list_(pa.string())


def test_load_returns_the_published_rows(tmp_path, tables, info):
    publish(tmp_path, tables, info)
    ds = load(tmp_path / "tiny")
    for name, rows in tables.items():
        assert getattr(ds, name) == rows, name
    assert resolve("tiny", outputs=tmp_path) == (tmp_path / "tiny" / "v0001").resolve()
    p = ds.placements[0]
    assert len(ds.materialize_context(p.context_id, upto=p.end_index)) == p.end_index


def test_same_inputs_give_byte_identical_tables(tmp_path, tables, info):
    a = publish(tmp_path / "a", tables, info)
    b = publish(tmp_path / "b", tables, info)
    for name in TABLES:
        assert _sha(a / f"{name}.parquet") == _sha(b / f"{name}.parquet"), name


def test_a_corrupted_staging_table_blocks_publication(tmp_path, tables, info):
    staging = stage_tables(tmp_path, "tiny", tables)
    (staging / "placements.parquet").write_bytes(b"PAR1 not really parquet")
    with pytest.raises(PublishError, match=r"placements\.parquet: unreadable"):
        publish_staged(staging, info)
    assert versions(tmp_path / "tiny") == [] and not (tmp_path / "tiny" / "latest").exists()


def test_a_file_that_does_not_read_back_as_written_blocks_publication(tmp_path, tables, info, monkeypatch):
    """publish() validates the rows in memory, so it proves each file holds exactly those rows."""
    import pipeline.dataset.publishing as dataset

    original = dataset.write_table

    def lossy(directory, name, rows):
        table = original(directory, name, rows)
        if name == "turns":
            pq.write_table(table.slice(1), directory / "turns.parquet", compression="zstd")
        return table

    monkeypatch.setattr(dataset, "write_table", lossy)
    with pytest.raises(PublishError, match=r"turns\.parquet: does not read back as written"):
        publish(tmp_path, tables, info)
    assert versions(tmp_path / info.config.dataset) == []


def test_a_table_with_the_wrong_schema_blocks_publication(tmp_path, tables, info):
    staging = stage_tables(tmp_path, "tiny", tables)
    table = pq.read_table(staging / "contexts.parquet")
    pq.write_table(table.set_column(2, "budget_tokens", table["budget_tokens"].cast(pa.string())),
                   staging / "contexts.parquet")
    with pytest.raises(PublishError, match="contexts.parquet: schema differs.*budget_tokens"):
        publish_staged(staging, info)
    assert versions(tmp_path / "tiny") == []


@pytest.mark.parametrize(
    ("table", "change", "message"),
    [
        ("contexts", lambda r: r.model_copy(update={"session_ids": [*r.session_ids, "ses_missing"]}),
         "contexts.session_ids: unknown id ses_missing"),
        ("placements", lambda r: r.model_copy(update={"end_index": r.end_index + 1}), "recomputed"),
        ("contexts", lambda r: r.model_copy(update={"budget_tokens": r.n_tokens - 1}), "over its budget"),
        ("contexts", lambda r: r.model_copy(update={"budget_tokens": r.budget_tokens * 2}), "below"),
        ("turns", lambda r: r.model_copy(update={"n_tokens": r.n_tokens + 1}), "n_tokens"),
        ("queries", lambda r: r.model_copy(update={"persona_id": "per_nobody"}), "queries.persona_id"),
        ("event_edges", lambda r: r.model_copy(update={"parent_event_id": r.child_event_id,
                                                       "child_event_id": r.parent_event_id}),
         "events/preferences: persona .*earlier"),
        ("queries", lambda r: r.model_copy(update={"as_of": datetime(2000, 1, 1)}), "a later session"),
    ],
)
def test_broken_integrity_publishes_nothing_and_says_why(tmp_path, tables, info, table, change, message):
    broken = dict(tables)
    broken[table] = [change(tables[table][0]), *tables[table][1:]]
    with pytest.raises(PublishError, match=message):
        publish(tmp_path, broken, info)
    assert not (tmp_path / "tiny").exists() or sorted(p.name for p in (tmp_path / "tiny").iterdir()) == []


def test_missing_tables_are_refused(tmp_path, tables, info):
    partial = {k: v for k, v in tables.items() if k != "placements"}
    with pytest.raises(PublishError, match="tables missing from the publish: placements"):
        publish(tmp_path, partial, info)


def test_keep_removes_only_old_complete_versions(tmp_path, tables, info):
    first = publish(tmp_path, tables, info)
    sha = _sha(first / "queries.parquet")
    other_staging = tmp_path / "tiny" / ".staging-publish-other"
    other_staging.mkdir()
    publish(tmp_path, tables, info)
    assert _sha(first / "queries.parquet") == sha
    publish(tmp_path, tables, info, keep=2)
    assert [p.name for p in versions(tmp_path / "tiny")] == ["v0002", "v0003"]
    assert os.readlink(tmp_path / "tiny" / "latest") == "v0003"
    assert other_staging.is_dir()
    with pytest.raises(PublishError, match="--keep 0"):
        publish(tmp_path, tables, info, keep=0)


def _publish_in_child(args) -> str:
    root, tables, info = args
    return publish(Path(root), tables, info).name


def test_two_concurrent_publishes_get_two_valid_versions(tmp_path, tables, info):
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        names = pool.map(_publish_in_child, [(str(tmp_path), tables, info)] * 2)
    assert sorted(names) == ["v0001", "v0002"]
    assert os.readlink(tmp_path / "tiny" / "latest") == "v0002"
    for version in versions(tmp_path / "tiny"):
        manifest = json.loads((version / "manifest.json").read_text())
        assert manifest["version"] == version.name and manifest["validation"]["ok"]
        for name, entry in manifest["files"].items():
            assert entry["sha256"] == _sha(version / name)
    assert not [p for p in (tmp_path / "tiny").iterdir() if p.name.startswith((".staging", ".trash"))]


def test_a_latest_folder_stops_the_publish_before_any_version(tmp_path, tables, info):
    """`latest` as a real folder: refused up front (preflight) and at the publish; no version, no stray link."""
    from pipeline.dataset import check_writable

    (tmp_path / "tiny" / "latest").mkdir(parents=True)
    with pytest.raises(PublishError, match=r"latest: expected a link to the newest version, found a folder"):
        check_writable(tmp_path, "tiny")
    with pytest.raises(PublishError, match="found a folder; move it aside, nothing published"):
        publish(tmp_path, tables, info)
    assert sorted(p.name for p in (tmp_path / "tiny").iterdir()) == [".lock", "latest"]


def test_the_writable_check_leaves_no_empty_folder(tmp_path):
    from pipeline.dataset import check_writable

    check_writable(tmp_path / "out", "tiny")
    assert list(tmp_path.iterdir()) == []


def test_keep_spares_a_version_another_live_process_published(tmp_path, tables, info):
    """Concurrent runs with --keep: a version whose publisher still runs (its pin held) is not pruned."""
    import subprocess
    import sys

    import pipeline.dataset.versioning

    first = publish(tmp_path, tables, info)
    pipeline.dataset.versioning._unpin(first)  # hand v0001's pin to another process, as if it had published it
    hold = "import fcntl, os, sys, time; fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_SH); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", hold, str(first)])
    try:
        while not pipeline.dataset.versioning._pinned_elsewhere(first):
            assert holder.poll() is None
        second = publish(tmp_path, tables, info, keep=1)
        assert [p.name for p in versions(tmp_path / "tiny")] == ["v0001", "v0002"]
        assert os.readlink(tmp_path / "tiny" / "latest") == second.name == "v0002"
    finally:
        holder.kill()
        holder.wait()
    publish(tmp_path, tables, info, keep=1)  # the other process is gone: its version and our older one go
    assert [p.name for p in versions(tmp_path / "tiny")] == ["v0003"]
