"""The dataset card's front matter and body, and the no-context baselines it reports."""

from __future__ import annotations

from datetime import datetime

import pytest
import yaml

from pipeline.baselines import lexical_overlap_accuracy, longest_option_accuracy
from pipeline.dataset import publish
from pipeline.s5_assembly.assemble_contexts import assemble_all
from pipeline.words import keywords
from schemas.manifest import PublishInfo
from schemas.query import Option, Query
from schemas.tables import TABLES
from tests.support.factories import make_bundle, tiny_config


def _query(texts: list[str], correct: int, question: str = "Which one fits me now?") -> Query:
    options = [Option(text=t, role="correct" if i == correct else "generic") for i, t in enumerate(texts)]
    return Query(query_id=f"q{correct}{len(texts[0])}", persona_id="p", type="suggest_new_ideas", topic="t",
                 as_of=datetime(2025, 1, 1), question=question, options=options, correct_index=correct)


def test_longest_option_baseline_counts_ties_fractionally():
    longest_right = _query(["short", "the longest option here", "mid size"], 1)
    longest_wrong = _query(["short", "the longest option here", "mid size"], 0)
    tie = _query(["same", "same", "abc"], 0)
    assert longest_option_accuracy([longest_right, longest_wrong]) == 0.5
    assert longest_option_accuracy([tie]) == 0.5
    assert longest_option_accuracy([]) == 0.0


def test_lexical_overlap_baseline_uses_content_words_only():
    assert keywords("The Jazz, and the RIVER-walks!") == {"jazz", "river", "walks"}
    q = _query(["quiet jazz evenings", "loud rock concerts", "the and of"], 0, question="Any jazz ideas for my evenings?")
    assert lexical_overlap_accuracy([q]) == 1.0
    stop_only = _query(["the and of", "jazz", "rock"], 0, question="The and of jazz?")
    assert lexical_overlap_accuracy([stop_only]) == 0.0


@pytest.fixture(scope="module")
def card(tmp_path_factory):
    bundle = make_bundle(tiny_config(n_personas=2))
    result = assemble_all(bundle.personas, bundle.sessions, bundle.queries,
                          settings=bundle.config.assembly, run_seed=bundle.config.seed)
    tables = bundle.model_copy(update={"sessions": result.sessions}).tables(result.contexts, result.placements)
    info = PublishInfo(config=bundle.config, code_version="test", models=["fake:test"], license="apache-2.0",
                       stats={"assembly_unplaced": {"anchor_not_in_context": 3}})
    path = publish(tmp_path_factory.mktemp("out"), tables, info)
    return (path / "README.md").read_text(), bundle


def test_card_front_matter_is_what_the_hub_reads(card):
    text, bundle = card
    assert text.startswith("---\n")
    meta = yaml.safe_load(text.split("---\n")[1])
    assert meta["license"] == "apache-2.0"
    assert meta["size_categories"] == ["n<1K"]
    assert "question-answering" in meta["task_categories"]
    assert [c["config_name"] for c in meta["configs"]] == list(TABLES)
    assert all(c["data_files"] == f"{c['config_name']}.parquet" for c in meta["configs"])
    assert [c for c in meta["configs"] if c.get("default")] == [{"config_name": "queries",
                                                                  "data_files": "queries.parquet", "default": True}]


def test_card_body_reports_counts_baselines_and_limitations(card):
    text, bundle = card
    body = text.split("---\n", 2)[2]
    assert f"| acknowledge_latest_preferences | {len(bundle.queries)} |" in body
    assert "| 4000 | 2 |" in body and "| 8000 | 2 |" in body
    longest = longest_option_accuracy(bundle.queries)
    assert f"| longest option | {longest:.1%} |" in body
    assert "## Known limitations" in body and "fake:test" in body
    assert "by reason: anchor_not_in_context 3." in body


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    bundle = make_bundle(tiny_config(n_personas=2))
    result = assemble_all(bundle.personas, bundle.sessions, bundle.queries,
                          settings=bundle.config.assembly, run_seed=bundle.config.seed)
    tables = bundle.model_copy(update={"sessions": result.sessions}).tables(result.contexts, result.placements)
    before = {"accuracy": 0.4, "n_queries": 40, "by_type": {"acknowledge_latest_preferences": 0.4},
              "n_by_type": {"acknowledge_latest_preferences": 40}}
    after = {"accuracy": 0.25, "n_queries": 36, "by_type": {"acknowledge_latest_preferences": 0.25},
             "n_by_type": {"acknowledge_latest_preferences": 36}}
    relational = {"accuracy": 0.5, "n_queries": 20, "by_type": {"acknowledge_latest_preferences": 0.5},
                  "n_by_type": {"acknowledge_latest_preferences": 20}}
    finding = {"probe": "relational trees", "scope": "acknowledge_latest_preferences", "accuracy": 0.5, "low": 0.3,
               "high": 0.7, "n": 20, "threshold": 0.35, "setting": "queries.probe.max_type_accuracy", "refuse": False}
    probe = {"probes": {"option-only": {"before": before, "after": after},
                        "relational trees": {"before": relational, "after": relational}},
             "redrawn": {"acknowledge_latest_preferences": 3}, "dropped": {"acknowledge_latest_preferences": 1},
             "budget": 5, "enforced": True, "findings": [finding]}
    stance = {"beats": 10, "rejected_by_stance": 2, "voicing_turns": 8, "voicing_turns_failing": 0}
    info = PublishInfo(config=bundle.config, code_version="test", models=["fake:test"],
                       stats={"probe": probe, "stance_checks": stance})
    return publish(tmp_path_factory.mktemp("out"), tables, info)


