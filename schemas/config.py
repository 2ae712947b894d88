"""Run configuration. Every model forbids unknown fields so a typo fails loudly."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.context import AssemblySettings
from schemas.query import QueryType

DEFAULT_TOPICS: tuple[str, ...] = (
    "therapy",
    "legalConsultation",
    "bookRecommendation",
    "musicRecommendation",
    "movieRecommendation",
    "foodRecommendation",
    "familyRelations",
    "datingConsultation",
    "medicalConsultation",
    "financialConsultation",
    "travelPlanning",
    "onlineShopping",
    "studyConsultation",
    "homeDecoration",
    "sportsRecommendation",
)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Simulated time stays far from datetime's end (year 9999): events and sessions fall after the last period.
CALENDAR_END = datetime(9000, 1, 1)


class Period(Strict):
    """A snapshot at which conversations happen, ``offset_days`` after the run's start date."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_+\-]+$")
    offset_days: int = Field(ge=0, le=36_500)  # at most a century after the start date


DEFAULT_PERIODS = [
    Period(name="INIT", offset_days=0),
    Period(name="WEEK", offset_days=7),
    Period(name="MONTH", offset_days=30),
    Period(name="YEAR", offset_days=365),
]


class PersonaSettings(Strict):
    """Where seed personas come from."""

    source: Literal["builtin", "personahub"] = "builtin"
    personahub_path: str | None = None
    split: str = "test"

    @model_validator(mode="after")
    def _path_for_personahub(self) -> PersonaSettings:
        if self.source == "personahub" and not self.personahub_path:
            raise ValueError("personas.personahub_path is required when personas.source is 'personahub'")
        if self.personahub_path and "\0" in self.personahub_path:
            raise ValueError("personas.personahub_path: holds a NUL character")
        return self


class TimelineSettings(Strict):
    """Rates of the causal timeline simulator."""

    initial_prefs_min: int = Field(default=3, ge=1, le=20)
    initial_prefs_max: int = Field(default=5, ge=1, le=20)
    like_probability: float = Field(default=0.6, ge=0.0, le=1.0)
    stereotypical_fraction: float = Field(default=0.25, ge=0.0, le=1.0)
    background_events: int = Field(default=2, ge=0, le=20, description="life events before INIT")
    topic_update_probability: float = Field(
        default=0.5, ge=0.0, le=1.0, description="chance that a topic's preferences change in each later period"
    )
    # an event's effects name only the topics it plausibly touches, so a second topic is found less often
    # than it is tried: 0.85 tried gives about a fifth to a quarter of the life events touching 2+ topics
    cross_topic_fraction: float = Field(default=0.85, ge=0.0, le=1.0)
    max_topics_per_event: int = Field(default=3, ge=1, le=6)
    followup_probability: float = Field(default=0.3, ge=0.0, le=1.0, description="a life event caused by an earlier one")
    continue_chain_probability: float = Field(default=0.6, ge=0.0, le=1.0)
    new_item_fraction: float = Field(default=0.08, ge=0.0, le=1.0)
    max_versions: int = Field(default=4, ge=1, le=12, description="max chain length of one preference")
    routine_per_period: float = Field(default=2.0, ge=0.0, le=50.0, description="mean routine events per later period")
    last_period_days: int = Field(default=30, ge=1)

    @model_validator(mode="after")
    def _bounds(self) -> TimelineSettings:
        if self.initial_prefs_min > self.initial_prefs_max:
            raise ValueError("timeline.initial_prefs_min is greater than timeline.initial_prefs_max")
        return self


