"""The automatic part of the reviewers' checklist, run on every publish and shown on the card: identical
messages across personas, distractors that are obviously off the topic, correct replies about another topic,
messages that give their answer away, and the hit rate of the longest and of the shortest option.

PersonaMem's successor audits its queries by hand against such a list (strawman distractors, a final-sentence
giveaway, identical queries across personas, gold answers that do not address the query); these are the items
that code can count. Each figure is a count or a rate over the published queries, never a verdict on one."""

from __future__ import annotations

from collections import defaultdict

from pydantic import BaseModel

from pipeline.baselines import chance_accuracy, expected_hit
from pipeline.catalog import load_catalog
from pipeline.dataset.card_use import markdown_table
from pipeline.words import keywords
from schemas.query import ABSENT, Option, Query

INVENTORY = "inventory:"


def item_topics(preferences: list, catalog=None) -> dict[str, set[str]]:
    """Every item a dataset or the catalog knows, casefolded, to the topics it belongs to."""
    topics: dict[str, set[str]] = defaultdict(set)
    for v in preferences:
        topics[v.item.casefold()].add(v.topic)
    for topic, entry in (catalog or load_catalog()).topics.items():
        for item in entry.items:
            topics[item.name.casefold()].add(topic)
    return topics


def option_items(option: Option, versions: dict[str, object]) -> list[str]:
    """The items an option's grounding names: a preference version's item, an inventory item."""
    found = []
    for ref in option.grounding:
        if ref in versions:
            found.append(versions[ref].item)
        elif ref.startswith(INVENTORY):
            found.append(ref[len(INVENTORY):])
        elif ref.startswith(ABSENT):
            found.append(ref[len(ABSENT):])
    return found


def _off_topic(option: Option, topic: str, versions: dict, topics: dict[str, set[str]]) -> bool:
    """True when every item the option names is known, and known only in other topics."""
    known = [topics.get(item.casefold()) for item in option_items(option, versions)]
    return bool(known) and all(k and topic not in k for k in known)


def checklist(tables: dict[str, list[BaseModel]], catalog=None) -> dict:
    """The checklist's counts and rates over ``tables['queries']`` (the manifest's ``stats.checklist``)."""
    queries: list[Query] = tables["queries"]
    versions = {f"{v.pref_id}@{v.version}": v for v in tables["preferences"]}
    topics = item_topics(tables["preferences"], catalog)
    askers: dict[str, set[str]] = defaultdict(set)
    whole: dict[tuple, set[str]] = defaultdict(set)
    for q in queries:
        askers[q.question].add(q.persona_id)
        whole[(q.question, *(o.text for o in q.options))].add(q.persona_id)
    shared = {m for m, who in askers.items() if len(who) > 1}
    distractors = [(q, o) for q in queries for i, o in enumerate(q.options) if i != q.correct_index]
    n = len(queries)
    return {
        "queries": n,
        "messages": len(askers),
        "messages_shared_across_personas": len(shared),
        "queries_with_a_shared_message": sum(q.question in shared for q in queries),
        "identical_queries_across_personas": sum(len(who) > 1 for who in whole.values()),
        "queries_with_repeated_options": sum(len({o.text for o in q.options}) < len(q.options) for q in queries),
        "distractors": len(distractors),
        "distractors_off_topic": sum(_off_topic(o, q.topic, versions, topics) for q, o in distractors),
        "correct_off_topic": sum(_off_topic(q.options[q.correct_index], q.topic, versions, topics) for q in queries),
        "message_gives_answer_away": _rate(queries, _giveaway),
        "longest_option_hit_rate": _rate(queries, lambda q: expected_hit([len(o.text) for o in q.options],
                                                                          q.correct_index)),
        "shortest_option_hit_rate": _rate(queries, lambda q: expected_hit([-len(o.text) for o in q.options],
                                                                           q.correct_index)),
        "chance": chance_accuracy(queries),
    }


def _giveaway(q: Query) -> float:
    """1 when the message shares strictly more content words with the correct option than with any other."""
    words = keywords(q.question)
    shared = [len(words & keywords(o.text)) for o in q.options]
    best = shared[q.correct_index]
    return float(best > 0 and all(s < best for i, s in enumerate(shared) if i != q.correct_index))


def _rate(queries: list[Query], hit) -> float:
    return sum(hit(q) for q in queries) / len(queries) if queries else 0.0


def render_checklist(found: dict | None) -> str:
    """The card's section: each automatic check with its figure."""
    if not found:
        return ""
    n, d = found["queries"], found["distractors"]

    def share(count: int, of: int) -> str:
        return f"{count:,} of {of:,} ({count / of:.1%})" if of else "0"

    rows = [
        ["distinct messages", f"{found['messages']:,} for {n:,} queries"],
        ["messages asked by more than one persona", f"{found['messages_shared_across_personas']:,}, asked in "
                                                     f"{share(found['queries_with_a_shared_message'], n)} queries"],
        ["identical queries across personas (message and all four replies)",
         f"{found['identical_queries_across_personas']:,}"],
        ["queries with two identical replies", f"{found['queries_with_repeated_options']:,}"],
        ["distractors naming an item of another topic only", share(found["distractors_off_topic"], d)],
        ["correct replies naming an item of another topic only", share(found["correct_off_topic"], n)],
        ["message shares the most words with the correct reply alone",
         f"{found['message_gives_answer_away']:.1%}"],
        ["longest reply is the correct one", f"{found['longest_option_hit_rate']:.1%} (chance {found['chance']:.1%})"],
        ["shortest reply is the correct one", f"{found['shortest_option_hit_rate']:.1%} (chance {found['chance']:.1%})"],
    ]
    return ("## Review checklist (automatic part)\n\nThe checks of a human audit that code can count, run on every "
            "publish (`stats.checklist` in manifest.json). A message asked by several personas is expected (messages "
            "come from a catalog of situations per topic) and gives nothing away when its answer differs per persona; "
            "an item's topic comes from this version's preference rows and the catalog; ties in length count "
            "fractionally.\n\n" + markdown_table(["check", "figure"], rows))
