"""No command removes a path it cannot prove it made: the user's cache link (dangling or not) and a version
folder personagen did not publish survive --keep, prune and a failed start."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli.app import app
from pipeline.dataset import publish, versions
from pipeline.dataset.versioning import not_ours, prune
from pipeline.s5_assembly.assemble_contexts import assemble_all
from schemas.manifest import PublishInfo
from tests.support.factories import make_bundle, tiny_config


@pytest.fixture(scope="module")
def published():
    bundle = make_bundle(tiny_config(n_personas=2))
    result = assemble_all(bundle.personas, bundle.sessions, bundle.queries,
                          settings=bundle.config.assembly, run_seed=bundle.config.seed)
    tables = bundle.model_copy(update={"sessions": result.sessions}).tables(result.contexts, result.placements)
    return tables, PublishInfo(config=bundle.config, code_version="test", models=["fake"])


def _users_folder(dataset: Path, name: str = "v0001") -> Path:
    """A folder a user made where a version would be: their thesis and a manifest of their own."""
    folder = dataset / name
    folder.mkdir(parents=True)
    (folder / "thesis.txt").write_text("three years of work\n")
    (folder / "manifest.json").write_text(json.dumps({"name": "mine"}))
    return folder


def test_keep_never_removes_a_version_folder_personagen_did_not_publish(tmp_path, published):
    tables, info = published
    mine = _users_folder(tmp_path / "tiny")
    publish(tmp_path, tables, info, keep=1)
    assert (mine / "thesis.txt").read_text() == "three years of work\n"
    assert "manifest" in not_ours(mine)


def test_prune_keeps_a_lookalike_and_a_tampered_version_and_says_why(tmp_path, published):
    tables, info = published
    first = publish(tmp_path, tables, info)       # v0001: ours, then a user's file is added to it
    second = publish(tmp_path, tables, info)      # v0002: ours, then one of its tables is changed
    third = publish(tmp_path, tables, info)       # v0003: ours and untouched
    publish(tmp_path, tables, info)               # v0004: the newest
    first.chmod(0o755)
    (first / "notes.md").write_text("mine")
    os.chmod(second / "queries.parquet", 0o644)
    with (second / "queries.parquet").open("ab") as fh:
        fh.write(b"x")
    kept: list[str] = []
    removed = prune(tmp_path / "tiny", 1, kept=kept)
    assert removed == [third.name]
    assert [k.split()[0] for k in kept] == ["v0001", "v0002"]
    assert "notes.md" in kept[0] and "damaged" in kept[1]
    assert (first / "notes.md").exists() and (second / "queries.parquet").exists()


def test_prune_command_spares_a_web_apps_folder(tmp_path, published):
    tables, info = published
    app_folder = _users_folder(tmp_path / "tiny")
    publish(tmp_path, tables, info)
    newest = publish(tmp_path, tables, info)
    result = CliRunner().invoke(app, ["prune", str(newest), "--keep", "1", "--outputs", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (app_folder / "thesis.txt").exists()
    assert "kept v0001" in result.stdout and "removed: v0002" in result.stdout
    assert [p.name for p in versions(tmp_path / "tiny")] == ["v0001", "v0003"]


def test_a_version_with_its_report_and_eval_runs_is_still_ours(tmp_path, published):
    from pipeline.dataset.files import write_report

    tables, info = published
    version = publish(tmp_path, tables, info)
    version.chmod(0o755)
    write_report(version, {"report.html": b"<html></html>"})
    assert not_ours(version) is None
    (version / "report" / "mine.txt").write_text("x")
    assert "report/mine.txt" in not_ours(version)


def _generate(tmp_path: Path, cache: Path, *extra: str, env: dict | None = None):
    args = ["generate", "--n", "1", "--profile", "smoke", "--outputs", str(tmp_path / "o"), "--cache", str(cache),
            *extra]
    return CliRunner().invoke(app, args, env=env)


def test_a_dangling_cache_link_survives_a_failed_start(tmp_path):
    link = tmp_path / "mycache.sqlite"
    link.symlink_to(tmp_path / "not-mounted" / "llm.sqlite")
    result = _generate(tmp_path, link, "--llm", "fake")
    assert result.exit_code != 0 and "cannot open the LLM cache" in result.output
    assert link.is_symlink() and os.readlink(link) == str(tmp_path / "not-mounted" / "llm.sqlite")
    assert not (tmp_path / "not-mounted").exists()


def test_a_cache_link_into_a_folder_survives_a_server_that_is_down_and_leaves_no_orphan(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target_folder = tmp_path / "elsewhere"
    target_folder.mkdir()
    (target_folder / "keep.txt").write_text("mine")
    link = tmp_path / "mycache.sqlite"
    link.symlink_to(target_folder / "llm.sqlite")
    result = _generate(tmp_path, link, "--llm", "openai:test-model",
                       env={"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": ""})
    assert result.exit_code == 2 and "cannot reach" in result.output, result.output
    assert link.is_symlink()
    assert sorted(p.name for p in target_folder.iterdir()) == ["keep.txt"]  # the file it made, removed again


def test_the_writable_probe_survives_another_command_removing_its_folder_and_leaves_theirs(tmp_path, monkeypatch):
    """Two commands probing the same new outputs folder at once: the other one's clean-up removing the folder
    between our mkdir and our probe is a retry, not 'not writable'; a folder the other command made (existing
    before our probe) is never removed by ours."""
    from pipeline.dataset import store

    target = tmp_path / "out" / "smoke"
    real_write = Path.write_bytes
    removed = []

    def racing_write(self, data):
        if self.name.startswith(".probe-") and not removed:  # the other command's clean-up wins the race
            removed.append(self.parent)
            self.parent.rmdir()
            self.parent.parent.rmdir()
        return real_write(self, data)

    monkeypatch.setattr(Path, "write_bytes", racing_write)
    assert store.writable_problem(target) is None and removed == [target]
    assert not (tmp_path / "out").exists()
    monkeypatch.undo()
    theirs = tmp_path / "theirs" / "smoke"
    theirs.mkdir(parents=True)
    assert store.writable_problem(theirs) is None and theirs.is_dir()
