"""Is an assistant turn a reply to the user's message? Pure code. A reply picks up something the user said (a
content word of the message or of the exchange's item, as a stem: "ketogenic" answers "keto"... only when
they share five letters, so a bare "Mmm, not what I wanted!" does not); it does not open with a bare place
name or a list of nouns ("Namibia, AZ.", "Sorghum flour, whole grains, and ...": "Good question." is fine); and it never claims the
user's tastes as its own ("I just love sichuan hotpot"): the assistant has no preferences in this data.
"""

from __future__ import annotations

import re

from pipeline.checks.quality import STOP, words
from pipeline.checks.stance import names
from pipeline.words import stems

PICKUP_ZIPF = 5.6  # words more frequent than this ("really", "think", "time") are picked up by any reply
INTERJECTIONS = frozenset(
    "thanks thank great wow oh yes no sure absolutely okay ok hi hello hey congratulations congrats lovely wonderful "
    "nice perfect indeed well certainly definitely agreed ah aw awesome brilliant fantastic amazing cool right "
    "exactly true sorry of course good fair enough noted got it alright splendid gosh haha".split())
FIRST_PERSON_TASTE = re.compile(
    r"\b(?:i|we)(?:'m| am|'ve| have| do| really| just| also| absolutely| personally| truly| still| totally| so| too)*"
    r"\s+(?:not |never |no longer |don'?t |do not )?(?:love|like|enjoy|adore|prefer|hate|dislike|detest|loathe|"
    r"can'?t stand|into|a (?:big |huge )?fan of|crazy about)\b(?!\s+(?:to|that|how|hearing|the idea|it when)\b)|"
    r"\bmy (?:own |personal |all-time )?(?:favou?rite|go-to)\b",
    re.IGNORECASE)
SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _pickable(text: str) -> set[str]:
    return stems(text, rarer_than=PICKUP_ZIPF)  # every function word of 4+ letters is more frequent


def picks_up(user: str, assistant: str, item: str = "") -> bool:
    """Whether the reply shares a content word (as a five-letter stem) with the message or the item."""
    return bool(_pickable(assistant) & (_pickable(user) | _pickable(item)))


def _bare_opening(assistant: str) -> str | None:
    first = SENTENCE.split(assistant.strip(), maxsplit=1)[0]
    raw = words(first)
    ws = [w.lower() for w in raw]
    named = "," in first or any(w[:1].isupper() and w != "I" for w in raw[1:])  # "Namibia, AZ.", not "Good question."
    if ws and len(ws) < 4 and named and not any(w in STOP for w in ws) and not all(w in INTERJECTIONS for w in ws):
        return f"opens with a bare fragment ({first!r})"
    chunks = [c.strip() for c in first.split(",")]
    if len(chunks) >= 3 and all(2 <= len(words(c)) <= 3 and not any(w.lower() in STOP for w in words(c))
                                for c in chunks[:2]):
        return f"opens with a bare list ({', '.join(chunks[:2])!r}, ...)"
    return None


def claims_taste(assistant: str, items: tuple[str, ...]) -> str | None:
    """The item the assistant speaks of liking or avoiding itself ("I just love sichuan hotpot"), or None."""
    for m in FIRST_PERSON_TASTE.finditer(assistant):
        after = " ".join(assistant[m.end():].split()[:4])
        hit = next((i for i in items if i and names(after, i)), None)
        if hit or m.group(0).lower().startswith("my"):
            return hit or m.group(0)
    return None


def reply_problem(user: str, assistant: str, items: tuple[str, ...] = (), item: str = "") -> str | None:
    """Why ``assistant`` is not a reply to ``user`` (``item``: the exchange's own, ``items``: every item the
    persona holds), or None."""
    bare = _bare_opening(assistant)
    if bare:
        return f"assistant turn {bare}"
    if not picks_up(user, assistant, item):
        return "assistant turn picks up nothing the user said"
    claimed = claims_taste(assistant, (item, *items) if item else items)
    if claimed:
        return f"assistant claims a taste as its own ({claimed!r})"
    return None
