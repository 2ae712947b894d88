"""The readability check every model-written field passes (pipeline/checks/quality.py), on the texts a small
model really wrote into a published dataset (issue 25) and on plain readable ones."""

from __future__ import annotations

import pytest

from pipeline.checks.quality import text_problem
from pipeline.s1_personas.expand_persona import clean_items
from pipeline.s3_text.write_sessions import unreadable

ALLOWED = ["Piotr", "Gdansk", "pharmacist", "spicy Sichuan hotpot"]


@pytest.mark.parametrize(("text", "field"), [
    ("jenin bharati", "item"),
    ("sakura kosher ke bukhala samsung bakho", "item"),
    ("festival of jango in the world", "item"),
    ("2019-05-30T:17:46.823Z:Jenin bharati's life has been forever changed by his past.", "narrative"),
    ("#change_over_time-jeni-bharanti-life", "reason"),
    ("Songrai Mengzhen, 2020-12-30T15:13:57.38|Chat History: Sung Zhiyuan, 2020-12-30T14:09:26.27, 3:38", "user_turn"),
    ("Nice story,BharantiSansi-28-57,PiotrSangbabai-6:59 ,I think you can do it", "assistant_turn"),
    ("User: I like it. Assistant: Great, I will remember that for our next chat.", "user_turn"),
    ("I {{ item }} really like it and {% if stance %} more of it every single day.", "user_turn"),
    ("hotpot hotpot hotpot hotpot hotpot hotpot hotpot hotpot hotpot hotpot hotpot", "user_turn"),
    ("Zorblat quix vemmel trandu ploshk and the vibbernot zank", "assistant_turn"),
    ("I told Bharati and Zhiyuan that I have come to love spicy Sichuan hotpot.", "user_turn"),
    ("Tzitarmathia, tes tesseradis, it is a thing that has many names. However, the most common name for it would be "
     "Sichuan hotpot.", "assistant_turn"),  # a word of no language that starts a sentence
    ("", "reason"),
])
def test_unreadable_texts_from_a_small_model_are_refused(text, field):
    assert text_problem(text, field, allowed=ALLOWED) is not None


@pytest.mark.parametrize(("text", "field"), [
    ("spicy Sichuan hotpot", "item"),
    ("sourdough bread baking", "item"),
    ("k-dramas", "item"),
    ("I really dislike spicy Sichuan hotpot.", "user_turn"),
    ("Honestly, I have come to love spicy Sichuan hotpot since my trip to Chengdu.", "user_turn"),
    ("Thank you for telling me. I'll keep that in mind when we talk about food.", "assistant_turn"),
    ("Since the diabetes diagnosis I keep sugary desserts for special occasions.", "reason"),
    ("Piotr is a 47-year-old pharmacist from Gdansk who loves hiking and quiet evenings with a good book.", "profile"),
    ("Last spring I moved to a smaller flat near the river, and the quieter street changed how I spend my evenings.",
     "narrative"),
    ("How have my feelings about food developed over time, from what I have shared?", "question"),
    ("Chengdu is lovely in spring. Brno too, they say.", "assistant_turn"),
])
def test_plain_readable_texts_pass(text, field):
    assert text_problem(text, field, allowed=ALLOWED) is None


def test_a_model_item_that_is_not_readable_never_becomes_a_label():
    raw = ["jenin bharati", "festival of jango in the world", "natural wine bars", "sakura kosher ke bukhala samsung bakho"]
    assert clean_items(raw, taken=set(), limit=10) == ["natural wine bars"]


def test_an_exchange_is_unreadable_when_either_turn_is():
    good_user, good_reply = "I have come to enjoy natural wine bars.", "That sounds lovely, I will remember it."
    assert unreadable(good_user, good_reply, []) is None
    assert "user turn" in unreadable("Songrai Mengzhen, 3:38|Chat History:", good_reply, [])
    assert "assistant turn" in unreadable(good_user, "Nice story,BharantiSansi-28-57,Piotr-6:59", [])


