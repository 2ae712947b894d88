"""The checklist's automatic part: every published version carries its figures in the manifest and on the
card, and each check counts the defect it names when one is planted."""

from __future__ import annotations

import pytest

from pipeline.dataset import load
from pipeline.dataset.checklist import checklist, render_checklist
from tests.support.eval_data import publish_tiny


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return load(publish_tiny(tmp_path_factory.mktemp("checklist") / "out", n_personas=3))


def test_every_published_version_shows_the_checklist(ds):
    found = ds.manifest.stats["checklist"]
    assert found == checklist({"queries": ds.queries, "preferences": ds.preferences})
    assert found["queries"] == len(ds.queries) and found["distractors"] == 3 * len(ds.queries)
    card = (ds.path / "README.md").read_text()
    assert "## Review checklist (automatic part)" in card
    assert f"| longest reply is the correct one | {found['longest_option_hit_rate']:.1%}" in card


def test_each_check_counts_a_planted_defect(ds):
    queries = [q.model_copy(deep=True) for q in ds.queries]
    clean = checklist({"queries": queries, "preferences": ds.preferences})
    assert clean["distractors_off_topic"] == 0 and clean["correct_off_topic"] == 0
    first, other = queries[0], next(q for q in queries if q.persona_id != queries[0].persona_id)
    elsewhere = next(v for v in ds.preferences if v.topic != first.topic)
    wrong = next(i for i in range(4) if i != first.correct_index)
    first.options[wrong].grounding = [f"{elsewhere.pref_id}@{elsewhere.version}"]  # a distractor off the topic
    first.options[first.correct_index].grounding = [f"inventory:{elsewhere.item}"]  # and a key off it too
    other.question, other.options = first.question, [o.model_copy() for o in first.options]  # the same query twice
    other.correct_index = first.correct_index
    third = next(q for q in queries[1:] if q is not other
                 and len(q.options[q.correct_index].text) < max(len(o.text) for o in q.options))
    third.options[(third.correct_index + 1) % 4].text = third.options[(third.correct_index + 2) % 4].text
    key = third.options[third.correct_index]
    third.question = f"{third.question} {key.text}"  # the message repeats the key's words
    key.text = key.text + " and a good deal more besides that"  # the key is the longest reply
    found = checklist({"queries": queries, "preferences": ds.preferences})
    assert found["distractors_off_topic"] == 1 + 1 and found["correct_off_topic"] == 2  # the copy counts too
    assert found["identical_queries_across_personas"] == 1 and found["queries_with_repeated_options"] == 1
    assert found["message_gives_answer_away"] > clean["message_gives_answer_away"]
    assert found["longest_option_hit_rate"] > clean["longest_option_hit_rate"]
    assert found["messages_shared_across_personas"] >= 1
    text = render_checklist(found)
    assert "| identical queries across personas (message and all four replies) | 1 |" in text