class TextSettings(Strict):
    """Sizes of the text stages (persona expansion, sessions, filler)."""

    inventory_size: int = Field(default=12, ge=3, le=40, description="candidate items the model writes per topic")
    stereotype_items: int = Field(default=3, ge=0, le=10, description="catalog items matching the demographics")
    catalog_share: float = Field(
        default=0.4, ge=0.0, le=1.0,
        description="least share of the inventory taken from the catalog (items with facets, which life events can "
                    "turn either way); the model's items fill the rest")
    sessions_per_period: int = Field(default=1, ge=1, le=6)
    small_talk_exchanges: int = Field(default=2, ge=0, le=12, description="fewest ordinary exchanges per session")
    session_exchanges: int = Field(
        default=6, ge=1, le=15, description="exchanges per session (beats + ordinary ones, two turns each), at least")
    writing: Literal["auto", "session", "exchange", "turn"] = Field(
        default="auto", description="session: one call writes a whole session, failing beats are rewritten one "
                                    "by one; exchange: a call per beat plus one for the ordinary exchanges; turn: "
                                    "a short call per turn (the small model's mode); auto: turn on the embedded "
                                    "model, session elsewhere")
    implicit_share: float = Field(
        default=0.5, ge=0.0, le=1.0,
        description="share of the turns that voice a preference implicitly: the stance shown through what the user "
                    "asks for (a hand-written cue of pipeline/data/cues/), never the item's name nor a stance word; "
                    "items without cues are always voiced explicitly")
    turn_attempts: int = Field(default=4, ge=1, le=8, description="samples per beat in the turn mode")
    turn_words_min: int = Field(
        default=30, ge=3, le=1000, description="in the turn mode, the shortest reply accepted, in words (when below "
                                               "assistant_words_min): the prompt still asks for the profile's range, "
                                               "which a small model rarely reaches")
    assistant_words_min: int = Field(default=80, ge=3, le=1000, description="shortest assistant turn, in words")
    assistant_words_max: int = Field(default=250, ge=5, le=2000, description="longest assistant turn, in words")
    max_turn_tokens: int = Field(default=450, ge=20, le=4000)
    attempts: int = Field(default=3, ge=1, le=6, description="model attempts per item before code takes over")
    filler_pool_size: int = Field(default=40, ge=0, le=100_000)
    filler_exchanges: int = Field(default=4, ge=1, le=20)

    @model_validator(mode="after")
    def _words(self) -> TextSettings:
        if self.assistant_words_min > self.assistant_words_max:
            raise ValueError("text.assistant_words_min is greater than text.assistant_words_max")
        return self

    def ordinary_exchanges(self, n_beats: int) -> int:
        """Ordinary exchanges a session with ``n_beats`` beats gets: enough to reach ``session_exchanges``."""
        return max(self.small_talk_exchanges, self.session_exchanges - n_beats)


class FillerSettings(Strict):
    """Where filler comes from: real conversations (ShareGPT, as LongMemEval does) or the model."""

    source: Literal["sharegpt", "llm"] = Field(default="sharegpt", description="sharegpt: no model calls for filler")
    min_exchanges: int = Field(default=2, ge=1, le=50, description="shortest ShareGPT conversation kept, in exchanges")
    max_exchanges: int = Field(default=20, ge=1, le=200, description="longest ShareGPT conversation kept, in exchanges")
    max_turn_chars: int = Field(default=4000, ge=100, le=100_000, description="ShareGPT conversations with a longer turn are skipped")
    max_session_tokens: int = Field(default=5000, ge=200, le=100_000, description="longest ShareGPT conversation kept, in tokens")

    @model_validator(mode="after")
    def _bounds(self) -> FillerSettings:
        if self.min_exchanges > self.max_exchanges:
            raise ValueError("filler.min_exchanges is greater than filler.max_exchanges")
        return self


class RefreshSettings(Strict):
    """The scheduled refresh (`make serve`): when, which personas, how many versions to keep."""

    cron: str = Field(default="0 3 * * 1", description="cron in the server's time zone; default Mondays 03:00")
    seed_policy: Literal["roll", "fixed"] = Field(
        default="fixed", description="roll: fresh personas each refresh; fixed: same personas, only changes rerun")
    keep: int = Field(default=4, ge=1, description="complete versions kept after each refresh")


class ProbeSettings(Strict):
    """The option-only probes (classifiers that never see the history) and the filter they drive before publishing."""

    enabled: bool = Field(default=True, description="probe, filter and check the queries before publishing")
    folds: int = Field(default=5, ge=2, le=20, description="persona-grouped cross-validation folds")
    rounds: int = Field(default=2, ge=1, le=10, description="cross-validation repeats over different persona splits")
    confidence: float = Field(default=0.5, gt=0.0, lt=1.0,
                              description="probability of the correct option above which a right answer counts as confident")
    filter_budget: float = Field(default=0.25, ge=0.0, le=1.0,
                                 description="largest share of the queries the filter may redraw or drop")
    filter_above: float = Field(default=0.27, ge=0.0, le=1.0,
                                description="only types the probe answers more often than this are filtered")
    balance_slack: float = Field(default=0.2, ge=0.0, le=3.0,
                                 description="before probing, a slot of an option-set shape answered more often than 1 + this "
                                             "times the least answered slot (per option) is thinned to that rate")
    filter_passes: int = Field(default=1, ge=0, le=5, description="probe-and-redraw passes before the last drop")
    max_accuracy: float = Field(default=0.30, gt=0.0, le=1.0,
                                description="publishing fails when a probe's overall accuracy is above this beyond "
                                            "doubt (the lower end of its 95% interval)")
    max_type_accuracy: float = Field(default=0.35, gt=0.0, le=1.0,
                                     description="publishing fails when a type's probe accuracy is above this beyond doubt")
    min_type_queries: int = Field(default=30, ge=1,
                                  description="a type with fewer queries than this is reported, never refused")
    min_personas: int = Field(default=10, ge=2, description="fewer personas than this: the probe is reported, not enforced")


