"""Exports and readers: PersonaMem's format round-trips, JSONL is self-contained, HF datasets and DuckDB read every table."""

from __future__ import annotations

import ast
import csv
import json
import re

import pytest
from typer.testing import CliRunner

from pipeline.cli.app import app
from pipeline.dataset import load, publish
from pipeline.dataset.export import (
    QUESTION_COLUMNS,
    RELEASED_COLUMNS,
    export_jsonl,
    export_personamem,
    size_label,
    size_labels,
)
from pipeline.s5_assembly.assemble_contexts import assemble_all
from schemas.manifest import PublishInfo
from schemas.tables import TABLES
from tests.support.factories import make_bundle, tiny_config


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    bundle = make_bundle(tiny_config(n_personas=2))
    result = assemble_all(bundle.personas, bundle.sessions, bundle.queries,
                          settings=bundle.config.assembly, run_seed=bundle.config.seed)
    tables = bundle.model_copy(update={"sessions": result.sessions}).tables(result.contexts, result.placements)
    root = tmp_path_factory.mktemp("outputs")
    info = PublishInfo(config=bundle.config, code_version="test", stats={"assembly_unplaced": result.unplaced})
    return publish(root, tables, info)


def test_size_labels_follow_personamem():
    assert [size_label(b) for b in (32_000, 128_000, 1_000_000, 4000)] == ["32k", "128k", "1M", "4k"]


def test_budgets_that_round_alike_get_their_exact_label():
    assert size_labels([1500, 2000, 32_000]) == {1500: "1500", 2000: "2000", 32_000: "32k"}
    assert size_labels([1_000_000, 1_000_001, 128_000]) == {1_000_000: "1000000", 1_000_001: "1000001",
                                                            128_000: "128k"}
    assert len(set(size_labels(range(1000, 200_000, 250)).values())) == len(range(1000, 200_000, 250))


def test_json_options_read_the_same_under_json_and_python_literals():
    texts = ['it\'s "quoted"', "back\\slash \\n", "line\nbreak\ttab", "emoji \U0001F600 and \u00e9", "\x07 bell"]
    encoded = json.dumps(texts, ensure_ascii=False)
    assert json.loads(encoded) == ast.literal_eval(encoded) == texts


def test_the_csv_header_is_the_released_one_then_stereotypical():
    assert QUESTION_COLUMNS == [*RELEASED_COLUMNS, "stereotypical"]
    assert len(RELEASED_COLUMNS) == 15 and RELEASED_COLUMNS[-1] == "end_index_in_shared_context"


def test_personamem_export_round_trips(published, tmp_path):
    ds = load(published)
    files = export_personamem(ds, tmp_path)
    assert sorted(f.path.name for f in files) == [
        "README.md", "questions_4k.csv", "questions_8k.csv", "shared_contexts_4k.jsonl", "shared_contexts_8k.jsonl"]
    turns = {(t.session_id, t.turn_index): t for t in ds.turns}
    queries = {q.query_id: q for q in ds.queries}
    checked = 0
    for size in ("4k", "8k"):
        shared = {}
        for line in (tmp_path / f"shared_contexts_{size}.jsonl").read_text().splitlines():
            shared.update(json.loads(line))
        with (tmp_path / f"questions_{size}.csv").open(newline="") as fh:
            reader = csv.DictReader(fh)
            assert reader.fieldnames == QUESTION_COLUMNS
            for row in reader:
                options = json.loads(row["all_options"])
                assert ast.literal_eval(row["all_options"]) == options
                assert row["stereotypical"] in ("Yes", "No")
                q = queries[row["question_id"]]
                assert [o[:4] for o in options] == ["(a) ", "(b) ", "(c) ", "(d) "]
                assert row["correct_answer"] == f"({'abcd'[q.correct_index]})"
                assert options["abcd".index(row["correct_answer"][1])][4:] == q.options[q.correct_index].text
                if q.evidence:
                    assert re.fullmatch(r"\d{1,3}\.\d\d%", row["distance_to_ref_proportion_in_context"])
                history = shared[row["shared_context_id"]][: int(row["end_index_in_shared_context"])]
                contents = [m["content"] for m in history]
                for ev in q.evidence:
                    assert turns[(ev.session_id, ev.turn_index)].content in contents
                assert sum(len(c) for c in contents) == int(row["context_length_in_letters"])
                assert history[0]["role"] == "system"
                checked += 1
    assert checked == len(ds.placements)


def test_jsonl_export_has_one_self_contained_record_per_placement(published, tmp_path):
    ds = load(published)
    out = export_jsonl(ds, tmp_path / "all.jsonl")
    records = [json.loads(line) for line in out.path.read_text().splitlines()]
    assert out.rows == len(records) == len(ds.placements)
    for record in records:
        assert len(record["messages"]) == record["end_index"]
        assert record["options"][record["correct_index"]] and record["correct_answer"].startswith("(")
    only = export_jsonl(ds, tmp_path / "4k.jsonl", budget=4000)
    assert 0 < only.rows < out.rows


def test_hugging_face_datasets_reads_every_table(published, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(published.parent.parent / ".hf-cache"))
    datasets = pytest.importorskip("datasets")
    manifest = json.loads((published / "manifest.json").read_text())
    for name in TABLES:
        split = datasets.load_dataset("parquet", data_files=str(published / f"{name}.parquet"), split="train")
        assert split.num_rows == manifest["counts"][name], name
    queries = datasets.load_dataset("parquet", data_files=str(published / "queries.parquet"), split="train")
    assert set(queries[0]["options"][0]) == {"text", "role", "grounding"}


def test_duckdb_reads_every_table_and_the_nested_columns(published):
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    manifest = json.loads((published / "manifest.json").read_text())
    for name in TABLES:
        (n,) = con.execute(f"select count(*) from read_parquet('{published / name}.parquet')").fetchone()
        assert n == manifest["counts"][name], name
    (roles,) = con.execute(
        f"select list_sort(list_distinct(flatten(list(list_transform(options, lambda o: o.role))))) "
        f"from read_parquet('{published}/queries.parquet')").fetchone()
    assert "correct" in roles
    (joined,) = con.execute(
        f"select count(*) from read_parquet('{published}/placements.parquet') p "
        f"join read_parquet('{published}/queries.parquet') q using (query_id)").fetchone()
    assert joined == manifest["counts"]["placements"]


def test_cli_export_inspect_and_prune(published, tmp_path):
    runner = CliRunner()
    outputs = str(published.parent.parent)
    result = runner.invoke(app, ["export", "personamem", "tiny", "--out", str(tmp_path / "pm"), "--outputs", outputs])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "pm" / "questions_8k.csv").is_file()
    result = runner.invoke(app, ["inspect", str(published)])
    assert result.exit_code == 0, result.output
    assert "budgets" in result.output and "distance to evidence" in result.output
    result = runner.invoke(app, ["export", "jsonl", "nope", "--out", str(tmp_path / "x.jsonl"), "--outputs", outputs])
    assert result.exit_code == 2 and "nope: no dataset version here" in result.output
    result = runner.invoke(app, ["prune", "tiny", "--keep", "1", "--outputs", outputs])
    assert result.exit_code == 0 and "removed: nothing" in result.output
