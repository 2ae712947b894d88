"""Template inputs (``*Context``) and raw model outputs (``*Draft``) of the text stages.

Drafts are what the LLM writes; the stages turn them into stored rows with ids, times and
annotations in pure, tested functions. Minimum lengths keep a weak model from returning empty text.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from schemas.fake_text import gist_word, gist_words, helpful_reply
from schemas.persona import Style

_STYLE_EXAMPLE = {"verbosity": "moderate", "formality": "casual", "typo_rate": 0.0, "emoji_use": "never",
                  "directness": "explicit"}


def _examples(*examples: dict) -> ConfigDict:
    return ConfigDict(extra="forbid", json_schema_extra={"examples": list(examples)})


# -- expand_persona ----------------------------------------------------------------------------------
class ProfileContext(BaseModel):
    """What code knows about a persona before the model writes its profile."""

    model_config = _examples({
        "seed_text": "A 34-year-old woman working as a nurse in Lagos, Nigeria who enjoys pottery.",
        "name": "Amara Okafor", "age": 34, "gender_identity": "woman", "location": "Lagos, Nigeria",
        "occupation": "nurse",
    })

    seed_text: str
    name: str
    age: int | None
    gender_identity: str | None
    location: str | None
    occupation: str | None


class ProfileDraft(BaseModel):
    """The persona's profile as the model writes it."""

    name: str = Field(min_length=3, max_length=60, description="Full name of the person.")
    age: int = Field(ge=18, le=100, description="Age in years.")
    gender_identity: Literal["woman", "man", "nonbinary"]
    occupation: str = Field(min_length=3, max_length=80)
    location: str = Field(min_length=3, max_length=80, description="City and country.")
    background: str = Field(min_length=120, max_length=800,
                            description="4-6 sentences in third person: life story, habits, what matters to them.")

    @classmethod
    def fake_output(cls, context: ProfileContext, rng: random.Random) -> ProfileDraft:
        age = context.age or rng.randint(22, 70)
        job = context.occupation or "designer"
        where = context.location or "Lisbon, Portugal"
        return cls(
            name=context.name, age=age, gender_identity=context.gender_identity or "nonbinary",
            occupation=job, location=where,
            background=(f"{context.name} is {age} and works as {job} in {where}. {context.seed_text} "
                        f"Weekends are for long walks and calling old friends. "
                        f"{context.name.split()[0]} keeps a small notebook of plans and ideas."),
        )


class InventoryContext(BaseModel):
    """One topic's inventory request."""

    model_config = _examples({
        "name": "Amara Okafor", "profile": "Amara is a 34-year-old nurse in Lagos who loves pottery.",
        "topic": "foodRecommendation", "topic_description": "What to eat and cook.", "n_items": 12,
        "examples": ["slow-cooked ramen", "spicy Sichuan hotpot"],
    })

    name: str
    profile: str
    topic: str
    topic_description: str
    n_items: int
    examples: list[str]


@cache
def inventory_draft(n_items: int) -> type[BaseModel]:
    """An output model asking for exactly ``n_items`` items (the grammar enforces the count)."""
    model = create_model(
        f"InventoryDraft{n_items}",
        items=(list[Annotated[str, Field(min_length=3, max_length=60)]], Field(min_length=n_items, max_length=n_items,
                                    description="Concrete things this person could like or dislike, 2-6 words each.")),
    )
    model.fake_output = classmethod(_fake_inventory)
    return model


def _fake_inventory(cls, context: InventoryContext, rng: random.Random) -> BaseModel:
    words = ["weekend", "homemade", "classic", "modern", "budget", "seasonal", "local", "vintage", "quiet", "bold"]
    topic = context.topic.removesuffix("Recommendation").removesuffix("Consultation").lower()
    # "budget food07": two items share at most one of their two words, so no item "mentions" another
    items = [f"{words[(i + rng.randint(0, 9)) % 10]} {topic}{i + 1:02d}" for i in range(context.n_items)]
    return cls(items=items)


# -- narrate_events ----------------------------------------------------------------------------------
class EffectView(BaseModel):
    """One preference change a life event caused, as the narrator sees it."""

    model_config = ConfigDict(extra="forbid")

    topic: str
    item: str
    old_stance: str | None
    new_stance: str
    link: str | None = Field(default=None, description="what the event makes the person want more or less of")


class NarrationContext(BaseModel):
    """A life event with its causal parents and its effects on preferences."""

    model_config = _examples({
        "name": "Amara Okafor", "profile": "Amara is a 34-year-old nurse in Lagos.", "date": "2025-01-09",
        "category": "health", "summary": "was diagnosed with high blood pressure",
        "causes": ["started working night shifts"],
        "effects": [{"topic": "foodRecommendation", "item": "spicy Sichuan hotpot", "old_stance": "like",
                     "new_stance": "dislike", "link": "less spicy food"}],
    })

    name: str
    profile: str
    date: str
    category: str
    summary: str
    causes: list[str]
    effects: list[EffectView]


