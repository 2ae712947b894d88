"""In-situ queries (issue 40): the situation catalog, code's replies in the second person with words that agree
with the item, no appended stock phrases, and messages that never repeat within a persona."""

from __future__ import annotations

import re
from collections import Counter

import pytest
import yaml

from pipeline.catalog import SITUATIONS_FILE, load_situations, load_taxonomy
from pipeline.config import DataFileError
from pipeline.s4_queries.wording import item_slots, second_person
from pipeline.words import plural, with_item
from schemas.query import QUERY_TYPES
from tests.test_queries import config_for, fake_llm, run

# the closing phrases code appended to even out option lengths before issue 40
OLD_PADDING = ("Hope that is useful.", "That is my honest take.", "Let me know if that sounds off.",
               "Happy to go deeper on it.", "Tell me if that rings true.", "We can adjust from there.",
               "That is how I see it.", "Glad to expand on that.", "Correct me if needed.")
THIRD_PERSON = re.compile(r"\b(they|their|theirs|themselves)\b", re.IGNORECASE)


def test_event_summaries_speak_to_the_user():
    assert second_person("was told they had borderline high blood sugar") == "were told you had borderline high blood sugar"
    assert second_person("burned their mouth at a hotpot dinner") == "burned your mouth at a hotpot dinner"
    assert second_person("enjoyed jazz again, as I love it") == "enjoyed jazz again, as you love it"
    assert second_person("told a friend I am not a fan of my old gym") == "told a friend you are not a fan of your old gym"
    # a routine's "them" is its item, not the user; a hyphenated word holds no pronoun
    assert second_person("enjoyed plant-based burgers again, as I love them") == "enjoyed plant-based burgers again, as you love them"
    assert second_person("got a mountain of hand-me-down baby things") == "got a mountain of hand-me-down baby things"
    # somebody else's "their" stays
    assert second_person("heard an audiobook blame sick people for their illness").endswith("people for their illness")


def test_words_agree_with_plural_items_and_not_with_gerunds_or_mass_nouns():
    assert plural("dark chocolate truffles") and plural("camper van road trips")
    assert not plural("weekly talk therapy") and not plural("hiking mountain trails") and not plural("yoga")
    assert item_slots("oat milk lattes")["it"] == "them" and item_slots("yoga")["has"] == "has"
    # a routine's pronoun after its item agrees with it; an "it" before the item is another thing's
    assert with_item("asked a coworker to leave me out of {item}, since I dislike it", "British murder mystery shows") \
        == "asked a coworker to leave me out of British murder mystery shows, since I dislike them"
    assert with_item("skipped {item}, as I dislike it", "yoga") == "skipped yoga, as I dislike it"
    assert with_item("made it home for {item}, as I love it", "board games") == "made it home for board games, as I love them"
    taxonomy = load_taxonomy()
    for template in (t for bank in taxonomy.routine_summaries.values() for t in bank):
        assert template.count("{item}") == 1 and " it" not in template.split("{item}")[0].replace("it home", "")


def test_the_catalog_covers_every_type_and_refuses_an_unknown_slot_naming_the_file(tmp_path):
    catalog = load_situations()
    assert set(catalog.messages) >= set(QUERY_TYPES) and set(catalog.replies) >= set(QUERY_TYPES)
    assert all(len(t.situations) >= 6 for t in catalog.topics.values())
    raw = yaml.safe_load(SITUATIONS_FILE.read_text(encoding="utf-8"))
    raw["replies"]["suggest_new_ideas"][0]["fresh"] = "How about {itme}?"
    bad = tmp_path / "situations.yaml"
    bad.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(DataFileError, match=r"situations\.yaml.*itme"):
        load_situations.__wrapped__(bad)
    raw["replies"]["suggest_new_ideas"][0]["fresh"] = "How about {item}?"
    raw["messages"]["suggest_new_ideas"] = ["{situation}. Tell me something new."]
    bad.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(DataFileError, match="asks nothing"):
        load_situations.__wrapped__(bad)
    raw["messages"]["suggest_new_ideas"] = ["{situation}. What is new?"]
    raw["topics"]["homeDecoration"]["broad"] = ["season", "sauna"]
    bad.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(DataFileError, match=r"homeDecoration\.broad.*sauna"):
        load_situations.__wrapped__(bad)


def test_a_question_naming_two_items_comes_from_a_situation_every_item_fits(ten):
    """"I am redoing my living room" beside heated bathroom floors would tell which item is the persona's: the
    types whose replies name two or more items are asked from the topic's broad situations; the others from all."""
    from pipeline.s4_queries.wording import MANY_ITEMS, topic_situations

    seen = {True: set(), False: set()}
    for _, qs, _ in ten:
        for q in qs:
            if q.type == "recall_user_shared_facts":
                continue
            entry = topic_situations(q.topic)
            assert q.provenance["situation"] in entry.keys(q.type in MANY_ITEMS), (q.type, q.provenance["situation"])
            seen[q.type in MANY_ITEMS].add(q.provenance["situation"])
    assert seen[True] and seen[False] - seen[True]  # the narrow ones are asked by the single-item types


