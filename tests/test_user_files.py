"""No command deletes or overwrites a file or folder it did not create: a user's file planted in every
`--out` and `--outputs` a command accepts survives, or the command refuses in one line (exit 2)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from pipeline.cli.app import app
from pipeline.dataset.files import EVAL_FALLBACK
from pipeline.dataset.store import writable_problem
from tests.support.smoke import publish_smoke

OUT_MARKER = ".personagen-out"
THESIS = "my thesis, three years of work\n"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return publish_smoke(tmp_path_factory.mktemp("smoke"))


def run(*args: str) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def refused(result: Result, *needles: str) -> str:
    """Exit 2 and one `error:` line on stderr naming every needle."""
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, (result.exit_code, result.output[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def planted(folder: Path, name: str = "thesis.txt") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(THESIS, encoding="utf-8")
    return path


def test_plan_refuses_a_folder_holding_a_users_file_and_never_turns_a_file_into_a_folder(tmp_path):
    thesis = planted(tmp_path / "d")
    refused(run("plan", "--n", "1", "--profile", "smoke", "--out", tmp_path / "d"), "--out", "thesis.txt")
    assert thesis.read_text(encoding="utf-8") == THESIS and sorted(os.listdir(tmp_path / "d")) == ["thesis.txt"]
    notes = tmp_path / "notes.txt"
    notes.write_text(THESIS, encoding="utf-8")
    refused(run("plan", "--n", "1", "--profile", "smoke", "--out", notes), "is a file")
    assert notes.is_file() and notes.read_text(encoding="utf-8") == THESIS


def test_plan_into_outputs_refuses_and_keeps_every_dataset_and_the_cache(smoke):
    outputs = smoke.parents[1]
    before = sorted(p.relative_to(outputs) for p in outputs.rglob("*"))
    refused(run("plan", "--n", "2", "--profile", "smoke", "--out", outputs), "--out")
    assert sorted(p.relative_to(outputs) for p in outputs.rglob("*")) == before


def test_plan_replaces_its_own_earlier_output_but_not_once_a_user_file_joins_it(tmp_path, monkeypatch):
    out = tmp_path / "plan"
    for _ in range(2):  # the second run replaces the first: its marker lists every file in the folder
        result = run("plan", "--n", "1", "--profile", "smoke", "--out", out)
        assert result.exit_code == 0, result.output
    marker = json.loads((out / OUT_MARKER).read_text(encoding="utf-8"))
    assert set(marker["files"]) == {p.name for p in out.iterdir()} - {OUT_MARKER}
    thesis = planted(out)
    refused(run("plan", "--n", "1", "--profile", "smoke", "--out", out), "thesis.txt")
    assert thesis.read_text(encoding="utf-8") == THESIS
    monkeypatch.chdir(tmp_path / "plan")
    refused(run("plan", "--n", "1", "--profile", "smoke", "--out", "."), "current folder")


def test_an_empty_folder_is_written_and_a_link_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    assert run("plan", "--n", "1", "--profile", "smoke", "--out", tmp_path / "empty").exit_code == 0
    target = planted(tmp_path / "real").parent
    (tmp_path / "link").symlink_to(target)
    refused(run("plan", "--n", "1", "--profile", "smoke", "--out", tmp_path / "link"), "is a link")
    assert (target / "thesis.txt").read_text(encoding="utf-8") == THESIS


@pytest.mark.parametrize("command", ["text", "queries"])
def test_text_and_queries_refuse_a_users_folder_before_any_model_call(tmp_path, command):
    thesis = planted(tmp_path / "d")
    cache = tmp_path / "cache" / "llm.sqlite"
    refused(run(command, "--n", "1", "--profile", "smoke", "--llm", "fake", "--cache", cache, "--out", tmp_path / "d"),
            "thesis.txt")
    assert thesis.read_text(encoding="utf-8") == THESIS and not cache.exists()


@pytest.mark.parametrize("kind", ["personamem", "longmemeval"])
def test_export_folders_refuse_a_users_file_and_take_their_own_again(smoke, tmp_path, kind):
    thesis = planted(tmp_path / "d", "questions_2k.csv")
    refused(run("export", kind, smoke, "--out", tmp_path / "d"), "questions_2k.csv")
    assert thesis.read_text(encoding="utf-8") == THESIS
    ours = tmp_path / "ours"
    for _ in range(2):
        result = run("export", kind, smoke, "--out", ours)
        assert result.exit_code == 0, result.output
    file = tmp_path / "a-file"
    file.write_text(THESIS, encoding="utf-8")
    refused(run("export", kind, smoke, "--out", file), "is a file")
    assert file.read_text(encoding="utf-8") == THESIS


def test_export_jsonl_replaces_only_an_earlier_export(smoke, tmp_path):
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"note": "mine"}\n', encoding="utf-8")
    refused(run("export", "jsonl", smoke, "--out", notes), "not an earlier export")
    assert notes.read_text(encoding="utf-8") == '{"note": "mine"}\n'
    out = tmp_path / "all.jsonl"
    for _ in range(2):
        result = run("export", "jsonl", smoke, "--out", out)
        assert result.exit_code == 0, result.output


def test_export_jsonl_of_no_record_keeps_the_good_file(smoke, tmp_path):
    from pipeline.dataset import load
    from pipeline.dataset.export import export_jsonl
    from pipeline.errors import UserError

    out = tmp_path / "all.jsonl"
    assert run("export", "jsonl", smoke, "--out", out).exit_code == 0
    good = out.read_bytes()
    assert good
    refused(run("export", "jsonl", smoke, "--budget", "999", "--out", out), "has no contexts of that budget")
    assert out.read_bytes() == good
    ds = load(smoke)
    empty = ds.model_copy(update={"placements": []})  # a budget the version has, but no record to write
    with pytest.raises(UserError, match="0 records.*existing file is kept"):
        export_jsonl(empty, out, budget=ds.contexts[0].budget_tokens)
    assert out.read_bytes() == good
    with pytest.raises(UserError, match="0 records"):
        export_jsonl(empty, tmp_path / "new.jsonl", budget=ds.contexts[0].budget_tokens)
    assert not (tmp_path / "new.jsonl").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["all.jsonl"]  # no temporary file left


def test_export_longmemeval_of_a_budget_with_no_entry_is_refused(tmp_path, smoke):
    from pipeline.dataset import load
    from pipeline.dataset.export_longmemeval import export_longmemeval
    from pipeline.errors import UserError

    ds = load(smoke)
    budget = ds.contexts[0].budget_tokens
    empty = ds.model_copy(update={"placements": []})
    with pytest.raises(UserError, match="0 entries"):
        export_longmemeval(empty, tmp_path / "lme", budget=budget)


def test_eval_refuses_a_run_folder_holding_a_users_file_before_any_call(smoke, tmp_path):
    import shutil

    version = tmp_path / "copy" / "v0001"
    shutil.copytree(smoke, version)
    outputs = tmp_path / "outputs"
    evals = version / "evals"
    where = evals if writable_problem(evals) is None else outputs / EVAL_FALLBACK / "copy" / "v0001"
    thesis = planted(where / "mine")
    cache = tmp_path / "cache.sqlite"
    refused(run("eval", version, "--llm", "fake", "--name", "mine", "--cache", cache, "--outputs", outputs),
            "thesis.txt")
    assert thesis.read_text(encoding="utf-8") == THESIS


def test_report_refuses_a_report_folder_holding_a_users_file(smoke, tmp_path):
    import shutil

    version = tmp_path / "copy" / "v0001"
    shutil.copytree(smoke, version)
    for path in (version, *version.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    thesis = planted(version / "report")
    refused(run("report", version), "thesis.txt")
    assert thesis.read_text(encoding="utf-8") == THESIS


def test_generate_leaves_a_users_file_in_outputs_alone_and_refuses_outputs_that_is_a_file(tmp_path):
    outputs = tmp_path / "out"
    thesis = planted(outputs)
    result = run("generate", "--n", "1", "--profile", "smoke", "--llm", "fake", "--workers", "1",
                 "--outputs", outputs, "--dry-run")
    assert result.exit_code == 0, result.output
    assert thesis.read_text(encoding="utf-8") == THESIS
    file = tmp_path / "outputs-file"
    file.write_text(THESIS, encoding="utf-8")
    refused(run("generate", "--n", "1", "--profile", "smoke", "--llm", "fake", "--outputs", file), "Not a directory")
    assert file.read_text(encoding="utf-8") == THESIS


def test_a_folder_of_table_files_alone_written_before_the_marker_is_replaced(tmp_path):
    out = tmp_path / "plan"
    assert run("plan", "--n", "1", "--profile", "smoke", "--out", out).exit_code == 0
    (out / OUT_MARKER).unlink()  # as an older version left it
    assert run("plan", "--n", "1", "--profile", "smoke", "--out", out).exit_code == 0
    assert (out / OUT_MARKER).is_file()
