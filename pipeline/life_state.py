"""A persona's life state (work, partner, children, home, health, studies, drinking, gender, job: the occupation's
group) and the life events it allows.

Pure code. The initial state follows from the sampled attributes alone (no randomness), so the
validator can replay every persona's life events against the taxonomy's preconditions.
"""

from __future__ import annotations

import re

from schemas.catalog import LifeEventSpec, Taxonomy
from schemas.persona import SeedAttributes

State = dict[str, str]
UNKNOWN_AGE_SPAN = (30, 60)  # a free-text seed has no age: only events plausible across these ages


def initial_state(a: SeedAttributes) -> State:
    """The life state the sampled attributes imply (age, life stage, household, occupation)."""
    age = a.age if a.age is not None else 40
    household = (a.household or "").casefold()
    occupation = (a.occupation or "").casefold()
    stage = a.life_stage or ""
    if a.occupation_group == "retired" or stage == "retired":
        work = "retired"
    elif occupation in ("student", "graduate student") or a.occupation_group == "student":
        work = "student"
    elif a.occupation_group == "home":
        work = "at_home"
    elif a.occupation_group == "between_jobs":
        work = "between_jobs"
    else:
        work = "working"
    partner = ("married" if age >= 30 else "partnered") if "partner" in household else "single"
    if "children" in household or stage == "young_parent":
        children = "young"
    elif stage in ("empty_nester", "retired") or ("multigenerational" in household and age >= 50):
        children = "grown"
    else:
        children = "none"
    if "halls" in household:
        home = "halls"
    elif "retirement community" in household:
        home = "retirement_community"
    elif "flatmates" in household:
        home = "shared"
    elif "with parents" in household or ("multigenerational" in household and age < 40):
        home = "parents"
    elif (age >= 35 and partner != "single") or age >= 55:
        home = "owned"
    else:
        home = "renting"
    return {"work": work, "partner": partner, "children": children, "home": home, "health": "well",
            "studies": "enrolled" if work == "student" else "none", "drinking": "drinks",
            "gender": a.gender_identity or "unknown", "job": a.occupation_group or "unknown"}


def unmet(spec: LifeEventSpec, state: State, age: int | None) -> str | None:
    """Why ``spec`` cannot happen to a person of ``age`` in ``state``, or None when it can."""
    lo, hi = spec.age
    if age is None:
        if lo > UNKNOWN_AGE_SPAN[0] or hi < UNKNOWN_AGE_SPAN[1]:
            return f"ages {lo}-{hi} do not cover a person of unknown age"
    elif not lo <= age <= hi:
        return f"age {age} outside {lo}-{hi}"
    for dim, values in spec.requires.items():
        if state.get(dim) not in values:
            return f"{dim} is {state.get(dim)}, not {' or '.join(values)}"
    for dim, values in spec.excludes.items():
        if state.get(dim) in values:
            return f"{dim} is {state.get(dim)}"
    return None


def apply(spec: LifeEventSpec, state: State) -> None:
    state.update(spec.sets)


def replay(attributes: SeedAttributes, summaries: list[str], taxonomy: Taxonomy) -> list[str]:
    """Violations of a persona's life events (in time order) against preconditions and no-repeat."""
    specs = taxonomy.event_specs()
    state, seen, out = initial_state(attributes), set(), []
    for summary in summaries:
        found = specs.get(summary)
        if found is None:
            out.append(f"{summary!r}: not an event of the taxonomy")
            continue
        spec = found[1]
        if summary in seen:
            out.append(f"{summary!r}: happens twice")
        why = unmet(spec, state, attributes.age)
        if why:
            out.append(f"{summary!r}: {why}")
        if spec.after and not set(spec.after) & seen:
            out.append(f"{summary!r}: needs one of {spec.after} lived before it")
        seen.add(summary)
        apply(spec, state)
    return out


_STOP = frozenset(
    "a an the and or of to in on at for with from by after before into over under up out off about their own "
    "new old first second last more less some all any this that was were got had has have made make took take "
    "went go began begin started start became become being been who whom what when while through during "
    "years year months month weeks week days day long short big small full same other another one two three "
    "local nearby again back them they her his its our your my me i".split())


def keywords(text: str) -> set[str]:
    """Content words of a phrase (lower case, 4+ letters, no function words)."""
    return {w for w in re.findall(r"[a-z0-9][a-z0-9'-]*", text.casefold()) if len(w) >= 4 and w not in _STOP}


def _stem(word: str) -> str:
    return word[:5] if len(word) > 5 else word


def names(reason: str, phrase: str) -> bool:
    """True when ``reason`` uses at least one content word of ``phrase`` (compared by their first letters)."""
    said = {_stem(w) for w in keywords(reason)}
    wanted = keywords(phrase) or {w.casefold() for w in re.findall(r"\w+", phrase)}
    return any(_stem(w) in said or w in reason.casefold().split() for w in wanted)


def gist(spec: LifeEventSpec) -> str:
    return spec.gist or spec.summary


def first_person(summary: str) -> str:
    """ "moved back to their hometown" -> "moved back to my hometown" """
    return re.sub(r"\btheir\b", "my", re.sub(r"\bthemselves\b", "myself", summary))


_TO_FIRST = [(re.compile(rf"(?<![\w-]){p}(?![\w-])"), r) for p, r in (
    ("they were", "I was"), ("they are", "I am"), ("they", "I"), ("themselves", "myself"), ("theirs", "mine"),
    ("their", "my"), ("them", "me"))]
_SAID_BY_USER = re.compile(r"(?<![\w-])(?:I|I'm|I've|my|me|myself|mine)(?![\w-])")


def told_by_user(summary: str, keep: tuple[str, ...] = ()) -> str:
    """An event summary as the user says it after "I": ``learned they were pregnant`` -> ``learned I was
    pregnant``, ``left them ill`` -> ``left me ill``; a summary already in the first person ("as I love them",
    where "them" is the item) and the phrases of ``keep`` (somebody else's "their") stay as they are."""
    if _SAID_BY_USER.search(summary):
        return summary
    marks = {k: f"\x00{n}\x00" for n, k in enumerate(keep)}
    text = summary
    for phrase, mark in marks.items():
        text = text.replace(phrase, mark)
    for pattern, repl in _TO_FIRST:
        text = pattern.sub(repl, text)
    for phrase, mark in marks.items():
        text = text.replace(mark, phrase)
    return text


def code_reason(summary: str, item: str, stance: str) -> str:
    """The reason code writes for a change: it names the event and the item, and nothing more. (A clause on the
    facet, "I want less getting better sleep in my life now", read false wherever the facet was a goal the item
    failed rather than a property the person turned from; the event says why on its own.)"""
    change = f"I have come to like {item}" if stance == "like" else f"I have gone off {item}"
    return f"Since I {first_person(summary)}, {change}."
