"""The fake backend's text: generic advice strung to a reply's target length, and a word a reply picks up."""

from __future__ import annotations

import random
import re

# Generic, item-free advice the fake backend strings together to reach an assistant turn's target length.
_ADVICE = ("Start with what you need this week and leave the rest for later.",
           "Write the plan down, because a short list is easier to keep than a long one in your head.",
           "Pick one small step you can take today and notice how it feels afterwards.",
           "Set aside a fixed time for it, so it does not compete with everything else.",
           "Check in with yourself after a few days and adjust what did not fit.",
           "If something feels too much, cut it in half and try the smaller version first.",
           "Ask a friend to join you once or twice; it is easier to stay with something together.",
           "Keep a short note of what worked, so next time you can start from there.",
           "Think about the cost in time and money before you commit, and set a limit you are comfortable with.",
           "It is fine to change course; the point is to find what suits your life right now.",
           "Look back at the last month and notice which days went well and why.",
           "Leave some room in the week for rest, since a plan with no slack tends to break.",
           "When you compare options, write down two or three reasons for each before deciding.",
           "Small routines repeated often usually matter more than one big effort.",
           "Try to make the first step easy enough that you could start tonight.",
           "Share the plan with someone you trust and ask what they would change.",
           "Keep whatever already works for you and build the new part around it.",
           "Give each change a couple of weeks before you judge whether it works.",
           "Be honest with yourself about your energy on busy days and plan for those too.",
           "Set one clear goal for the season rather than several vague ones.",
           "Notice what tends to get in the way, and decide in advance how you will handle it.",
           "Celebrate the small wins, because they make the next step feel lighter.")


def gist_words(text: str, k: int) -> list[str]:
    """Fake text: the ``k`` longest words of ``text`` that are not function words (a reply that picks up a request)."""
    found = [w for w in re.findall(r"[A-Za-z]+", text) if w.lower() not in _FUNCTION_WORDS]
    return sorted(found, key=len, reverse=True)[:k] or ["that"]


def gist_word(text: str) -> str:
    """Fake text: the longest word of ``text`` (the last of equals: what a message is about comes late), for a
    reply that picks up what was said."""
    found = [w for w in re.findall(r"[A-Za-z]+", text) if w.lower() not in _FUNCTION_WORDS] or ["that"]
    return max(reversed(found), key=len)


_FUNCTION_WORDS = frozenset("through really about would could should their there which after before other these those "
                            "while being without because someone something anything everything everyone lately "
                            # everyday words no reply is said to pick up (the checks' five-letter stems above Zipf 5.6)
                            "family people little things years world great always never right".split())


def helpful_reply(opening: str, words: tuple[int, int], rng: random.Random) -> str:
    """Fake text: an opening plus generic advice, a seeded length within ``words`` (low, high)."""
    target = rng.randint(words[0], max(words))
    words = opening.split()
    advice = list(_ADVICE)
    rng.shuffle(advice)
    i = 0
    while len(words) < target:
        words += advice[i % len(advice)].split()
        i += 1
    return " ".join(words[:max(target, 3)]).rstrip(",;") + ("" if words[max(target, 3) - 1].endswith(".") else ".")
