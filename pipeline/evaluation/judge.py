"""The open-answer judge: a model decides whether a free-text answer matches the key's correct option (and
not an outdated one), with a template per query type (prompts/evaluate/judge_<type>.jinja; abstentions
have their own), as LongMemEval's judge has one per question type. Judge calls go through the gateway, so
they are cached and resumed like every other call.

Judge agreement: the judge grades, as if they were answers, the correct option's text and one
distractor's text of a seeded sample of queries; agreement is the share of those verdicts that match the
key (the correct text judged correct, the distractor not).
"""

from __future__ import annotations

import asyncio

from pipeline.evaluation.summary import JudgeAgreement
from pipeline.llm import LLM, LLMError
from pipeline.prompting import PromptSpec
from pipeline.rng import derive_rng
from pipeline.specs import ANSWER_JUDGES
from schemas.judging import AnswerVerdict, JudgeAnswerContext, Verdict
from schemas.query import Query

STAGE = "judge"


def judge_spec(query: Query) -> PromptSpec:
    """The judge template of a query: its type's, or the abstention one."""
    return ANSWER_JUDGES["abstention" if query.abstains() else query.type]


def judge_context(query: Query, answer: str) -> JudgeAnswerContext:
    """What the judge reads: the question, the key's correct and outdated options, the answer."""
    return JudgeAnswerContext(
        question=query.question, correct=query.options[query.correct_index].text, answer=answer,
        outdated=[o.text for o in query.options if o.role == "outdated_preference"])


async def ajudge(judge: LLM, query: Query, answer: str) -> Verdict:
    """The judge's verdict on one answer (cached; CallFailed after its retries and re-asks)."""
    verdict: AnswerVerdict = await judge.agenerate(judge_spec(query), judge_context(query, answer), stage=STAGE)
    return verdict.verdict


def distractor(query: Query, seed: int) -> int:
    """The distractor a query's agreement check grades: seeded, a non-outdated one when there is one (the
    judge is shown the outdated options, so those would be the easy case)."""
    wrong = [i for i, o in enumerate(query.options) if i != query.correct_index]
    plain = [i for i in wrong if query.options[i].role != "outdated_preference"] or wrong
    return derive_rng(seed, query.query_id, "judge-agreement").choice(plain)


def agreement_sample(queries: list[Query], n: int, seed: int) -> list[Query]:
    """``n`` distinct queries drawn with a seeded RNG (all when there are fewer), in id order."""
    unique = sorted({q.query_id: q for q in queries}.values(), key=lambda q: q.query_id)
    picked = derive_rng(seed, "judge-agreement").sample(unique, min(n, len(unique)))
    return sorted(picked, key=lambda q: q.query_id)


async def ajudge_agreement(judge: LLM, queries: list[Query], *, n: int, seed: int) -> JudgeAgreement:
    """Grade the correct and a distractor option of a sample of queries; the share that matches the key."""
    sample = agreement_sample(queries, n, seed)
    cases = [(q, q.options[q.correct_index].text, True) for q in sample]
    cases += [(q, q.options[distractor(q, seed)].text, False) for q in sample]
    verdicts = await asyncio.gather(*(ajudge(judge, q, text) for q, text, _ in cases), return_exceptions=True)
    for v in verdicts:
        if isinstance(v, BaseException) and not isinstance(v, LLMError):
            raise v
    judged = [(is_correct, v == "correct") for (_, _, is_correct), v in zip(cases, verdicts, strict=True)
              if not isinstance(v, BaseException)]
    right = [accepted for is_correct, accepted in judged if is_correct]
    wrong = [not accepted for is_correct, accepted in judged if not is_correct]
    return JudgeAgreement(
        n_queries=len(sample), n_judged=len(judged), n_failed=len(cases) - len(judged),
        agreement=_share(right + wrong), correct_accepted=_share(right), distractor_rejected=_share(wrong))


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0
