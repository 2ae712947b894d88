"""Cue situations (``pipeline/data/cues/<topic>.yaml``): how a user shows a preference without saying it.

Per catalog item and stance, a few hand-written noun phrases in the user's words: what someone who likes the
item would go looking for ("a spot that does a proper numbing-hot broth"), or what someone who avoids it would
ask for instead ("a dinner where nobody hands me a chilli"). An implicit turn is built around one: it carries the
cue's key words, and never the item's name nor a stance word, so a keyword lookup over the history cannot find
the preference; understanding what the request implies can. Checked at load, each error naming file:line.

    python -m pipeline.cues check [FILE ...]     # the shipped files by default
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

from pipeline.config import DataFileError, load_yaml_model
from pipeline.words import content_words, mentions, stems, without, zipf
from schemas.catalog import ItemCues

CUES_DIR = Path(__file__).parent / "data" / "cues"
STANCES = ("like", "dislike")
KEYS = 2  # the cue's rarest content words an implicit turn must carry
_WORDS = (4, 16)  # a cue's length in words

# Words that say a stance outright: what a keyword reader looks for beside an item's name. An implicit turn, and
# every cue, has none of them.
STANCE_WORDS = re.compile(
    r"\b(?:lik(?:e|es|ed|ing)|lov(?:e|es|ed|ing)|enjoy\w*|hat(?:e|es|ed|ing)|dislik\w*|avoid\w*|prefer\w*|"
    r"favou?rit\w*|fans?|fond|keen|ador\w*|detest\w*|loath\w*|can'?t stand|cannot stand|into it|passion\w*|"
    r"crazy about|excited about|looking forward|tired of|sick of|fed up|put off|gone off|done with|no more|"
    r"no longer|anymore|any more|used to|not for me|my thing|steer clear|stay away|skip\w*|cut (?:out|back)|"
    r"gave up|give up|quit|stopp?ed|appeal\w*|appreciat\w*|relish\w*|hooked|drawn to|disgust\w*|can'?t bear|"
    r"won'?t touch|never again)\b", re.IGNORECASE)


def stance_word(text: str) -> str | None:
    """The first word or phrase of ``text`` that says a stance outright, or None."""
    found = STANCE_WORDS.search(text)
    return found.group(0) if found else None


def cue_keys(cue: str) -> tuple[str, ...]:
    """The ``KEYS`` rarest content words of ``cue`` (as five-letter stems): what a turn built on it must carry."""
    words = sorted(content_words(cue), key=lambda w: (zipf(w), w))
    return tuple(dict.fromkeys(w[:5] for w in words))[:KEYS]


def carries(text: str, cue: str) -> bool:
    """Does ``text`` carry every key word of ``cue``?"""
    return set(cue_keys(cue)) <= stems(text)


def implicit_problem(user: str, assistant: str | None, item: str, cue: str) -> str | None:
    """Why an exchange does not voice ``item`` implicitly around ``cue`` (the user turn alone while ``assistant``
    is None), or None: the user turn carries the cue's key words, names no word of the item and says no
    stance; the reply names no rare word of the item nor a stance (the turn's stance is for the reader to see)."""
    if shared := stems(user) & stems(item):
        return f"implicit turn uses its item's word(s) {sorted(shared)}"
    if said := stance_word(user):
        return f"implicit turn says a stance ({said!r})"
    if not carries(user, cue):
        return "implicit turn misses its cue's key words"
    if assistant is None:
        return None
    said = content_words(assistant)
    shared = sorted(w for w in content_words(item) if zipf(w) < _RARE and (w in said or w.rstrip("s") in said))
    if mentions(assistant, item) or shared:
        return f"reply names the implicit item ({shared or item!r})"
    if (said := stance_word(without(assistant, ["like"]))) is not None:  # "things like ..." is no stance
        return f"reply to an implicit turn says a stance ({said!r})"
    return None


_RARE = 3.5  # an item's words a reply to its implicit turn may not use: its rare ones ("hotpot"; not "breaks")


@cache
def load_cues(folder: Path | None = None) -> dict[str, dict[str, ItemCues]]:
    """topic -> item -> its cues, from every ``<topic>.yaml`` in ``folder`` (the shipped ones by default;
    checked, file:line errors)."""
    out = {}
    for path in sorted((folder or CUES_DIR).glob("*.yaml")):
        out[path.stem] = check_cues(path)
    return out


def cues_of(topic: str, item: str, stance: str) -> list[str]:
    """The cues of ``item`` held at ``stance`` (none for an item the files do not cover)."""
    found = load_cues().get(topic, {}).get(item)
    return list(getattr(found, stance)) if found else []


def check_cues(path: Path) -> dict[str, ItemCues]:
    """One topic file, parsed and checked: every item a catalog item of that topic, every cue the right length,
    without the item's words or a stance word, with key words, and no cue used twice."""
    from pydantic import RootModel

    from pipeline.catalog import load_catalog

    parsed = load_yaml_model(path, RootModel[dict[str, ItemCues]]).root
    topic = path.stem
    catalog = load_catalog()
    if topic not in catalog.topics:
        raise DataFileError(f"{path}: {topic!r} is not a catalog topic (the file is named after its topic)")
    known = {i.name for i in catalog.topics[topic].items}
    seen: dict[str, str] = {}
    for item, cues in parsed.items():
        if item not in known:
            raise DataFileError(f"{_line(path, item + ':')}: {item!r} is not an item of {topic} in the catalog")
        for stance in STANCES:
            for cue in getattr(cues, stance):
                where = _line(path, cue)
                if problem := cue_problem(cue, item):
                    raise DataFileError(f"{where}: {stance} cue of {item!r}: {problem}")
                if cue.casefold() in seen:
                    raise DataFileError(f"{where}: cue {cue!r} is also one of {seen[cue.casefold()]!r}")
                seen[cue.casefold()] = f"{item} ({stance})"
    return parsed


def cue_problem(cue: str, item: str) -> str | None:
    """Why ``cue`` cannot show a stance toward ``item`` implicitly, or None."""
    n = len(cue.split())
    if not _WORDS[0] <= n <= _WORDS[1]:
        return f"{n} words (a cue has {_WORDS[0]}-{_WORDS[1]})"
    if cue != cue.strip() or cue.endswith((".", "!", "?", ",")):
        return "ends in punctuation or space (a cue is a noun phrase that completes a sentence)"
    if said := stance_word(cue):
        return f"says the stance outright ({said!r})"
    if shared := stems(cue) & stems(item):
        return f"uses the item's own word(s) {sorted(shared)}"
    if len(cue_keys(cue)) < KEYS:
        return f"has fewer than {KEYS} content words of 4+ letters"
    return None


def _line(path: Path, needle: str) -> str:
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if needle in text:
            return f"{path}:{number}"
    return str(path)


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "check":
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    paths = [Path(a) for a in argv[1:]] or sorted(CUES_DIR.glob("*.yaml"))
    try:
        for path in paths:
            cues = check_cues(path)
            print(f"{path}: {len(cues)} items, {sum(len(c.like) + len(c.dislike) for c in cues.values())} cues")
    except DataFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