class QuerySettings(Strict):
    """How many queries each persona gets, their options, and the gates that keep them honest."""

    n_options: int = Field(default=4, ge=3, le=8, description="options per query, exactly one correct")
    per_type: int = Field(default=3, ge=0, le=50, description="queries of each type per persona, as the timeline allows")
    type_quotas: dict[QueryType, int] = Field(default_factory=dict, description="per-type overrides of per_type")
    anchored_fraction: float = Field(
        default=0.5, ge=0.0, le=1.0, description="share asked inside the topic's final session (the rest at the end)"
    )
    length_tolerance: float = Field(default=0.25, gt=0.0, lt=1.0, description="option tokens within this of the median")
    attempts: int = Field(default=2, ge=1, le=6, description="model wordings per query before code writes it")
    wording: Literal["auto", "model", "code"] = Field(
        default="auto", description="who words a query's message and replies: model (one call per query, code's "
                                    "wording when it fails a gate), code (no call), auto: code on the embedded "
                                    "model (its wordings failed the gates in every query of its runs), model "
                                    "elsewhere")
    judge_shuffles: int = Field(default=3, ge=1, le=10, description="no-context judge asks per query, options shuffled")
    judge_max_correct: int | None = Field(
        default=None, ge=0, description="drop when the judge is right more often than this; None = shuffles - 1"
    )
    abstain_share: float = Field(default=0.25, ge=0.0, le=1.0,
                                 description="share of the types with a forgetful option whose answer is 'you have not told me'")
    no_change_share: float = Field(default=0.25, ge=0.0, le=1.0,
                                   description="share of evolution queries about a preference that never changed (a reasons question asks it "
                                               "as often as its design shows 'has not changed': half of its options)")
    probe: ProbeSettings = Field(default_factory=ProbeSettings)

    @model_validator(mode="after")
    def _judge_bound(self) -> QuerySettings:
        if self.judge_max_correct is not None and self.judge_max_correct >= self.judge_shuffles:
            raise ValueError("queries.judge_max_correct must be below queries.judge_shuffles")
        return self

    def quota(self, query_type: str) -> int:
        """Queries of ``query_type`` wanted per persona."""
        return self.type_quotas.get(query_type, self.per_type)

    def judge_limit(self) -> int:
        """Most correct no-context answers a kept query may get."""
        return self.judge_shuffles - 1 if self.judge_max_correct is None else self.judge_max_correct


class RunConfig(Strict):
    """Everything that decides a dataset's content (operational settings live elsewhere)."""

    dataset: str = Field(default="personamem", pattern=r"^[A-Za-z0-9_\-]+$")
    seed: int = 7
    n_personas: int = Field(default=180, ge=1, le=100_000)
    start_date: datetime = datetime(2025, 1, 6, 9, 0)
    topics: list[str] = Field(default_factory=lambda: list(DEFAULT_TOPICS), min_length=1)
    periods: list[Period] = Field(default_factory=lambda: list(DEFAULT_PERIODS), min_length=1)
    personas: PersonaSettings = Field(default_factory=PersonaSettings)
    timeline: TimelineSettings = Field(default_factory=TimelineSettings)
    text: TextSettings = Field(default_factory=TextSettings)
    filler: FillerSettings = Field(default_factory=FillerSettings)
    refresh: RefreshSettings = Field(default_factory=RefreshSettings)
    assembly: AssemblySettings = Field(default_factory=AssemblySettings)
    queries: QuerySettings = Field(default_factory=QuerySettings)

    @model_validator(mode="after")
    def _unique(self) -> RunConfig:
        if len(set(self.topics)) != len(self.topics):
            raise ValueError("topics: duplicate topic names")
        names = [p.name for p in self.periods]
        if len(set(names)) != len(names):
            raise ValueError("periods: duplicate period names")
        offsets = [p.offset_days for p in self.periods]
        if offsets != sorted(set(offsets)):
            raise ValueError("periods: offset_days must be strictly increasing")
        if self.start_date.year > CALENDAR_END.year - 200 or self.start_date + timedelta(days=max(offsets)) > CALENDAR_END:
            raise ValueError(f"start_date: {self.start_date:%Y-%m-%d} with periods up to {max(offsets):,} days later "
                             f"runs past {CALENDAR_END:%Y}; use a start date before {CALENDAR_END.year - 200}")
        return self