@cache
def narration_draft(n_effects: int) -> type[BaseModel]:
    """Narrative plus exactly one reason per effect, in the order of the effects."""
    fields: dict = {
        "narrative": (str, Field(min_length=60, max_length=600,
                                 description="2-4 sentences in first person telling what happened.")),
    }
    if n_effects:
        fields["reasons"] = (
            list[Annotated[str, Field(min_length=20, max_length=400)]],
            Field(min_length=n_effects, max_length=n_effects,
                  description="For each effect in order: one personal sentence on why the event changed it."),
        )
    model = create_model(f"NarrationDraft{n_effects}", **fields)
    model.fake_output = classmethod(_fake_narration)
    return model


def _fake_narration(cls, context: NarrationContext, rng: random.Random) -> BaseModel:
    first = context.name.split()[0]
    narrative = (f"On {context.date} I {context.summary}. It shook up my routine more than I expected, "
                 f"and I, {first}, had to rethink a few habits.")
    reasons = [f"After I {context.summary}, my feelings about {e.item} shifted"
               + (f": I want {e.link} now." if e.link else ".") for e in context.effects]
    return cls(narrative=narrative, **({"reasons": reasons} if reasons else {}))


# -- write_sessions -----------------------------------------------------------------------------------
BeatKind = Literal["initial_preference", "preference_update", "routine", "life_event"]


class BeatContext(BaseModel):
    """One beat to voice: the facts are fixed, the model only words them."""

    model_config = _examples({
        "name": "Amara Okafor", "profile": "Amara is a 34-year-old nurse in Lagos.", "style": _STYLE_EXAMPLE,
        "topic": "foodRecommendation", "date": "2025-01-13", "kind": "preference_update",
        "item": "spicy Sichuan hotpot", "stance": "dislike",
        "reason": "My doctor told me to cut back on salt after my blood pressure reading.",
        "event": "was diagnosed with high blood pressure",
    })

    name: str
    profile: str
    style: Style
    topic: str
    date: str
    kind: BeatKind
    item: str | None
    stance: str | None
    reason: str | None
    event: str | None
    cue: str | None = Field(default=None, description="an implicit beat: what the user asks for; item and stance "
                                                      "are not shown, the user never names them")
    assistant_words_min: int = 80
    assistant_words_max: int = 250


class ExchangeDraft(BaseModel):
    """One user message and the assistant's reply."""

    user: str = Field(min_length=15, max_length=500, description="What the user says, in their own style.")
    assistant: str = Field(min_length=15, max_length=500,
                           description="The assistant's helpful reply; it only repeats what the user said.")

    @classmethod
    def fake_output(cls, context: BeatContext, rng: random.Random) -> ExchangeDraft:
        verbs = {"like": ["really enjoy", "love", "am into"], "dislike": ["can't stand", "avoid", "dislike"]}
        if context.cue:  # implicit: the stance shows in what the user asks for
            since = f"Since I {context.event}, " if context.event else ""
            user = f"{since}I am looking for {context.cue}. Any thoughts on where to begin?"
            user = user[0].upper() + user[1:]
        elif context.kind == "life_event" or not context.item:
            user = f"Some news from my side: I {context.event}. Still processing it."
        elif context.kind == "routine":
            user = f"Small thing, but I {context.event}."
        elif context.kind == "preference_update":
            user = (f"{context.reason or 'Things changed lately.'} These days I "
                    f"{rng.choice(verbs[context.stance or 'like'])} {context.item}.")
        else:
            user = f"For what it's worth, I {rng.choice(verbs[context.stance or 'like'])} {context.item}."
        opening = (f"Glad to help you look; start from the {' and the '.join(gist_words(context.cue, 3)).lower()}."
                   if context.cue else
                   f"Thanks for telling me, I have noted the {gist_word(context.item or context.event or user).lower()}.")
        return cls(user=user, assistant=helpful_reply(opening, _target_words(cls, context), rng))


def _assistant_field(low: int, high: int):
    """The assistant turn of a sized exchange: character bounds that follow from the word targets."""
    return (str, Field(min_length=max(15, low * 3), max_length=max(500, high * 9),
                       description=f"The assistant's reply, {low}-{high} words: it really helps (ideas, plans, "
                                   "explanations) and only repeats what the user said about themselves."))


def _target_words(exchange: type[ExchangeDraft], context: BaseModel) -> tuple[int, int]:
    """The word range a fake reply aims for: the context's targets for a sized exchange, else a short reply."""
    if exchange is ExchangeDraft:
        return (12, 24)
    return (context.assistant_words_min, context.assistant_words_max)


@cache
def exchange_draft(words_min: int, words_max: int) -> type[ExchangeDraft]:
    """One exchange whose assistant turn runs ``words_min``-``words_max`` words."""
    return create_model(f"ExchangeDraft{words_min}to{words_max}", __base__=ExchangeDraft,
                        assistant=_assistant_field(words_min, words_max))


