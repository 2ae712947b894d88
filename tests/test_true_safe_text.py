"""Model text that is true to its fact, on its topic and safe (issue 43): each rule on the texts the embedded
model (SmolLM2-135M) really wrote and the checks passed before, beside texts that must still pass."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline.checks.echo import echo_problem, prompt_grams
from pipeline.checks.exchange import TurnView, exchange_problem
from pipeline.checks.quality import text_problem
from pipeline.checks.replies import reply_problem
from pipeline.checks.safety import HOSTILE, classifier_name, hostility, safety_problem
from pipeline.checks.stance import attributed_problem, stance_problem
from pipeline.checks.tone import tone_problem
from pipeline.checks.topic import reaches, topic_problem
from pipeline.s3_text.filler import hostile
from schemas.conversation import Session, SessionWithTurns, Turn

# -- 1. stance agreement on every clause -----------------------------------------------------------------


def test_a_clause_that_goes_on_to_praise_a_disliked_item_is_refused():
    said = ("I have to say I really dislike plant-based burgers, but they're actually a delicious fusion of modern "
            "and traditional British cuisine. They combine the bold flavors of burger bangers with the spices.")
    problem = stance_problem(said, "plant-based burgers", "dislike")
    assert problem and "opposite 'like'" in problem
    assert stance_problem("I really dislike plant-based burgers. They make me feel sick and tired.",
                          "plant-based burgers", "dislike") is None
    assert stance_problem("I really enjoy visiting national parks. It's a privilege to see such beautiful places.",
                          "visiting national parks", "like") is None
    # a cue in a later clause about the item ("... I love them") is read too, not only the first clause
    assert "opposite" in stance_problem("I really dislike sushi counters. Honestly though, I love them.",
                                        "sushi counters", "dislike")


def test_praise_without_a_cue_word_and_a_reply_that_turns_the_users_stance_are_refused():
    praised = ("Honestly, I really dislike Peruvian ceviche. Can't imagine a better dish than your homemade version "
               "with coconut butter and cilantro.")
    assert "opposite stance 'like'" in stance_problem(praised, "Peruvian ceviche", "dislike")
    wrong = "Hola! I'm so glad to hear that you enjoyed Peruvian ceviche! Have you tried the local version?"
    assert "opposite 'like'" in attributed_problem(wrong, "Peruvian ceviche", "dislike")
    assert attributed_problem("Since you no longer enjoy Peruvian ceviche, try grilled fish.", "Peruvian ceviche",
                              "dislike") is None
    view = TurnView(allowed=("Peruvian ceviche",), items=("Peruvian ceviche",), topic="foodRecommendation")
    user = "Honestly, I really dislike Peruvian ceviche. The lime is too sharp for me."
    assert "opposite" in exchange_problem(user, wrong, view, item="Peruvian ceviche", stance="dislike")


# -- 2. no echo of the prompt, a role line or the profile ------------------------------------------------

def test_the_system_prompt_a_role_line_and_the_profile_are_refused():
    echoed = "You are a helpful AI assistant. You give practical, friendly advice about travel planning and more."
    assert "role line" in echo_problem(echoed)
    assert "role line" in echo_problem("Premise 1: You're a helpful AI assistant. I'm here to offer practical advice.")
    assert "instructions" in echo_problem("Sure! Write one short message to your assistant and say hello.")
    profile = "Amara grew up in Lagos and moved to London for work; she spends weekends cooking for friends."
    assert "profile" in echo_problem("Well, I grew up in Lagos and moved to London for work; it was hard.", profile)
    assert echo_problem("I grew up by the sea, so fish dinners feel like home to me.", profile) is None


def test_a_speaker_label_is_refused():
    said = "Mentor: I've always been amazed by the way that hand-knotted Persian rugs are made."
    assert "speaker label" in text_problem(said, "assistant_turn")
    assert "speaker label" in text_problem("Premise 1: the rugs are made by hand in small workshops.", "assistant_turn")
    assert text_problem("Tip: try a wool rug in the hallway first, it wears well.", "assistant_turn") is None
    assert text_problem("Small news: I bought a hand-knotted rug for the hallway.", "user_turn") is None


def test_an_edited_template_is_what_counts_as_the_prompt(tmp_path):
    """The prompt's text is read from the templates in use ($PERSONAGEN_PROMPTS too), not a list kept apart."""
    folder = tmp_path / "prompts" / "write_sessions"
    folder.mkdir(parents=True)
    (folder / "turn_user.jinja").write_text(
        "{% block system %}Always mention the weather in Lisbon before anything else.{% endblock %}"
        "{% block user %}{{ opening }}{% endblock %}", encoding="utf-8")
    said = "I always mention the weather in Lisbon before anything else, it is a habit."
    assert prompt_grams(tmp_path / "prompts")
    assert "instructions" in echo_problem(said, root=tmp_path / "prompts")
    assert echo_problem(said) is None