@pytest.fixture(scope="module")
def ten(tmp_path_factory):
    return run(config_for(10, seed=7), fake_llm(tmp_path_factory.mktemp("ten")))


def test_queries_are_messages_in_a_situation_answered_by_replies_in_the_second_person(ten):
    queries = [q for _, qs, _ in ten for q in qs]
    assert {q.type for q in queries} == set(QUERY_TYPES)
    others = load_situations().others  # phrases whose their/them is somebody else's
    for q in queries:
        assert q.question.endswith("?") and q.provenance["situation"], q.question
        for o in q.options:
            text = o.text.replace("tell them", "")
            for phrase in others:
                text = text.replace(phrase, "")
            assert not THIRD_PERSON.search(text), o.text
            assert not any(phrase in o.text for phrase in OLD_PADDING), o.text
    for _, qs, _ in ten:  # no message repeats within a persona
        assert max(Counter(q.question for q in qs).values()) == 1
    for qtype in QUERY_TYPES:  # and few across the dataset
        asked = [q.question for q in queries if q.type == qtype]
        assert len(set(asked)) >= 0.8 * len(asked), qtype


def test_no_reply_recites_the_old_fixed_frames(ten):
    frames = re.compile(r"^(You have said that you|Since you (enjoy|avoid)|You mentioned that you|At first you)")
    options = [o.text for _, qs, _ in ten for q in qs for o in q.options]
    assert not [t for t in options if frames.search(t)]


def test_a_wrong_reason_is_as_related_to_the_item_as_the_true_cause(ten):
    """Every wrong reason of a revisit or generalize question is a life event the persona never lived that names
    the item or pushes one of its facets, never one that merely reaches the topic ("watched a zombie film" for heist
    films: a non sequitur a reader rules out)."""
    from pipeline.catalog import load_catalog
    from pipeline.s2_timeline.events import catalog_facets
    from pipeline.s4_queries.sources import _event_effects

    effects_of = {summary: (effects, items) for summary, effects, items, *_ in _event_effects()}
    facets = catalog_facets(load_catalog())
    seen = naming = 0
    for text, qs, _ in ten:
        lived = {e.summary for e in text.timeline.events}
        for q in (q for q in qs if q.type in ("revisit_reasons_behind_preference_updates", "generalize_to_new_scenarios")):
            item = text.timeline.versions(q.provenance["focal"])[-1].item
            for o in (o for o in q.options if o.role == "wrong_reason" and o.grounding[0].startswith("taxonomy:")):
                summary = o.grounding[0].removeprefix("taxonomy:")  # (one the persona lived: test_queries.py)
                effects, items = effects_of[summary]
                pushes = {e.facet for e in effects if e.topic == q.topic} & set(facets.get((q.topic, item), ()))
                assert summary not in lived and (item in items or pushes), (item, summary)
                seen, naming = seen + 1, naming + (item in items)
    assert seen > 20 and naming > 0


def test_no_wrong_reason_or_untold_event_retells_a_lived_one(ten):
    """A decoy telling the story of an event the persona lived ("learned from a dentist that blended fruit bowls
    were eroding their enamel" beside the lived "learned at a dental clean that daily blended fruit bowls were
    eroding teeth") would be true: none is shown."""
    from pipeline.s4_queries.sources import retells

    assert retells("learned from a dentist that daily blended fruit bowls were eroding their enamel",
                   "learned at a six-monthly dental clean that daily blended fruit bowls were eroding teeth")
    assert not retells("won a luxury lodge stay with daily game drives in Tanzania",
                       "caught dengue fever at a jungle eco-lodge in Borneo")
    checked = 0
    for text, qs, _ in ten:
        lived = [e.summary for e in text.timeline.events if e.kind == "life_event"]
        for q in qs:
            for o in q.options:
                for g in (g for g in o.grounding if g.startswith("taxonomy:")):
                    assert not any(retells(g.removeprefix("taxonomy:"), s) for s in lived), (g, q.type)
                    checked += 1
    assert checked > 50


def test_the_catalogs_others_keep_somebody_elses_their_and_them():
    assert second_person("drove a coast road, stopping daily for raw oysters in their shells").endswith(
        "oysters in their shells")
    assert second_person("memorised a deck of cards by placing them in rooms of their house") == (
        "memorised a deck of cards by placing them in rooms of your house")


def test_a_message_naming_a_plural_item_agrees_with_it():
    import random

    from pipeline.s4_queries.wording import draw_message

    rng, asked = random.Random(0), set()
    texts = [draw_message("revisit_reasons_behind_preference_updates", "foodRecommendation", rng, asked,
                          **item_slots("smoothie bowls"))[0] for _ in range(40)]
    assert not [t for t in texts if re.search(r"Is smoothie|Should (?:it|them) be", t)]
    assert any("Should they be" in t or "Are smoothie" in t for t in texts)
