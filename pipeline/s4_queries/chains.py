"""Track's chains of stances: how a chain is worded as a reply, and the sets of chains an option set shows (closed
under the mirror and the one-step prefix, so how the chains relate does not single out the answer)."""

from __future__ import annotations

from pipeline.catalog import load_situations
from pipeline.s4_queries.wording import item_slots, stance_verb


def flip(stance: str) -> str:
    """The other stance."""
    return "dislike" if stance == "like" else "like"


def chain_text(item: str, stances: list[str], wording: dict[str, str] | None = None) -> str:
    """``You first enjoyed X, then you avoided it, and now you enjoy it, so I would work it in.``: the chain
    of stances and what the reply does with the last one."""
    wording = wording or load_situations().replies["track_full_preference_evolution"][0]
    past = {"like": wording["enjoyed"], "dislike": wording["avoided"]}
    slots = item_slots(item)
    act = wording["act_like" if stances[-1] == "like" else "act_dislike"].format(**slots)
    if len(stances) == 1:
        return f"You have {past[stances[0]]} {item} all along, so {act}."
    it = slots["it"]
    middle = "".join(f", then you {past[s]} {it}" for s in stances[1:-1])
    return f"You first {past[stances[0]]} {item}{middle}, and now you {stance_verb(wording, stances[-1])} {it}, so {act}."


def mirror(stances: list[str]) -> list[str]:
    return [flip(s) for s in stances]


def extend(stances: list[str]) -> list[str]:
    return [*stances, flip(stances[-1])]


def chain_set(stances: list[str], n: int, rng) -> list[list[str]]:
    """``n`` chains (3 or 4) closed under the mirror and the one-step prefix, the given chain first.

    With 4: the given chain, its mirror and their common-length partners, either one step shorter (the
    chain in the long role) or one step longer (in the short role): every option has its mirror, and
    each long option its prefix. With 3: {chain A, mirror of A, prefix of A}, the given chain as A
    ("full"), as the mirror of A ("mirror") or as the prefix of A ("short"). A one-stance chain can only
    take the short role; longer chains take the long roles (uniformly), so the short role is right as
    often as the no-change form is asked (about a third of the chain queries by default)."""
    roles = ["short"] if len(stances) == 1 else (["full", "mirror"] if n == 3 else ["long"])
    role = rng.choice(roles)
    if n == 3:
        if role == "full":
            return [stances, mirror(stances), stances[:-1]]
        if role == "mirror":
            return [stances, mirror(stances), mirror(stances)[:-1]]
        return [stances, extend(stances), mirror(extend(stances))]
    if role == "long":
        return [stances, mirror(stances), stances[:-1], mirror(stances)[:-1]]
    return [stances, mirror(stances), extend(stances), extend(mirror(stances))]
