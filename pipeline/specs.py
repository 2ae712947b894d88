"""Registry of every PromptSpec; stages add theirs here so `personagen prompts check` lints them all."""

from __future__ import annotations

from pipeline.prompting import PromptSpec
from schemas.drafts import (
    BeatContext,
    ExchangeDraft,
    FillerContext,
    InventoryContext,
    NarrationContext,
    ProfileContext,
    ProfileDraft,
    SessionContext,
    SmallTalkContext,
    inventory_draft,
    narration_draft,
    session_draft,
    small_talk_draft,
)
from schemas.judging import AnswerVerdict, JudgeAnswerContext
from schemas.llm import PingContext, PingReply
from schemas.query import QUERY_TYPES
from schemas.query_drafts import JudgeContext, QueryContext, judge_draft, query_draft
from schemas.reveal_drafts import RevealContext, RevealVerdict
from schemas.turn_drafts import (
    AssistantTurnContext,
    UserTurnContext,
    UserTurnDraft,
    assistant_turn_draft,
)

PING = PromptSpec(name="gateway.ping", template="gateway/ping.jinja", context=PingContext, output=PingReply)
# Stages whose output size is set per call replace `output` with the sized model (dataclasses.replace);
# the registry holds a representative size so `prompts render/check` can show and lint them.
PROFILE = PromptSpec(name="expand_persona.profile", template="expand_persona/profile.jinja",
                     context=ProfileContext, output=ProfileDraft)
INVENTORY = PromptSpec(name="expand_persona.inventory", template="expand_persona/inventory.jinja",
                       context=InventoryContext, output=inventory_draft(12))
NARRATION = PromptSpec(name="narrate_events.narrative", template="narrate_events/narrative.jinja",
                       context=NarrationContext, output=narration_draft(1))
BEAT = PromptSpec(name="write_sessions.beat", template="write_sessions/beat.jinja", context=BeatContext,
                  output=ExchangeDraft)
TURN_USER = PromptSpec(name="write_sessions.turn_user", template="write_sessions/turn_user.jinja",
                       context=UserTurnContext, output=UserTurnDraft)
TURN_ASSISTANT = PromptSpec(name="write_sessions.turn_assistant", template="write_sessions/turn_assistant.jinja",
                            context=AssistantTurnContext, output=assistant_turn_draft(20, 80))
REVEAL = PromptSpec(name="write_sessions.reveal", template="write_sessions/reveal.jinja", context=RevealContext,
                    output=RevealVerdict)
SMALL_TALK = PromptSpec(name="write_sessions.small_talk", template="write_sessions/small_talk.jinja",
                        context=SmallTalkContext, output=small_talk_draft(2))
SESSION = PromptSpec(name="write_sessions.session", template="write_sessions/session.jinja",
                     context=SessionContext, output=session_draft(3, (80, 250)))
FILLER = PromptSpec(name="filler.session", template="filler/session.jinja", context=FillerContext,
                    output=small_talk_draft(4))
QUERY = PromptSpec(name="generate_queries.query", template="generate_queries/query.jinja", context=QueryContext,
                   output=query_draft(4))
QUERY_JUDGE = PromptSpec(name="generate_queries.judge", template="generate_queries/judge.jinja",
                         context=JudgeContext, output=judge_draft(4))
# The open-answer judge of `personagen eval --answer open`: one template per query type, and one for the
# queries whose correct reply is an abstention ("you have not told me"), as LongMemEval's judge has.
ANSWER_JUDGES: dict[str, PromptSpec] = {
    kind: PromptSpec(name=f"evaluate.judge_{kind}", template=f"evaluate/judge_{kind}.jinja",
                     context=JudgeAnswerContext, output=AnswerVerdict)
    for kind in (*QUERY_TYPES, "abstention")
}

ALL_SPECS: dict[str, PromptSpec] = {
    spec.name: spec for spec in (PING, PROFILE, INVENTORY, NARRATION, BEAT, TURN_USER, TURN_ASSISTANT, REVEAL, SMALL_TALK, SESSION, FILLER, QUERY, QUERY_JUDGE,
                                 *ANSWER_JUDGES.values())
}
