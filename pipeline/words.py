"""Word helpers every stage shares: one tokenizer, content words, whether a text mentions an item, topic labels.

Two word sets serve two purposes: ``content_words`` (4+ letters) decides whether a text *mentions* an item;
``keywords`` (every token but function words) is what the lexical baselines and BM25 compare.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache, lru_cache

TOKEN = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does for from had has have he her him his how i "
    "if in into is it its just me my no not of on or our she so some than that the their them then there "
    "these they this to too us was we were what when where which who why will with would you your".split()
)
PRESENT = {"like": "enjoy", "dislike": "avoid"}  # a stance as a verb of the present
PAST = {"like": "enjoyed", "dislike": "avoided"}  # ... and of the past


def tokens(text: str) -> list[str]:
    """Lower-case alphanumeric tokens of ``text``, in order, repeats kept."""
    return TOKEN.findall(text.lower())


def content_words(text: str) -> set[str]:
    """The tokens of 4+ characters: what :func:`mentions` compares."""
    return {w for w in tokens(text) if len(w) > 3}


@cache
def zipf(word: str) -> float:
    """``word``'s frequency in English on wordfreq's Zipf scale (1: once per 100 million words; no download)."""
    from wordfreq import zipf_frequency

    return zipf_frequency(word, "en")


def stems(text: str, *, rarer_than: float | None = None) -> set[str]:
    """Content words cut to five letters ("noodles" and "noodle" alike): what a reader sees two texts share;
    with ``rarer_than``, only words below that Zipf frequency (everyday words share nothing)."""
    return {w[:5] for w in content_words(text) if rarer_than is None or zipf(w) < rarer_than}


def without(text: str, phrases: Iterable[str], by: str = " ") -> str:
    """``text`` with every one of ``phrases`` (of 3+ characters, any case, longest first) replaced by ``by``:
    what is left is what was said beside them (a check reads the model's words, not code's)."""
    pattern = _alternation(tuple(phrases))
    return pattern.sub(by, text) if pattern else text


@lru_cache(maxsize=64)
def _alternation(phrases: tuple[str, ...]) -> re.Pattern | None:
    kept = sorted({p.strip() for p in phrases if len(p.strip()) > 2}, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, kept)), re.IGNORECASE) if kept else None


def terms(text: str) -> list[str]:
    """The tokens that are not function words, in order, repeats kept (BM25's terms)."""
    return [w for w in tokens(text) if w not in STOPWORDS]


def apart(sets: list[set[str]]) -> tuple[list[set[str]], set[str]]:
    """Each set's members that not every set has (what sets one option apart from the others), and the members
    they all share."""
    common = set.intersection(*sets) if sets else set()
    return [s - common for s in sets], common


def keywords(text: str) -> set[str]:
    """The set of :func:`terms`: what the lexical-overlap baselines compare."""
    return set(terms(text))


def mentions(text: str, item: str) -> bool:
    """The item, or at least two thirds of its content words, appear in ``text``."""
    return mentioned(text.casefold(), content_words(text), item.casefold(), content_words(item))


def mentioned(text: str, text_words: set[str], item: str, item_words: set[str]) -> bool:
    """:func:`mentions` on casefolded strings with their word sets precomputed (for hot loops)."""
    return item in text or (bool(item_words) and len(item_words & text_words) * 3 >= len(item_words) * 2)


def topic_label(topic: str) -> str:
    """``foodRecommendation`` -> ``food``; ``legalConsultation`` -> ``legal questions``."""
    base = re.sub(r"(Recommendation|Consultation)$", "", topic)
    spaced = re.sub(r"(?<!^)([A-Z])", r" \1", base).lower()
    return f"{spaced} questions" if topic.endswith("Consultation") else spaced


_GERUND_LEADS = re.compile(r"^(?:[a-z]+-)?[a-z]+ing\b")
_NOT_PLURAL = ("ss", "us", "is", "news", "series")


def plural(item: str) -> bool:
    """Whether an item name is a plural noun ("dark chocolate truffles"), not a mass noun or a gerund phrase
    ("weekly talk therapy", "hiking mountain trails")."""
    words = item.split()
    if not words or (_GERUND_LEADS.match(words[0]) and len(words) > 1 and words[0] not in ("evening", "morning")):
        return False
    # the head noun ends the phrase or comes before its first preposition ("oysters on the half shell")
    cut = next((k for k, w in enumerate(words) if k and w.lower() in _HEAD_ENDS), len(words))
    last = words[cut - 1].lower().strip(".,")
    return last.endswith("s") and not last.endswith(_NOT_PLURAL)


_HEAD_ENDS = frozenset({"of", "on", "in", "with", "for", "at", "from", "to", "by", "under", "without", "over"})


_IT = re.compile(r"\bit\b")


def with_item(template: str, item: str) -> str:
    """``template`` with ``{item}`` filled and, for a plural item, its pronoun "it" as "them" ("told a friend I
    am not a fan of {item}" / "... since I dislike it" -> "... since I dislike them")."""
    text = template.replace("{item}", item)
    if not plural(item):
        return text
    head, _, tail = text.partition(item)
    return head + item + _IT.sub("them", tail)
