"""The situation catalog of in-situ queries (``pipeline/data/situations.yaml``): the situations a user's message
comes from, the messages per query type and the reply variants per type."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.query import QUERY_TYPES

# the slots each reply field may use; a variant using another one is refused at load time
REPLY_FIELDS: dict[str, dict[str, set[str]]] = {
    "recall_user_shared_facts": {"told": {"reason"}, "forgot": {"phrase"}},
    "suggest_new_ideas": {"fresh": {"item"}},
    "acknowledge_latest_preferences": {"enjoy": set(), "avoid": set(), "like": {"item", "enjoy"},
                                       "dislike": {"item", "avoid"}, "unsaid": {"item"}},
    "track_full_preference_evolution": {"enjoyed": set(), "avoided": set(), "enjoy": set(), "avoid": set(),
                                        "act_like": {"it"}, "act_dislike": {"it"}, "forgot": {"item"}},
    "revisit_reasons_behind_preference_updates": {"enjoy": set(), "avoid": set(), "changed": {"item", "reason"},
                                                  "still": {"item", "stance"}},
    "provide_preference_aligned_recommendations": {"enjoy": set(), "avoid": set(), "like": {"item", "alt", "enjoy"},
                                                   "dislike": {"item", "alt", "avoid"}},
    "generalize_to_new_scenarios": {"enjoy": set(), "avoid": set(), "plan": {"item", "stance", "reason"}},
}
AGREEMENT = {"it", "they", "has", "is", "Is", "feels", "sits"}  # words that agree with the item (wording.item_slots)
MESSAGE_SLOTS: dict[str, set[str]] = {t: {"situation"} for t in QUERY_TYPES} | {
    "recall_user_shared_facts": {"phrase", "when", "who", "who_lower"},
    "revisit_reasons_behind_preference_updates": {"situation", "item", *AGREEMENT},
}


class TopicSituations(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    phrase: str = Field(min_length=3)
    situations: dict[str, str] = Field(min_length=2)
    broad: list[str] = Field(default_factory=list, description="the situations every item of the topic fits, drawn "
                                                               "for questions whose replies name two or more items "
                                                               "(none given: all)")

    def keys(self, broad: bool = False) -> list[str]:
        """The situation ids to draw from, sorted: the broad ones only when ``broad`` and the topic lists any."""
        return sorted(self.broad if broad and self.broad else self.situations)


class SituationCatalog(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int
    who: list[str] = Field(min_length=1)
    others: list[str] = Field(default_factory=list, description="phrases of event summaries whose 'their'/'them' "
                                                                  "is somebody else's, kept as they are")
    when: list[str] = Field(min_length=1)
    topics: dict[str, TopicSituations]
    fallback: TopicSituations
    messages: dict[str, list[str]]
    replies: dict[str, list[dict[str, str]]]

    @model_validator(mode="after")
    def _complete(self) -> SituationCatalog:
        import string

        def slots(text: str) -> set[str]:
            return {name for _, name, _, _ in string.Formatter().parse(text) if name}

        for qtype in QUERY_TYPES:
            messages, variants = self.messages.get(qtype), self.replies.get(qtype)
            if not messages or not variants:
                raise ValueError(f"messages and replies need at least one entry for {qtype}")
            for text in messages:
                if extra := slots(text) - MESSAGE_SLOTS[qtype]:
                    raise ValueError(f"messages.{qtype}: {text!r} uses unknown slot(s) {sorted(extra)}")
                if not text.rstrip().endswith("?"):
                    raise ValueError(f"messages.{qtype}: {text!r} asks nothing (no final '?')")
            for k, variant in enumerate(variants):
                if extra := set(variant) - set(REPLY_FIELDS[qtype]):
                    raise ValueError(f"replies.{qtype}[{k}]: unknown field(s) {sorted(extra)}")
                for name, allowed in REPLY_FIELDS[qtype].items():
                    if name not in variant:
                        raise ValueError(f"replies.{qtype}[{k}]: missing {name!r}")
                    agree = AGREEMENT if "item" in allowed else set()
                    if extra := slots(variant[name]) - allowed - agree:
                        raise ValueError(f"replies.{qtype}[{k}].{name}: unknown slot(s) {sorted(extra)}")
        for name, topic in {**self.topics, "fallback": self.fallback}.items():
            for key, text in topic.situations.items():
                if slots(text) - {"when"}:
                    raise ValueError(f"topics.{name}.situations.{key}: only {{when}} may be filled")
            if unknown := [k for k in topic.broad if k not in topic.situations]:
                raise ValueError(f"topics.{name}.broad: {unknown[0]!r} is not one of its situations")
        return self