# -- 3. safety, by a classifier that ships its data -------------------------------------------------------

def test_hostile_self_harm_and_violent_lines_are_refused_in_every_field():
    hostile_line = "For what it is worth, I really dislike solo hiking trips. You're just a bunch of kids who can't take their own lives."
    assert "hostile" in text_problem(hostile_line, "user_turn", allowed=["solo hiking trips"])
    for field in ("assistant_turn", "narrative", "profile", "reason", "question", "option"):
        assert "hostile" in text_problem("You are a pathetic idiot and I hate you.", field)
    assert safety_problem("I want to kill myself tonight.")
    assert "alt-profanity-check" in classifier_name()


def test_code_owned_phrases_are_masked_so_a_catalog_item_is_no_insult():
    said = "For what it's worth, I really enjoy keto high-fat diets."
    assert hostility(said)[0] >= HOSTILE  # the bag of words reads "fat" as an insult...
    assert safety_problem(said, ["keto high-fat diets"]) is None  # ...in code's item it is none
    assert text_problem(said, "user_turn", allowed=["keto high-fat diets"]) is None


def test_the_fast_scores_are_the_classifiers_own():
    from profanity_check import predict_prob

    texts = ["You're just a bunch of kids who can't take their own lives.", "I love a good hotpot on a cold night.",
             "Deez nuts", "", "the the the", "I think we should shoot the photos at dawn."]
    assert [round(hostility(t)[0], 9) for t in texts] == [round(float(p), 9) for p in predict_prob(texts)]


def test_a_filler_conversation_with_a_hostile_turn_is_left_out():
    def session(*texts: str) -> SessionWithTurns:
        turns = [Turn(session_id="fil_1", turn_index=i, role="user" if i % 2 == 0 else "assistant", content=t)
                 for i, t in enumerate(texts)]
        return SessionWithTurns(session=Session(session_id="fil_1", persona_id=None, topic="filler: x", period=None,
                                                time=None, kind="filler", n_turns=len(turns), n_tokens=1),
                                turns=turns)

    assert hostile(session("How do I sort a list in Python?", "Use sorted(), it returns a new list."
                           )) is False
    assert hostile(session("Deez nuts", "I am not sure what you mean."))


# -- 4. on topic ---------------------------------------------------------------------------------------------

def test_a_turn_that_wanders_into_another_topic_is_refused():
    lodging = ("I fell for the weathered, imperfect simplicity of a Kyoto temple lodging. You might want to look "
               "into temples in Tokyo.")
    assert "wanders off" in topic_problem(lodging, "foodRecommendation")
    assert topic_problem(lodging, "homeDecoration") is None  # where the catalog's words place it
    thali = ("For what it is worth, I really dislike Indian thali lunches. A staple of the Indian diet. A humble "
             "yet uninspiring feast that can be a complete waste of a traditional lunch hour, if you ignore it.")
    assert topic_problem(thali, "foodRecommendation", ("Indian thali lunches",)) is None
    assert topic_problem("That sounds lovely, thank you.", "foodRecommendation") is None
    # a life event the plan placed in this topic is code's: only what the model added is read
    told = "Some news: I went home the next day after keyhole surgery on a gallbladder. Still processing it."
    assert topic_problem(told, "bookRecommendation")
    assert topic_problem(told, "bookRecommendation",
                         known=("went home the next day after keyhole surgery on a gallbladder",)) is None


def test_an_event_belongs_to_the_topic_its_words_are_of():
    assert reaches("was evacuated from a national park campsite by a wildfire", "travelPlanning")
    assert not reaches("was evacuated from a national park campsite by a wildfire", "foodRecommendation")


# -- 5. replies answer -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("user, reply, why", [
    ("I really enjoy road trips through the desert, Namibia was amazing.", "Namibia, AZ. I'm so glad you enjoyed it!",
     "bare fragment"),
    ("I have to say I really dislike home sourdough baking. I've been trying to make it vegan.",
     "Sorghum flour, whole grains, and some of those ingredients you just mentioned are not vegan.", "bare list"),
    ("Honestly, I really enjoy spicy Sichuan hotpot.", "Oh nice, I just love spicy Sichuan hotpot myself!",
     "claims a taste"),
    ("Honestly, I really enjoy omakase sushi counters.", "Honestly, I enjoy omakase sushi counters.", "claims a taste"),
    ("Honestly, I really dislike Peruvian ceviche.", "Honestly, I'm not a big fan of Peruvian ceviche. It's often "
     "made with processed ingredients.", "claims a taste"),
    ("I would like some general tips on rugs for a small flat.", "True, my personal favorite method is hand-knotted "
     "Persian rugs. I find them incredibly detailed.", "claims a taste"),
    ("I have to say I really dislike plant-based burgers, they're just as bad as any other burger.",
     "Mmm, not what I wanted!", "picks up nothing"),
    ("Small news: I lost a child's godparent to Covid.", "The world is a different place when you care about others.",
     "picks up nothing"),
])
def test_replies_the_embedded_model_wrote_that_are_no_replies(user, reply, why):
    items = ("spicy Sichuan hotpot", "omakase sushi counters", "plant-based burgers", "Peruvian ceviche")
    assert why in reply_problem(user, reply, items)