class SmallTalkContext(BaseModel):
    """Ordinary turns on a topic that voice no preference."""

    model_config = _examples({
        "name": "Amara Okafor", "profile": "Amara is a 34-year-old nurse in Lagos.", "style": _STYLE_EXAMPLE,
        "topic": "travelPlanning", "topic_description": "Planning trips.", "date": "2025-01-13", "n_exchanges": 2,
    })

    name: str
    profile: str
    style: Style
    topic: str
    topic_description: str
    date: str
    n_exchanges: int
    assistant_words_min: int = 80
    assistant_words_max: int = 250


@cache
def small_talk_draft(n_exchanges: int, words: tuple[int, int] | None = None) -> type[BaseModel]:
    """Exactly ``n_exchanges`` ordinary exchanges; with ``words``, assistant turns of that many words."""
    exchange = exchange_draft(*words) if words else ExchangeDraft
    model = create_model(
        f"SmallTalkDraft{n_exchanges}" + (f"w{words[0]}to{words[1]}" if words else ""),
        exchanges=(list[exchange], Field(min_length=n_exchanges, max_length=n_exchanges)),
    )
    model.fake_output = classmethod(_fake_small_talk)
    return model


_QUESTIONS = ["How should I plan my week around this?", "What's a good first step here?",
              "Can you explain how people usually approach this?", "Any general tips to get started?",
              "What questions should I ask myself first?", "How much time does this usually take?"]


def _fake_small_talk(cls, context: SmallTalkContext | FillerContext, rng: random.Random) -> BaseModel:
    subject = getattr(context, "topic", None) or getattr(context, "subject", "this")
    exchange = cls.model_fields["exchanges"].annotation.__args__[0]
    exchanges = [
        exchange(user=f"{rng.choice(_QUESTIONS)} It's about {subject}.",
                 assistant=helpful_reply(f"Good question. For {subject}, start small.", _target_words(exchange, context), rng))
        for _ in range(context.n_exchanges)
    ]
    return cls(exchanges=exchanges)


class SessionBeatView(BaseModel):
    """A beat as the session writer sees it: which exchange voices it, and the fixed facts."""

    model_config = ConfigDict(extra="forbid")

    exchange: int = Field(ge=1, description="1-based position of the exchange that voices it")
    kind: BeatKind
    item: str | None
    stance: str | None
    reason: str | None
    event: str | None
    cue: str | None = None


class SessionContext(BaseModel):
    """A whole session to write in one call: ordinary exchanges, with the beats at fixed positions."""

    model_config = _examples({
        "name": "Amara Okafor", "profile": "Amara is a 34-year-old nurse in Lagos.", "style": _STYLE_EXAMPLE,
        "topic": "foodRecommendation", "topic_description": "What to eat and cook.", "date": "2025-01-13",
        "n_exchanges": 3, "assistant_words_min": 80, "assistant_words_max": 250,
        "beats": [{"exchange": 2, "kind": "initial_preference", "item": "spicy Sichuan hotpot", "stance": "like",
                   "reason": None, "event": None}],
    })

    name: str
    profile: str
    style: Style
    topic: str
    topic_description: str
    date: str
    n_exchanges: int
    assistant_words_min: int
    assistant_words_max: int
    beats: list[SessionBeatView]


@cache
def session_draft(n_exchanges: int, words: tuple[int, int]) -> type[BaseModel]:
    """A whole session: exactly ``n_exchanges`` exchanges in order, assistant turns of ``words`` words."""
    model = create_model(
        f"SessionDraft{n_exchanges}w{words[0]}to{words[1]}",
        exchanges=(list[exchange_draft(*words)], Field(min_length=n_exchanges, max_length=n_exchanges,
                                                       description="The exchanges in order; exchange k voices the "
                                                                   "beat listed for position k, the others none.")),
    )
    model.fake_output = classmethod(_fake_session)
    return model


def _fake_session(cls, context: SessionContext, rng: random.Random) -> BaseModel:
    exchange = cls.model_fields["exchanges"].annotation.__args__[0]
    beats = {b.exchange: b for b in context.beats}
    shared = context.model_dump(include={"name", "profile", "style", "topic", "date", "assistant_words_min",
                                         "assistant_words_max"})
    out = []
    for k in range(1, context.n_exchanges + 1):
        if k in beats:
            view = BeatContext(**shared, **beats[k].model_dump(exclude={"exchange"}))
            out.append(exchange.fake_output(view, rng))
        else:
            out.append(exchange(user=f"{rng.choice(_QUESTIONS)} It's about {context.topic}.",
                                assistant=helpful_reply(f"Good question. For {context.topic}, start small.",
                                                        _target_words(exchange, context), rng)))
    return cls(exchanges=out)


class FillerContext(BaseModel):
    """A persona-neutral everyday conversation used to reach token budgets."""

    model_config = _examples({"subject": "how to descale a kettle", "n_exchanges": 3})

    subject: str
    n_exchanges: int