def test_card_shows_probe_forms_filtering_and_stance_counts(probed):
    body = (probed / "README.md").read_text().split("---\n", 2)[2]
    assert "| scope | queries | option-only | relational trees |" in body
    assert "| overall | 36 | 25.0% [14%-41%] | 50.0% [30%-70%] |" in body
    assert "## Form of the correct answer per type" in body
    assert "| acknowledge_latest_preferences | 0 | 3 | 1 | 40.0% -> 25.0% | 50.0% -> 50.0% |" in body
    assert "(reported, not refused): relational trees acknowledge_latest_preferences 50.0% [30%-70%], n=20." in body
    assert "| rejected by stance | 2 |" in body and "| voicing turns failing | 0 |" in body


def test_audit_prints_the_probe_and_fails_above_a_bound(probed):
    from typer.testing import CliRunner

    from pipeline.cli.app import app

    ok = CliRunner().invoke(app, ["audit", str(probed)])
    assert ok.exit_code == 0, ok.output
    assert all(name in ok.output for name in ("option-only", "relational trees", "relational linear", "question set"))
    assert "overall" in ok.output and "longest option" in ok.output
    strict = CliRunner().invoke(app, ["audit", str(probed), "--max-accuracy", "0.0"])
    assert strict.exit_code == 1
    assert "without the history" in strict.output


def test_card_points_at_the_evals_made_after_publishing(card):
    body = card[0].split("---\n", 2)[2]
    assert "## Evaluating" in body and "--suite" in body and "`evals/<name>/`" in body
    assert "never lists evaluations made later" in body


def test_with_sharegpt_filler_the_licence_is_stated_per_part_and_the_yaml_names_the_mix():
    from pipeline.dataset.card import front_matter
    from pipeline.dataset.card_use import licences
    from schemas.manifest import Manifest

    stats = {"license": "cc-by-4.0", "filler_conversation_ids": ["a", "b"], "filler_dataset": "ShareGPT V3",
             "filler_terms": "check the terms."}
    manifest = Manifest.model_construct(dataset="d", version="v0001", stats=stats)
    meta = yaml.safe_load(front_matter(manifest, 10).split("---\n")[1])
    assert meta["license"] == "other" and "cc-by-4.0" in meta["license_name"] and "ShareGPT" in meta["license_name"]
    plain = Manifest.model_construct(dataset="d", version="v0001", stats={"license": "cc-by-4.0"})
    assert yaml.safe_load(front_matter(plain, 10).split("---\n")[1])["license"] == "cc-by-4.0"
    text = licences(stats, {"contexts": []})
    assert "Generated text" in text and "`cc-by-4.0`" in text and "ShareGPT V3" in text and "check the terms." in text


def test_card_has_the_glossary_and_how_each_harness_counts_a_budget(card):
    text, _ = card
    glossary = text.split("## Field glossary")[1].split("\n## ")[0]
    for needle in ("`correct_index`", "0-based", "`messages[:end_index]`", "`num_irrelevant_tokens`", "`null`",
                   "`abstention`", "`no_change`", "without a time zone", "plus 4 a message"):
        assert needle in glossary, needle
    exports = text.split("## Exports and the harnesses that read them")[1].split("\n## ")[0]
    assert "126,200 at 128k" in exports and "inference_standalone_openai.py" in exports
    assert "run_generation.py" in exports and 'personagen eval "$V" ' in exports
def test_a_version_rebuilt_from_checkpoints_reports_the_calls_that_made_it(tmp_path):
    import json

    from tests.support.smoke import publish_smoke

    first = publish_smoke(tmp_path)
    again = publish_smoke(tmp_path)  # every persona from its checkpoint: no call made
    made = json.loads((first / "manifest.json").read_text())["usage"]["total"]
    rebuilt = json.loads((again / "manifest.json").read_text())
    assert made["calls"] > 0 and rebuilt["usage"]["total"]["backend_calls"] == 0  # this run's own calls
    assert rebuilt["stats"]["checkpoint_usage"]["calls"] == made["calls"]
    card = (again / "README.md").read_text(encoding="utf-8")
    personas = rebuilt["stats"]["personas_from_checkpoint"]
    assert personas >= 1
    assert (f"| LLM calls that made the {personas} personas reused from checkpoints (cache hits) | "
            f"{made['calls']} ({made['cache_hits']}) |") in card
