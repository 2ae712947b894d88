"""Is a model-written text readable (and safe)? Pure rules, field by field, in the spirit of the Gopher and C4 quality
filters (word count and mean word length bounds, share of words with letters, stop words in longer texts,
repetition), plus what a small chat model leaks from its prompt: timestamps, clock times, ids, role labels,
template syntax, names nobody in the conversation has, words of no language. A field that fails is asked
again, then written by code; the stage counts which (``Origin``).

Known words come from ``wordfreq`` (English word frequencies; no download) plus a per-call vocabulary (the
persona's name, place and job, the items, the catalog), so "Sichuan hotpot" passes and "bukhala" does not.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from functools import cache, lru_cache
from typing import Literal

from pydantic import BaseModel, Field

from pipeline.checks.safety import safety_problem
from pipeline.words import zipf

Field_ = Literal["item", "profile", "narrative", "reason", "user_turn", "assistant_turn", "filler_turn", "question",
                 "option"]


class Bounds(BaseModel):
    """Words a field may have, and how strict its vocabulary is."""

    min_words: int
    max_words: int
    known_share: float = Field(0.85, description="least share of words (of 4+) that are known words")


BOUNDS: dict[str, Bounds] = {
    "item": Bounds(min_words=1, max_words=6, known_share=1.0),
    "profile": Bounds(min_words=8, max_words=250),
    "narrative": Bounds(min_words=6, max_words=200),
    "reason": Bounds(min_words=4, max_words=80),
    "user_turn": Bounds(min_words=2, max_words=160),
    "assistant_turn": Bounds(min_words=3, max_words=260),
    "filler_turn": Bounds(min_words=1, max_words=2000, known_share=0.6),
    "question": Bounds(min_words=3, max_words=60),
    "option": Bounds(min_words=2, max_words=80),
}
KNOWN_ZIPF = 1.0  # wordfreq's Zipf scale: 1 is about once per 100 million words
ITEM_ZIPF = 2.3  # an item's words are common words (or the catalog's)
NAME_ZIPF = 2.5  # a capitalised word rarer than this, not sentence-initial and not allowed, is an unknown name
WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*|\d+")
DEBRIS = [
    ("a timestamp", re.compile(r"\d{4}-\d{2}-\d{2}(?:T|\s+\d)|\d{4}-\d{2}-\d{2}T?:|\bT\d{2}:\d{2}")),
    ("a clock time", re.compile(  # '9:58am' too (no word boundary after its digits)
        r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:\s?[ap]\.?m\b\.?)?(?!\d)", re.IGNORECASE)),
    ("a role label", re.compile(r"(?im)(?:^|[\s|,;(\"'])(?:user|assistant|system|human|ai|bot|chat history|"
                                r"gpt|smollm)\s*:")),
    ("a speaker label", re.compile(r"^(?!(?:Tip|Note|Update|Edit|PS|Step \d+)\b)[A-Z][a-z]+(?: \d+)?:\s")),  # "Mentor: ..."
    ("template syntax", re.compile(r"\{\{|\}\}|\{%|%\}|<\|?|\|>|\[/?INST\]|```|</?s>")),
    ("an id or tag", re.compile(r"#[\w-]+|\b[0-9a-f]{8,}\b|\b\w+_\w+\b|\b[A-Za-z]+-\d+-\d+\b")),
    ("a link", re.compile(r"https?://|www\.|\bcheck it out here\b", re.IGNORECASE)),
    ("a note on the writing", re.compile(r"\bthe original (?:sentence|text|message)\b|\b(?:re)?worded\b|\brephrased\b|"
                                         r"\bthe edit made\b", re.IGNORECASE)),
]
CHAT_FIELDS = ("user_turn", "assistant_turn", "narrative", "reason", "profile")
SENTENCE_FIELDS = CHAT_FIELDS  # a reply cut at its token cap ends mid-word
ENDINGS = (".", "!", "?", ")", '"', "'", "”", "’", "…", ":)", "*")
STRAY = re.compile(r"[{}\[\]<>|\\]")
STOP = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being am i you he she it "
    "we they me him her us them my your his its our their this that these those not no so do does did have has "
    "had will would can could should about into than then there here what which who when where how all some any "
    "just also very more most much".split())


def words(text: str) -> list[str]:
    return WORD.findall(text)


def text_problem(text: str, field: Field_, allowed: Iterable[str] = ()) -> str | None:
    """Why ``text`` is not readable as a ``field`` (one short phrase), or None. ``allowed``: words and names
    that count as known (the persona's name, the items, the catalog's words). Last, whether it is hostile
    (:mod:`pipeline.checks.safety`, with the ``allowed`` phrases, code's own, left out); not for an item, a
    name of two or three words, on which a bag-of-words classifier is noise ("bloody mary brunches": 0.78),
    and which :func:`item_problem` holds to the catalog's head nouns and no judging words."""
    allowed = tuple(allowed)
    bounds = BOUNDS[field]
    ws = words(text)
    if not ws or not text.strip():
        return "empty"
    if len(ws) < bounds.min_words:
        return f"fewer than {bounds.min_words} words"
    if len(ws) > bounds.max_words:
        return f"more than {bounds.max_words} words"
    for what, pattern in DEBRIS if field != "filler_turn" else ():
        if pattern.search(text):
            return f"{what} copied from the prompt"
    if field in CHAT_FIELDS and (label := _category_label(text)):
        return f"the category label {label!r} copied from the prompt"
    if field in CHAT_FIELDS and STRAY.search(text):
        return "stray markup characters"
    if field in SENTENCE_FIELDS and not text.rstrip().endswith(ENDINGS):
        return "ends mid-sentence"
    if field in SENTENCE_FIELDS and text.lstrip()[:1].islower():
        return "opens in lower case, mid-thought"  # "al-sharjat al-narrin, ...", "soccer, football, rugby, ..."
    return (_shape_problem(text, ws) or _vocabulary_problem(text, ws, field, bounds, _vocabulary(allowed))
            or (safety_problem(text, allowed) if field != "item" else None))


@cache
def _category_labels() -> re.Pattern:
    from pipeline.catalog import load_taxonomy

    names = "|".join(map(re.escape, load_taxonomy().life_event_categories))
    return re.compile(rf"\((?:{names})\)", re.IGNORECASE)


def _category_label(text: str) -> str | None:
    """A life-event category in brackets ("... a blind date by a cousin (relationship)"), from the prompt."""
    found = _category_labels().search(text)
    return found.group(0) if found else None


def _shape_problem(text: str, ws: list[str]) -> str | None:
    """Gopher-style: letters, word lengths, stop words, repetition."""
    tokens = text.split()
    if sum(any(c.isalpha() for c in t) for t in tokens) < 0.8 * len(tokens):
        return "under 80% of its words have letters"
    mean = sum(map(len, ws)) / len(ws)
    if len(ws) >= 3 and not 2.5 <= mean <= 12:
        return f"mean word length {mean:.1f} outside 2.5-12"
    lower = [w.lower() for w in ws]
    if len(ws) >= 8 and sum(w in STOP for w in lower) < 2:
        return "fewer than 2 stop words"
    letters = [c for c in text if c.isalpha()]
    if len(ws) >= 4 and sum(c.isupper() for c in letters) > 0.5 * len(letters):
        return "more than half its letters capitals"
    sentences = Counter(" ".join(words(x)).lower() for x in SENTENCE_END.split(text) if len(words(x)) >= 4)
    if sentences and sentences.most_common(1)[0][1] > 1:
        return "a sentence repeated"
    if len(ws) >= 50:  # Gopher's own least document length: below it, naming an item twice is no repetition
        problem = _gopher_repetition(text, lower)
        if problem:
            return problem
    if len(ws) >= 10:
        top, n = Counter(w for w in lower if w not in STOP).most_common(1)[0] if any(w not in STOP for w in lower) else ("", 0)
        if n > max(3, 0.2 * len(ws)):
            return f"the word {top!r} repeated {n} times"
        grams = Counter(zip(lower, lower[1:], lower[2:], strict=False))
        if sum(c for c in grams.values() if c > 1) > 0.3 * max(1, len(lower) - 2):
            return "repeated word sequences"
    return None


SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
# Gopher's repetition limits (Rae et al. 2021, table A1), as characters of the text: the most frequent 2/3/4-gram
# (counted only when it occurs more than once: a short turn has no repeats to count), and all duplicated 5- to
# 10-grams, each counted once per non-overlapping repeat
TOP_NGRAM = ((2, 0.20), (3, 0.18), (4, 0.16))
DUP_NGRAM = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))