def test_a_reply_cut_mid_sentence_stray_markup_or_an_echo_of_the_user_is_refused():
    assert text_problem("Sichuan hotpot skewers served with the finest sicli foo", "assistant_turn") == "ends mid-sentence"
    assert text_problem("I love the combination of bold and sweet.} This is a little bit different.", "user_turn") \
        == "stray markup characters"
    user = "Since I emigrated to another country, I have come to enjoy spicy Sichuan hotpot."
    assert unreadable(user, "I have come to enjoy spicy Sichuan hotpot. It's a dish that I love.", []) \
        == "assistant turn echoes the user's message"
    assert unreadable(user, "That is a big change; hotpot with friends sounds like a good way to settle in.", []) is None


def test_a_model_item_must_name_a_thing_of_its_topic():
    """Items the embedded model wrote that passed the word checks: a clause, a judgement, a list, no food at all."""
    from pipeline.checks.quality import item_problem

    raw = {"travelPlanning": ["it's called", "my family and friends", "mountain hut treks"], "foodRecommendation": ["stupid food", "dance in the night", "talking about food and drink",
                                                                                         "spicy Korean fried chicken"],
           "bookRecommendation": ["jewelry, fleas", "Nordic crime novels"]}
    kept = {t: clean_items(items, taken=set(), limit=10, topic=t) for t, items in raw.items()}
    assert kept == {"travelPlanning": ["mountain hut treks"], "foodRecommendation": ["spicy Korean fried chicken"],
                    "bookRecommendation": ["Nordic crime novels"]}
    assert item_problem("it's called", "travelPlanning") == "a clause, not a name"
    assert "not what a thing of foodRecommendation is called" in item_problem("dance in the night", "foodRecommendation")


@pytest.mark.parametrize(("text", "field", "reason"), [
    # from the embedded default N=1 run: shouting
    ("BREAKFAST, SALADED WITH SOYBEAN CREAM, TORTE BEGINNED IN GOLD, COOKIES, A FEW BEST EATING GRACES FOR THE DAYS' "
     "END-SALE, ENJOY YOUR DAY WITH SOYBEAN CREAM!", "assistant_turn", "more than half its letters capitals"),
    ("I think it has huge potential in the world of art. I think it has huge potential in the world of art.",
     "user_turn", "a sentence repeated"),
    ("soccer, football, rugby, soccer ball, game of thrones, match, team in the field, playing a sport.",
     "assistant_turn", "opens in lower case"),
    # from the embedded smoke run: a date and a clock time tacked on ('9:58am': no word boundary after the digits)
    ("Since I was evacuated from a national park campsite by a wildfire, I have come to avoid visiting national "
     "parks, 2023-12-17 at 9:58am.", "user_turn", "a clock time"),
    ("We met at 9:58am and talked for a long while about the trip.", "user_turn", "a clock time"),
    # from the embedded smoke run: the model as an editor, and the prompt's category label
    ("The original sentence was reworded to improve clarity and grammar.", "assistant_turn", "a note on the writing"),
    ("Last spring I was set up on a blind date by a cousin (relationship). It went well.", "narrative",
     "the category label"),
    ("We took the long walk by the river, and the long walk by the river was lovely, so the long walk by the river "
     "will be our plan again, because the long walk by the river is calm, and after the long walk by the river we "
     "rest, and the long walk by the river clears the head for the week ahead of us all.",
     "assistant_turn", "the 3-gram"),  # Gopher's top n-gram limit, in a text of 50+ words
])
def test_each_repetition_and_shouting_rule_names_itself(text, field, reason):
    assert text_problem(text, field, allowed=ALLOWED).startswith(reason)


def test_a_persona_name_in_the_possessive_is_the_persona_name():
    assert text_problem("Ada's week was busy, and she still found time to cook a proper dinner.", "narrative",
                        allowed=["Ada"]) is None
