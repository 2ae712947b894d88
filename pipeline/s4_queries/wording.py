"""Code's words for in-situ queries: a situation per query from the hand-written catalog
(``pipeline/data/situations.yaml``), the user's message around it, and one reply variant whose slots every option
fills with its own belief. Code picks each piece; the truth of an option never depends on which.

Events are stored as told of a third person ("burned their mouth") or by the user ("as I love it"); a reply
speaks to the user, so ``second_person`` turns either into "you" before a summary enters an option.
"""

from __future__ import annotations

import random
import re
from typing import NamedTuple

from pipeline.catalog import load_situations
from pipeline.words import plural
from schemas.situations import TopicSituations


def topic_situations(topic: str) -> TopicSituations:
    catalog = load_situations()
    return catalog.topics.get(topic, catalog.fallback)


class Situation(NamedTuple):
    """One concrete situation of a topic, its ``{when}`` filled: ``key`` names it in the tables."""

    key: str
    text: str
    phrase: str


# the types whose replies name two or more items: asked from a situation every item of the topic fits
MANY_ITEMS = frozenset({"acknowledge_latest_preferences", "provide_preference_aligned_recommendations", "suggest_new_ideas"})


def draw_situation(topic: str, rng: random.Random, broad: bool = False) -> Situation:
    """A situation of ``topic`` drawn by ``rng`` (its ``{when}`` too); one of its broad ones when ``broad``."""
    entry, catalog = topic_situations(topic), load_situations()
    key = rng.choice(entry.keys(broad))
    when = rng.choice(catalog.when)
    return Situation(key, entry.situations[key].format(when=when), entry.phrase)


def draw_message(qtype: str, topic: str, rng: random.Random, asked: set[str], **slots: str) -> tuple[str, str]:
    """(the user's message, its situation key) for one query: a message of the type around a situation of the
    topic, none the persona was already sent (``asked`` records it), so no text repeats within a persona."""
    catalog = load_situations()
    text, key = "", ""
    for _ in range(24):
        where = draw_situation(topic, rng, broad=qtype in MANY_ITEMS)
        when, who = rng.choice(catalog.when), rng.choice(catalog.who)
        frame = rng.choice(catalog.messages[qtype])
        text = _sentence(frame.format(situation=where.text, phrase=where.phrase, when=when, who=who,
                                      who_lower=who[:1].lower() + who[1:], **slots))
        key = where.key if "{situation}" in frame else "recall"
        if text not in asked:
            break
    asked.add(text)
    return text, key


def reply_variant(qtype: str, rng: random.Random) -> dict[str, str]:
    """One of the type's reply variants: every option of the query is worded from it."""
    return rng.choice(load_situations().replies[qtype])


# slot -> (singular, plural) form agreeing with the item
_AGREE = {"it": ("it", "them"), "they": ("it", "they"), "has": ("has", "have"), "is": ("is", "are"),
          "Is": ("Is", "Are"), "feels": ("feels", "feel"), "sits": ("sits", "sit")}


def item_slots(item: str) -> dict[str, str]:
    """The item and the words that agree with it: {it} {they} {has} {is} {Is} {feels} {sits}."""
    return {"item": item} | {slot: forms[plural(item)] for slot, forms in _AGREE.items()}


def stance_verb(variant: dict[str, str], stance: str) -> str:
    """The variant's present-tense verb for a stance (enjoy / avoid, love / dislike)."""
    return variant["enjoy" if stance == "like" else "avoid"]


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text[:1].upper() + text[1:]


# first person -> second person (routines: "as I love them", where "them" is the item), else third person -> second
# person (life events: "burned their mouth"); "their" that is somebody else's (the catalog's ``others``) stays
def _word(pattern: str) -> re.Pattern[str]:
    """A whole-word pattern that a hyphen also bounds ("hand-me-down" holds no "me")."""
    return re.compile(rf"(?<![\w-]){pattern}(?![\w-])", re.IGNORECASE)


_FIRST = [(_word(p), r) for p, r in (
    (r"I am", "you are"), (r"I'm", "you're"), (r"I was", "you were"), (r"I've", "you've"),
    (r"I", "you"), (r"myself", "yourself"), (r"my", "your"), (r"me", "you"), (r"mine", "yours"),
)]
_THIRD = [(_word(p), r) for p, r in (
    (r"they were", "you were"), (r"they are", "you are"), (r"they", "you"),
    (r"themselves", "yourself"), (r"theirs", "yours"), (r"their", "your"), (r"them", "you"),
)]
_FIRST_PERSON = re.compile(r"(?<![\w-])(?:I|I'm|I've|my|me|myself|mine)(?![\w-])")


def second_person(summary: str) -> str:
    """An event summary as said to the user, after "you": ``was told they had X`` -> ``were told you had X``;
    ``enjoyed X, as I love it`` -> ``enjoyed X, as you love it``."""
    text = f"were {summary[4:]}" if summary.startswith("was ") else summary
    kept = {k: f"\x00{n}\x00" for n, k in enumerate(load_situations().others)}
    for phrase, mark in kept.items():
        text = text.replace(phrase, mark)
    for pattern, repl in _FIRST if _FIRST_PERSON.search(text) else _THIRD:
        text = pattern.sub(repl, text)
    for phrase, mark in kept.items():
        text = text.replace(mark, phrase)
    return text