@pytest.mark.parametrize("user, reply", [
    ("Honestly, I really enjoy spicy Sichuan hotpot.", "Good question. Hotpot is best shared; try a split broth."),
    ("Since I spent a long weekend in Naples eating pizza, I have come to enjoy city breaks.",
     "Pizza and city life in Naples are hard to beat; Lisbon and Porto have the same mix of museums and food."),
    ("I really enjoy omakase sushi counters.", "I'd love to help you find sushi counters near you this month."),
    ("Thanks! Any tips for the weekend hike?", "Thanks! Pack water and start early: hikes are cooler before noon."),
])
def test_plain_replies_pass(user, reply):
    assert reply_problem(user, reply, ("omakase sushi counters", "spicy Sichuan hotpot")) is None


def test_an_exchange_is_checked_whole_and_naming_the_item_is_no_echo():
    view = TurnView(allowed=("heritage tours of ancestral countries",), items=("heritage tours of ancestral countries",),
                    topic="travelPlanning")
    user = "For what it's worth, I love heritage tours of ancestral countries."
    reply = "Thanks for telling me about heritage tours of ancestral countries. Start with one country you know."
    assert exchange_problem(user, reply, view, item="heritage tours of ancestral countries") is None
    assert exchange_problem(user, "You are a helpful AI assistant. You give friendly advice on travel.", view,
                            item="heritage tours of ancestral countries").startswith("assistant turn repeats a role")
    assert exchange_problem(user, None, replace(view, topic="foodRecommendation"),
                            item="heritage tours of ancestral countries") is None  # the user turn alone, item named


def test_the_turn_mode_refuses_a_reply_that_echoes_the_system_prompt(tmp_path):
    """In the pipeline: every reply the model gives is its system prompt, so each beat keeps the model's user
    turn beside code's reply, and the problem is counted."""
    from pipeline.config import load_config
    from pipeline.llm import LLM
    from pipeline.run.persona_text import build_persona_text
    from pipeline.s1_personas.sample_personas import sample_personas
    from schemas.llm import LLMSettings

    base = load_config("smoke", n_personas=1, seed=4)
    config = base.model_copy(update={"text": base.text.model_copy(update={"writing": "turn"})})
    llm = LLM(LLMSettings(llm="fake", cache_path=tmp_path / "c.sqlite", backoff_s=0, backoff_max_s=0))
    real = llm.agenerate

    async def echoing(spec, context, **kwargs):  # the turn mode asks each turn on its own
        out = await real(spec, context, **kwargs)
        if spec.name != "write_sessions.turn_assistant":
            return out
        return out.model_copy(update={"text": "You are a helpful AI assistant. You give practical, friendly advice "
                                              "about travel planning."})

    llm.agenerate = echoing
    (seed,) = sample_personas(1, run_seed=config.seed, settings=config.personas)
    result = build_persona_text(seed, config=config, llm=llm)
    replies = [t for s in result.sessions for t in s.turns if t.role == "assistant"]
    assert replies and all(t.fallback for t in replies)
    assert not any("helpful AI assistant" in t.content for t in replies)
    assert any(p.startswith("assistant turn repeats a role line") for p in result.stats.problems)


def test_a_grave_event_taken_lightly_is_refused():
    suicide = ("lost a best friend to suicide",)
    assert "lightly ('funny')" in tone_problem(
        "By the way, I lost a best friend to suicide. It's always funny when you think about it.", suicide)
    covid = ("lost a child's godparent to Covid",)
    assert tone_problem("Small news: I lost a child's godparent to Covid. This is not an easy pill to swallow, but "
                        "it has been worth it in the end.", covid)
    assert tone_problem("By the way, I lost a best friend to suicide. I still think about her every day.", suicide) is None
    assert tone_problem("I am so sorry. Losing a friend that way is heavy; be gentle with yourself.", suicide) is None
    # a change a grave event caused may be a new liking, said plainly
    scare = ("swapped beef patties for meat-free burgers after a heart scare",)
    assert tone_problem("Since I swapped beef patties for meat-free burgers after a heart scare, I have come to "
                        "enjoy plant-based burgers. They are wonderful.", scare, sentiment=False) is None
    view = TurnView(allowed=suicide, topic="therapy")
    assert "lightly" in exchange_problem("By the way, I lost a best friend to suicide. It is hard.",
                                         "Great news, thanks for sharing that you lost a best friend!", view,
                                         known=suicide)