def _gopher_repetition(text: str, lower: list[str]) -> str | None:
    size = len(text)
    for n, limit in TOP_NGRAM:
        grams = Counter(" ".join(lower[i:i + n]) for i in range(len(lower) - n + 1))
        gram, count = grams.most_common(1)[0]
        if count > 1 and len(gram) * count / size > limit:
            return f"the {n}-gram {gram!r} repeated {count} times"
    for n, limit in DUP_NGRAM:
        seen, repeated, i = set(), 0, 0
        while i <= len(lower) - n:
            gram = "".join(lower[i:i + n])
            if gram in seen:
                repeated += len(gram)
                i += n
            else:
                seen.add(gram)
                i += 1
        if repeated / size > limit:
            return f"{repeated / size:.0%} of it in repeated {n}-grams"
    return None


def _vocabulary_problem(text: str, ws: list[str], field: str, bounds: Bounds, allowed: _Vocabulary) -> str | None:
    """Words of no language, and capitalised names nobody in the conversation has."""
    alpha = [w for w in ws if not w.isdigit()]
    floor = ITEM_ZIPF if field == "item" else KNOWN_ZIPF
    unknown = [w for w in alpha if not _known(w, allowed, floor)]
    if field == "item":
        stops = sum(w.lower() in STOP for w in alpha)
        if unknown:
            return f"unknown word {unknown[0]!r}"
        if stops > 2 or (alpha and stops > len(alpha) / 2):
            return "more function words than an item name has"
        return None
    if len(alpha) >= 4 and len(unknown) > (1 - bounds.known_share) * len(alpha):
        return f"{len(unknown)} of {len(alpha)} words unknown ({unknown[0]!r})"
    for name, floor in _names(text):
        if name.lower() not in allowed and zipf(name.lower()) < floor:
            return f"the name {name!r}, which nobody in the conversation has"
    return None


