"""The stance checker: does a user turn express the labelled stance toward an item, and no clause of it the
opposite? Pure code, no model: present-tense cues of liking and aversion, turned around by a negation just
before them ("not a fan of", "no longer enjoy"), and ignored when they are past ("used to love ..."),
looked for in the clauses that name the item and the ones that go on about it ("..., but they're ...");
a clause that goes on about it with a pronoun is also read by VADER's sentiment lexicon (``vaderSentiment``,
which ships its lexicon), so "I really dislike plant-based burgers, but they're actually a delicious
fusion" is refused."""

from __future__ import annotations

import re
from functools import cache

from pipeline.words import content_words, mentioned

LIKE = (r"can'?t get enough of", r"can'?t imagine (?:a |anything )?better", r"nothing beats", r"no better (?:dish|meal|place|way)", r"(?:am|i'm|really|still|now) into", r"fond of", r"keen on", r"fan of",
        r"drawn to", r"hooked on", r"my thing", r"crazy about", r"passionate about", r"come to (?:enjoy|love|like|appreciate)", r"lov(?:e|es|ing)", r"enjoy(?:s|ing)?",
        r"ador(?:e|es|ing)", r"(?:i|really|also|still|genuinely|do|actually|now|we) like", r"likes",
        r"favou?rites?", r"appreciat(?:e|es|ing)", r"relish", r"excited about", r"looking forward to")
DISLIKE = (r"can'?t stand", r"cannot stand", r"gone off", r"fed up with", r"tired of", r"sick of", r"put off by",
           r"lost (?:interest|my taste) (?:in|for)", r"stay(?:ing)? away from", r"steer(?:ing)? clear of",
           r"turned off by", r"not for me", r"dislik(?:e|es|ing)", r"hat(?:e|es|ing)", r"loath(?:e|es|ing)",
           r"detest(?:s|ing)?", r"avoid(?:s|ing)?", r"no longer want", r"(?:do|did|does)n'?t want", r"skip(?:s|ping)?",
           r"turn(?:ed|ing)? down", r"gave up on", r"off the (?:menu|table|list)", r"off my list", r"done with",
           r"over it", r"not my thing", r"no more", r"cut out", r"cut back on", r"stopped", r"not a big fan", r"(?:do|does|did)n'?t (?:really )?(?:like|enjoy|love)",
           r"(?:do|does|did) not (?:really )?(?:like|enjoy|love)")
_CUES = [(re.compile(rf"\b{c}\b"), "like") for c in LIKE] + [(re.compile(rf"\b{c}\b"), "dislike") for c in DISLIKE]
_NEGATION = re.compile(r"\b(?:not|never|no longer|stopped|quit|barely|hardly|don'?t|doesn'?t|didn'?t|isn'?t|"
                       r"aren'?t|wasn'?t|won'?t)\W+(?:\w+\W+){0,2}$")
_PAST = re.compile(r"\bused to\W+(?:\w+\W+){0,2}$")
_CLAUSE = re.compile(r"[.!?;]+|\bbut\b|\bhowever\b|\bthough\b|\bwhereas\b|\balthough\b|\byet\b")
_REFERS = re.compile(r"\b(?:it|its|it's|they|they're|them|those|these)\b")
OPPOSITE = {"like": "dislike", "dislike": "like"}
FELT = 0.5  # VADER's compound score from which a clause about the item is felt as liking (or, negated, aversion)
CHAIN = 3  # clauses after one naming the item that may go on about it by a pronoun


def names(text: str, item: str) -> bool:
    """``item``, or two thirds of its longer words, in the normalised ``text`` (:func:`pipeline.words.mentions`)."""
    folded = item.casefold()
    return mentioned(text, content_words(text), folded, content_words(folded))


def _normal(text: str) -> str:
    return " ".join(text.casefold().replace("\u2019", "'").split())


def expressed(text: str) -> set[str]:
    """The stances ``text`` expresses in the present: ``like``, ``dislike``, both or neither."""
    text = _normal(text)
    found: set[str] = set()
    taken: list[tuple[int, int]] = []
    for pattern, stance in _CUES:
        for m in pattern.finditer(text):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue  # inside a longer cue already read ("can't stand", "not a fan of")
            taken.append((m.start(), m.end()))
            before = text[max(0, m.start() - 30): m.start()]
            if _PAST.search(before):
                continue
            found.add(OPPOSITE[stance] if _NEGATION.search(before) else stance)
    return found


def _clauses(text: str, item: str) -> list[tuple[str, bool]]:
    """The clauses of ``text`` about ``item``, each with whether it names it: the ones that name it, the one
    after each, and up to ``CHAIN`` more that go on about it by a pronoun."""
    clauses = [c.strip() for c in _CLAUSE.split(_normal(text)) if c.strip()]
    out: dict[int, bool] = {}
    for i, c in enumerate(clauses):
        if names(c, item):
            out[i] = True
            for j in range(i + 1, min(len(clauses), i + 1 + CHAIN)):
                if j > i + 1 and not _REFERS.search(clauses[j]):
                    break
                out.setdefault(j, False)
    return [(clauses[i], named) for i, named in sorted(out.items())]


def item_clauses(text: str, item: str) -> str:
    """The clauses of ``text`` about ``item`` (:func:`_clauses`), joined; all of it when none names it."""
    picked = [c for c, _ in _clauses(text, item)]
    return " . ".join(picked) if picked else _normal(text)


def felt(clause: str) -> str | None:
    """The stance a clause's sentiment carries, by VADER's lexicon: like, dislike, or None when mild."""
    score = _vader().polarity_scores(clause)["compound"]
    return "like" if score >= FELT else "dislike" if score <= -FELT else None


@cache
def _vader():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()


def stance_problem(text: str, item: str, stance: str) -> str | None:
    """Why ``text`` does not voice ``stance`` toward ``item`` faithfully, or None when it does: the clauses
    about the item express it, none expresses the opposite, and none that goes on about it by a pronoun
    (without a cue of its own) feels the opposite."""
    about = _clauses(text, item)
    found = expressed(" . ".join(c for c, _ in about) if about else _normal(text))
    if OPPOSITE[stance] in found:
        return f"user turn expresses the opposite stance '{OPPOSITE[stance]}' toward {item!r}"
    if stance not in found:
        return f"user turn does not express the stance '{stance}' toward {item!r}"
    for clause, named in about:
        if not named and _REFERS.search(clause) and not expressed(clause) and felt(clause) == OPPOSITE[stance]:
            return f"user turn goes on to feel the opposite '{OPPOSITE[stance]}' about {item!r} ({clause!r})"
    return None


_YOU_FEEL = re.compile(r"\byou(?:'ve| have| had| do| did| really| still| always| must| clearly| now)*\s+(not |never |no longer )?"
                       r"(enjoy|love|like|adore|hate|dislike|detest|avoid|can'?t stand)(?:s|d|ed|ing)?\b")


def attributed_problem(reply: str, item: str, stance: str) -> str | None:
    """Why an assistant's reply tells the user they feel the opposite of ``stance`` about ``item`` ("I'm so
    glad to hear that you enjoyed Peruvian ceviche!" to a user who dislikes it), or None."""
    for clause, named in _clauses(reply, item):
        for m in _YOU_FEEL.finditer(clause) if named else ():
            said = "like" if m.group(2) in ("enjoy", "love", "like", "adore") else "dislike"
            if (OPPOSITE[said] if m.group(1) else said) == OPPOSITE[stance]:
                return f"assistant turn says the user feels the opposite '{OPPOSITE[stance]}' about {item!r}"
    return None
