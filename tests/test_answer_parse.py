"""The answer parser on real-world reply shapes: markers, bare letters, phrases, markdown, option text."""

from __future__ import annotations

import pytest

from pipeline.evaluation.answer_parse import parse_answer

OPTIONS = [
    "Try the new ramen place downtown",
    "A quiet weekend hike by the lake",
    "You mentioned you stopped eating spicy food",
    "Many people enjoy a mix of ideas",
]

SHAPES = [
    ("(b)", "b"),
    ("b", "b"),
    ("B", "b"),
    ("B)", "b"),
    ("c.", "c"),
    ("  (D)  ", "d"),
    ("Answer: b", "b"),
    ("answer: C", "c"),
    ("Final answer: (a)", "a"),
    ("<final_answer>(c)</final_answer>", "c"),
    ("<final_answer>(c)", "c"),
    ("<final_answer> d", "d"),
    ("<FINAL_ANSWER>: B", "b"),
    ("Let me think. (a) is outdated and (b) is generic.\n<final_answer>\n(c)", "c"),
    ("Looking at the history, the user changed their mind.\n\n<final_answer> (d) Many people enjoy", "d"),
    ("<final_answer>The answer is option C.", "c"),
    ("The answer is option C", "c"),
    ("The answer is option c.", "c"),
    ("The correct answer is (b).", "b"),
    ("I'd go with option (d) because it matches.", "d"),
    ("I would pick b because the user said so.", "b"),
    ("I think (c) is best.", "c"),
    ("**(d)**", "d"),
    ("**Answer:** (a)", "a"),
    ("`b`", "b"),
    ("Option A.", "a"),
    ("Initially option A looked right, but the final answer is C.", "c"),
    ("(B) A quiet weekend hike by the lake", "b"),
    ("b) A quiet weekend hike by the lake", "b"),
    ("You mentioned you stopped eating spicy food", "c"),
    ("I recommend: try the new ramen place downtown!", "a"),
    ("<final_answer>A quiet weekend hike by the lake</final_answer>", "b"),
    ("The answer is A because they love lakes.", "a"),
]

UNPARSEABLE = [
    "",
    "I cannot decide between these options.",
    "The answer is a bit unclear to me.",
    "A good choice depends on the user.",
    "Either (a) or (c) could work.",
    "(e)",
    "I think it's the ramen or the hike by the lake, both are fine",
]


@pytest.mark.parametrize(("reply", "letter"), SHAPES)
def test_real_world_answer_shapes_parse_to_their_letter(reply, letter):
    assert parse_answer(reply, OPTIONS).letter == letter


@pytest.mark.parametrize("reply", UNPARSEABLE)
def test_ambiguous_or_empty_answers_are_unparseable(reply):
    parsed = parse_answer(reply, OPTIONS)
    assert parsed.letter is None and parsed.rule == "none"


def test_the_marker_segment_wins_over_letters_earlier_in_the_reasoning():
    reply = "Option (a) is what they used to like. Answer: (a) would be wrong.\n<final_answer>(b)"
    assert parse_answer(reply, OPTIONS).letter == "b"


def test_letters_beyond_the_options_are_rejected():
    assert parse_answer("(c)", OPTIONS[:2]).letter is None
    assert parse_answer("(b)", OPTIONS[:2]).letter == "b"


def test_the_rule_that_matched_is_reported():
    assert parse_answer("(b)", OPTIONS).rule == "leading"
    assert parse_answer("So the answer is option c", OPTIONS).rule == "phrase"
    assert parse_answer("I lean towards (d) here", OPTIONS).rule == "parenthesized"
    assert parse_answer("a quiet weekend hike by the lake", OPTIONS).rule == "option_text"
