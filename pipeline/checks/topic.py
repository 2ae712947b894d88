"""Does a turn stay in its session's topic? Each topic has a vocabulary code owns: its catalog items, facet
words and description, its situations (``situations.yaml``), and the taxonomy life events whose effects
reach it. Words are compared as stems (content words cut to five letters: "temples", "temple" alike).

A sentence wanders off when it holds ``WANDER`` words that belong to another topic's vocabulary (and to at
most ``DISTINCT`` topics in all) and none of its own, and does not name its item: "I fell for the weathered
simplicity of a Kyoto temple lodging" in a food session. A turn whose sentences all stay near is on topic;
ordinary talk with no topic words at all ("that sounds lovely, thank you") is not drift.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache

from pipeline.words import mentions, without
from pipeline.words import stems as word_stems

DISTINCT = 2  # a stem in at most this many topics' vocabularies tells which topic a sentence is about
TOPICAL = 5  # a stem in more topics' vocabularies than this is everyday talk, no sign of any topic
WANDER = 2  # a sentence with this many stems of one other topic (and none of its own) is about that topic
COMMON_ZIPF = 4.5  # words more frequent than this in English ("want", "into", "notice", "handle") are no topic's
SENTENCE = re.compile(r"(?<=[.!?])\s+")


def stems(text: str) -> set[str]:
    """:func:`pipeline.words.stems` of the words rarer than ``COMMON_ZIPF``."""
    return word_stems(text, rarer_than=COMMON_ZIPF)


@cache
def vocabularies() -> dict[str, frozenset[str]]:
    """topic -> the stems of its vocabulary (catalog, situations, life events that reach it)."""
    from pipeline.catalog import load_catalog, load_situations, load_taxonomy
    from pipeline.words import topic_label

    catalog, taxonomy, situations = load_catalog(), load_taxonomy(), load_situations()
    texts: dict[str, list[str]] = {}
    for topic, spec in catalog.topics.items():
        texts[topic] = [topic_label(topic), spec.description, *(i.name for i in spec.items),
                        *(" ".join(words) if isinstance(words, list) else str(words)
                          for words in catalog.facets.get(topic, {}).values())]
        if topic in situations.topics:
            texts[topic] += [situations.topics[topic].phrase, *situations.topics[topic].situations.values()]
    for category in taxonomy.life_event_categories.values():
        for event in category.events:
            for effect in event.parsed_effects(taxonomy.topic_aliases):
                if effect.topic in texts:
                    texts[effect.topic].append(event.summary)
    found = {topic: {s for t in ts for s in stems(t)} for topic, ts in texts.items()}
    spread = Counter(s for v in found.values() for s in v)
    return {topic: frozenset(s for s in v if spread[s] <= TOPICAL) for topic, v in found.items()}


@cache
def _spread() -> Counter:
    """stem -> in how many topics' vocabularies it is."""
    return Counter(s for v in vocabularies().values() for s in v)


def others_of(text: str, topic: str) -> dict[str, set[str]]:
    """Other topics whose distinctive stems ``text`` holds (none of ``topic``'s own), each with those stems."""
    vocab, spread = vocabularies(), _spread()
    own = vocab.get(topic, frozenset())
    found = {s for s in stems(text) if s not in own and spread[s] <= DISTINCT}
    out: dict[str, set[str]] = {}
    for other, words in vocab.items():
        if other != topic and len(hit := found & words) >= WANDER:
            out[other] = hit
    return out


def topic_problem(text: str, topic: str, items: tuple[str, ...] = (), known: tuple[str, ...] = ()) -> str | None:
    """Why ``text`` wanders off ``topic``, or None: a sentence about another topic (``WANDER`` of its words,
    none of ``topic``'s, naming none of ``items``) in a turn that holds fewer of ``topic``'s words than of
    that other's. ``known``: phrases code put there (a life event's summary, placed in this topic by the
    plan), left out. A topic the catalog does not know is never drift."""
    vocab = vocabularies()
    if topic not in vocab:
        return None
    text = without(text, known)
    said = stems(text)
    own = len(said & vocab[topic])
    for sentence in SENTENCE.split(text):
        if stems(sentence) & vocab[topic] or any(mentions(sentence, i) for i in items if i):
            continue
        for other, hit in sorted(others_of(sentence, topic).items(), key=lambda kv: (-len(kv[1]), kv[0])):
            if own < len(said & vocab[other]):
                return f"wanders off the topic into {other} ({', '.join(sorted(hit)[:3])})"
    return None


def reaches(summary: str, topic: str) -> bool:
    """Whether an event's words belong to ``topic``'s vocabulary more than to any other topic's: an event
    told there reads as part of that topic."""
    vocab = vocabularies()
    mine = stems(summary)
    own = len(mine & vocab.get(topic, frozenset()))
    return own > 0 and own >= max((len(mine & v) for t, v in vocab.items() if t != topic), default=0)
