"""The weight calibration rewrites only the weights of the events it was told about, and lowers only."""

from collections import Counter

from pipeline.run.calibrate import FLOOR, new_weights, over_target, read_weights, write_weights

TEXT = '''  hobby:
    events:
      - {summary: "joined a club", weight: 0.5, age: [18, 85], effects: [sports social +], items: ["x"]}
      - {summary: "saw a show", age: [18, 85], effects: [movies outing +]}
      - {summary: "read a book", weight: 0.2, effects: [books light +]}
'''


def test_weights_are_read_and_written_line_by_line():
    weights = read_weights(TEXT)
    assert weights == {"joined a club": 0.5, "saw a show": 1.0, "read a book": 0.2}
    out = write_weights(TEXT, {"joined a club": 0.25, "saw a show": 0.4})
    assert '{summary: "joined a club", weight: 0.25, age: [18, 85]' in out
    assert '{summary: "saw a show", weight: 0.4, age: [18, 85]' in out
    assert '{summary: "read a book", weight: 0.2, effects' in out  # not named: untouched
    assert write_weights(out, {"joined a club": 1.0}).count("weight:") == 2  # a weight of 1 is left out
    assert read_weights(write_weights(TEXT, weights)) == weights


def test_only_events_over_the_target_are_lowered_in_proportion():
    weights = {"busy": 1.0, "quiet": 0.3, "unseen": 0.5}
    out = new_weights(weights, Counter({"busy": 8.0, "quiet": 1.0}), target=4.0)
    assert out == {"busy": 0.5, "quiet": 0.3, "unseen": 0.5}
    # never below the floor, never raised by it; an event at the floor is no longer counted as one to lower
    floored = new_weights({"rare": 0.01, "busy": 0.05}, Counter({"rare": 40.0, "busy": 400.0}), target=4.0)
    assert floored == {"rare": 0.01, "busy": FLOOR}
    assert over_target(Counter({"rare": 40.0, "busy": 400.0}), floored, 4.0) == []
    assert over_target(Counter({"busy": 8.0}), {"busy": 0.5}, 4.0) == ["busy"]


def test_an_unchanged_weight_leaves_its_line_as_written():
    assert write_weights(TEXT, {"joined a club": 0.5, "saw a show": 1.0}) == TEXT
