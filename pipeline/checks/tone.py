"""Does a turn take a grave event lightly? A small model goes on from "I lost a best friend to suicide" with
"It's always funny when you think about it", or replies to a bereavement with "Great news!". Pure code: an
event is grave when its summary (code's words) tells of a death, an illness, an injury, an attack or a loss
of work or home; what the model added to it (the summary masked) may then carry no joke, laughter or cheer,
nor a strongly happy sentiment (VADER's lexicon)."""

from __future__ import annotations

import re

from pipeline.checks.stance import felt
from pipeline.words import without

GRAVE = re.compile(
    r"\b(?:lost (?:a|an|my|their|his|her|the) \w+|died|death|dead|funeral|suicide|cancer|tumou?r|attacked|assaulted|"
    r"mugged|robbed|burgled|collapsed|diagnos\w*|miscarri\w*|divorc\w*|fired|laid off|made redundant|evacuated|"
    r"hospitali[sz]ed|injur\w*|broke (?:a|an|my|their|his|her) \w+|crash\w*|stroke|heart attack|grief|bereave\w*|"
    r"widow\w*|covid|scare|evicted|homeless|bankrupt\w*)\b", re.IGNORECASE)
LIGHT = re.compile(r"\b(?:funny|hilarious|lol|haha|hehe|fun|joke|jokes|joking|laugh\w*|lucky|worth it|great news|"
                   r"good news|congratulations|congrats|awesome|exciting|yay|glad to hear|happy to hear|"
                   r"so glad|thrilled|delighted)\b", re.IGNORECASE)


def grave(event: str) -> bool:
    """Whether an event's summary tells of something grave (a death, illness, injury, attack, lost job or home)."""
    return bool(GRAVE.search(event))


def tone_problem(text: str, events: tuple[str, ...], *, sentiment: bool = True) -> str | None:
    """Why ``text`` takes one of the grave ``events`` it is about lightly, or None. ``sentiment``: read the
    sentiment too (not where the turn rightly says it now enjoys an item: "since my heart scare I enjoy ...")."""
    told = [e for e in events if e and grave(e)]
    if not told:
        return None
    rest = without(text, told)
    light = LIGHT.search(rest)
    if light:
        return f"takes a grave event lightly ({light.group(0)!r})"
    if sentiment and felt(rest) == "like":
        return "takes a grave event lightly (a cheerful tone)"
    return None
