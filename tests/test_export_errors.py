"""A damaged version and a bad --out give one clear line and exit 2, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli.app import app
from pipeline.dataset import DamagedDataset, load, verify
from tests.support.smoke import publish_smoke


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return publish_smoke(tmp_path_factory.mktemp("smoke"))


def copy_version(smoke, tmp_path):
    """A writable copy of the published version, to damage."""
    target = tmp_path / "copy" / "v0001"
    shutil.copytree(smoke, target)
    for path in target.iterdir():
        path.chmod(0o644)
    return target


def one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    for needle in needles:
        assert needle in lines[0], result.output


def test_a_truncated_table_is_named_by_load_inspect_export_and_eval(smoke, tmp_path):
    version = copy_version(smoke, tmp_path)
    turns = version / "turns.parquet"
    turns.write_bytes(turns.read_bytes()[: turns.stat().st_size // 2])
    with pytest.raises(DamagedDataset, match="turns.parquet: damaged"):
        load(version)
    load(version, tables=["queries"])  # the tables it reads are intact
    runner = CliRunner()
    one_line_error(runner.invoke(app, ["inspect", str(version)]), "turns.parquet: damaged")
    for command in (["export", "personamem", str(version), "--out", str(tmp_path / "pm")],
                    ["export", "longmemeval", str(version), "--out", str(tmp_path / "lme")],
                    ["export", "jsonl", str(version), "--out", str(tmp_path / "all.jsonl")],
                    ["eval", str(version), "--llm", "fake", "--cache", str(tmp_path / "cache.sqlite")]):
        one_line_error(runner.invoke(app, command), str(turns), "damaged")


def test_a_missing_table_and_a_damaged_manifest_are_one_line(smoke, tmp_path):
    version = copy_version(smoke, tmp_path)
    (version / "placements.parquet").unlink()
    with pytest.raises(DamagedDataset, match="placements.parquet: missing"):
        verify(version)
    manifest = version / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "files": "broken"}))
    one_line_error(CliRunner().invoke(app, ["inspect", str(version)]), "manifest.json: damaged", "files")


def test_an_edited_readme_is_caught_by_inspect_but_not_by_load(smoke, tmp_path):
    version = copy_version(smoke, tmp_path)
    (version / "README.md").write_text("edited\n")
    load(version)
    one_line_error(CliRunner().invoke(app, ["inspect", str(version)]), "README.md: damaged")


def test_out_is_a_file_or_under_a_file(smoke, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder\n")
    runner = CliRunner()
    for kind in ("personamem", "longmemeval"):
        one_line_error(runner.invoke(app, ["export", kind, str(smoke), "--out", str(blocker)]),
                       f"--out {blocker}: is a file")
        one_line_error(runner.invoke(app, ["export", kind, str(smoke), "--out", str(blocker / "sub")]),
                       f"--out {blocker / 'sub'}: folder is not writable")
    one_line_error(runner.invoke(app, ["export", "jsonl", str(smoke), "--out", str(blocker / "x.jsonl")]),
                   str(blocker / "x.jsonl"), "cannot write")
    one_line_error(runner.invoke(app, ["export", "jsonl", str(smoke), "--out", str(tmp_path)]),
                   f"--out {tmp_path}: is a folder")
    assert blocker.read_text() == "not a folder\n"


def _lock(folder: Path) -> bool:
    """Make `folder` unwritable: mode 555, and immutable for root (who writes through modes); False if it can't be."""
    folder.chmod(0o555)
    if os.geteuid() != 0:
        return True
    return subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0


def _unlock(folder: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
    folder.chmod(0o755)


def test_out_is_a_read_only_folder(smoke, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    try:
        if not _lock(locked):
            pytest.skip("cannot make a folder unwritable for root here (no chattr)")
        one_line_error(CliRunner().invoke(app, ["export", "personamem", str(smoke), "--out", str(locked)]),
                       f"--out {locked}: folder is not writable")
    finally:
        _unlock(locked)
    assert list(locked.iterdir()) == []


@pytest.mark.parametrize("name", ["../../../etc/hostname", "/etc/hostname", "sub/queries.parquet", ".."])
def test_a_manifest_entry_pointing_outside_the_version_is_damage(smoke, tmp_path, name):
    """A manifest that lists a file outside the version (its checksum matching or not) never passes."""
    import hashlib

    version = copy_version(smoke, tmp_path)
    outside = (version / name) if not name.startswith("/") else Path(name)
    entry = {"rows": None, "bytes": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    if outside.is_file():
        data = outside.read_bytes()
        entry = {"rows": None, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest = version / "manifest.json"
    body = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**body, "files": {**body["files"], name: entry}}))
    with pytest.raises(DamagedDataset, match="not a file of this version"):
        verify(version)
    one_line_error(CliRunner().invoke(app, ["inspect", str(version)]), "manifest.json: damaged", name)