def _known(word: str, allowed: _Vocabulary, floor: float) -> bool:
    w = word.lower().strip("'-")
    base = re.sub(r"\d+$", "", w)  # the fake backend numbers its items: "movie03"
    parts = [p for p in re.split(r"[-']", base) if p]
    return (not parts or w in allowed or base in allowed
            or all(p in allowed or p in STOP or zipf(p) >= floor or (len(p) <= 2 and p in ("s", "t", "d", "ll", "re", "ve", "m"))
                   for p in parts))


POSSESSIVE = re.compile(r"['’]s$")  # "Oluwaseun's" is Oluwaseun


def _names(text: str) -> list[tuple[str, float]]:
    """Capitalised words, each with the Zipf floor under which it is an invented name: ``NAME_ZIPF`` inside
    a sentence; at a sentence's start, where every word is capitalised, ``KNOWN_ZIPF`` (no word at all:
    "Tzitarmathia, tes tesseradis")."""
    out = []
    for sentence in re.split(r"(?<=[.!?:;\"])\s+|\n+", text):
        out += [(POSSESSIVE.sub("", t), NAME_ZIPF if k else KNOWN_ZIPF) for k, t in enumerate(WORD.findall(sentence))
                if t[:1].isupper() and t != "I" and not t.isupper()]
    return out


class _Vocabulary:
    """Known words: the caller's, then the catalog's (looked up apart, so the catalog's set is never copied)."""

    def __init__(self, allowed: Iterable[str]) -> None:
        self.own = _split_words(tuple(allowed))

    def __contains__(self, word: str) -> bool:
        return word in self.own or word in _catalog_words()


@lru_cache(maxsize=64)
def _split_words(allowed: tuple[str, ...]) -> frozenset[str]:
    """A stage checks many texts against one persona's words: split them once."""
    return frozenset(w.lower() for a in allowed for w in re.split(r"[\s,./()]+", a) if w)


def _vocabulary(allowed: Iterable[str]) -> _Vocabulary:
    return _Vocabulary(allowed)


@cache
def _catalog_words() -> frozenset[str]:
    from pipeline.catalog import load_catalog, load_taxonomy

    catalog, taxonomy = load_catalog(), load_taxonomy()
    texts = [i.name for t in catalog.topics.values() for i in t.items] + list(catalog.topics)
    texts += [s for c in taxonomy.life_event_categories.values() for s in c.summaries]
    return frozenset(w.lower() for t in texts for w in WORD.findall(t))


class Origin(BaseModel):
    """Where a field's texts came from: the model's first answer, a re-ask, or code."""

    model: int = 0
    reasked: int = 0
    code: int = 0

    def add(self, other: Origin) -> Origin:
        return Origin(model=self.model + other.model, reasked=self.reasked + other.reasked, code=self.code + other.code)


def count(origin: dict[str, Origin], field: str, *, model: int = 0, reasked: int = 0, code: int = 0) -> None:
    """Add to ``origin[field]``."""
    origin[field] = origin.get(field, Origin()).add(Origin(model=model, reasked=reasked, code=code))


# Words that judge rather than name ("stupid food"): a model's item is refused with one (the hand-written catalog,
# which is not run through these rules, has "hypnotherapy for bad habits"), since a label must name a thing.
EVALUATIVE = frozenset(
    "stupid dumb bad good great awesome terrible horrible best worst favorite favourite nice cool boring weird crazy "
    "silly ugly amazing lovely wonderful fun funny annoying perfect random".split())
# Pronouns and words of talk: "my family and friends", "talking about food and drink" are no things to like.
PERSONAL = frozenset("my your our their his her its me i you we they it us them mine yours about something "
                     "anything everything stuff".split())
CONTRACTION = re.compile(r"n't\b|\b(?:it|that|there|what|he|she|i|you|we|they|who)'(?:s|re|m|ll|d|ve)\b", re.IGNORECASE)


def _forms(word: str) -> frozenset[str]:
    """A word and the singulars it may be the plural of ("movies": movie, movy; "boxes": box; "shelves": shelf),
    enough to match a head noun in either number; a word ending in -ss stays as it is ("glass")."""
    w = word.lower()
    out = {w}
    if w.endswith("s") and not w.endswith("ss") and len(w) > 3:
        out.add(w[:-1])
        if w.endswith("es"):
            out.add(w[:-2])
        if w.endswith("ies"):
            out.add(w[:-3] + "y")
        if w.endswith("ves"):
            out |= {w[:-3] + "f", w[:-3] + "fe"}
    return frozenset(out)


@lru_cache(maxsize=32)
def topic_heads(topic: str) -> frozenset[str]:
    """The head nouns (last words) of the catalog's items in ``topic``: what a thing of this topic is called."""
    from pipeline.catalog import load_catalog

    catalog = load_catalog()
    items = catalog.topics[topic].items if topic in catalog.topics else []
    return frozenset(f for i in items for ws in [words(i.name)] if ws for f in _forms(ws[-1]))


def item_problem(item: str, topic: str) -> str | None:
    """Why ``item`` is not a name of a thing of ``topic`` a person could like, or None.

    ``text_problem``'s item checks, then: one thing, not a list (no comma); a noun phrase, not a clause (no
    contraction, no opening function word: "it's called", no pronoun or "about": "talking about food and
    drink"); it names rather than judges ("stupid food"); and its head noun, the last word, is one the topic's
    catalog items end in ("...ramen", "...tasting menus"), so "dance in the night" is no food. A capable
    model's items mostly pass; what fails is topped up from the catalog."""
    problem = text_problem(item, "item")
    if problem:
        return problem
    ws = words(item)
    if "," in item or ";" in item:
        return "a list, not one item"
    if CONTRACTION.search(item):
        return "a clause, not a name"
    if ws[0].lower() in STOP:
        return f"opens with the function word {ws[0]!r}"
    personal = [w for w in ws if w.lower() in PERSONAL]
    if personal:
        return f"talks about a thing ({personal[0]!r}) rather than names it"
    judged = [w for w in ws if w.lower() in EVALUATIVE]
    if judged:
        return f"judges ({judged[0]!r}) rather than names"
    heads = topic_heads(topic)
    if heads and not _forms(ws[-1]) & heads:
        return f"{ws[-1]!r} is not what a thing of {topic} is called"
    return None
