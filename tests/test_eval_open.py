"""`personagen eval --answer open`: the model answers without options, a judge grades the answer per query
type, its calls are cached, and its agreement with the key falls when the judge contradicts the key."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from pipeline.dataset import load
from pipeline.errors import UserError
from pipeline.evaluation.evaluate import EvalSettings, evaluate, run_eval, select_items
from pipeline.evaluation.judge import agreement_sample, distractor, judge_context, judge_spec
from pipeline.llm import LLM
from pipeline.llm.fake import FakeBackend
from pipeline.prompting import PromptEnv
from schemas.llm import LLMSettings
from schemas.query import Option
from tests.support.eval_data import publish_tiny


@pytest.fixture(scope="module")
def version(tmp_path_factory):
    return publish_tiny(tmp_path_factory.mktemp("open"))


@pytest.fixture(scope="module")
def ds(version):
    return load(version)


def _llm(tmp_path, backend: str, **settings) -> LLM:
    return LLM(LLMSettings(llm=backend, cache_path=tmp_path / "llm.sqlite", max_tokens=64, backoff_s=0, **settings))


class Contrary(FakeBackend):
    """A planted judge: the literal fake judge's verdict turned around (correct <-> incorrect)."""

    def __init__(self, flip: tuple[str, ...] = ("correct", "incorrect", "outdated")) -> None:
        super().__init__()
        self.model = "contrary-" + "-".join(flip)
        self.flip = flip

    async def complete(self, request):
        reply = await super().complete(request)
        verdict = json.loads(reply.text)["verdict"]
        if verdict in self.flip:
            verdict = "incorrect" if verdict == "correct" else "correct"
        return reply.model_copy(update={"text": json.dumps({"verdict": verdict})})


def test_open_answers_send_the_question_alone(tmp_path, ds):
    llm, judge = _llm(tmp_path, "fake?answer=correct"), _llm(tmp_path, "fake")
    evaluate(ds, llm=llm, judge=judge, settings=EvalSettings(mode="no-context", answer="open", limit=5))
    questions = {i.query.question for i in select_items(ds, EvalSettings(limit=5))}
    sent = [r.messages for r in llm.backend.requests]
    # one request per distinct question: a query placed twice asks the same thing, and is asked once
    assert [len(m) for m in sent] == [1] * len(questions) and {m[0]["content"] for m in sent} == questions
    assert not any("<final_answer>" in m[0]["content"] or "(a)" in m[0]["content"] for m in sent)


def test_a_literal_judge_grades_open_answers_against_the_key(tmp_path, version, ds):
    run = run_eval(version, llm=_llm(tmp_path, "fake?answer=correct"), judge=_llm(tmp_path, "fake"),
                   settings=EvalSettings(answer="open"), name="open-correct")
    assert run.summary.overall.accuracy == 1.0 and run.summary.n_scored == len(ds.placements)
    queries = {q.query_id: q for q in ds.queries}
    share = sum(queries[p.query_id].correct_index == 0 for p in ds.placements) / len(ds.placements)
    run = run_eval(version, llm=_llm(tmp_path, "fake?answer=a"), judge=_llm(tmp_path, "fake"),
                   settings=EvalSettings(answer="open"), name="open-a")
    assert run.summary.overall.accuracy == pytest.approx(share) and 0 < share < 1
    rows = pq.read_table(run.path / "results.parquet").to_pylist()
    outdated = {q.query_id for q in ds.queries if q.options[0].role == "outdated_preference"}
    assert {r["verdict"] for r in rows if r["query_id"] in outdated} == {"outdated"}
    assert all(r["answer"] == "open" and r["parsed_letter"] is None for r in rows)
    assert "open answers graded by `fake:fake`" in run.markdown


def test_each_query_type_has_its_judge_template_and_abstentions_their_own(tmp_path, ds):
    judge = _llm(tmp_path, "fake")
    evaluate(ds, llm=_llm(tmp_path, "fake?answer=b"), judge=judge, settings=EvalSettings(answer="open", limit=8))
    env = PromptEnv()
    for request in judge.backend.requests:
        context = request.context
        query = next(q for q in ds.queries if q.question == context.question
                     and q.options[q.correct_index].text == context.correct)
        assert request.messages == [m.model_dump() for m in env.render(judge_spec(query), context)]
    query = ds.queries[0]
    abstention = query.model_copy(update={"options": [
        o.model_copy(update={"grounding": ["absent:x"]}) if i == query.correct_index else o
        for i, o in enumerate(query.options)]})
    assert judge_spec(query).template == f"evaluate/judge_{query.type}.jinja"
    assert judge_spec(abstention).template == "evaluate/judge_abstention.jinja"
    context = judge_context(query, "an answer")
    assert context.outdated == [o.text for o in query.options if o.role == "outdated_preference"]


def test_judge_calls_are_cached_like_every_other_call(tmp_path, ds):
    settings = EvalSettings(answer="open", limit=6)
    judge = _llm(tmp_path, "fake")
    first = evaluate(ds, llm=_llm(tmp_path, "fake?answer=c"), judge=judge, settings=settings)
    verdicts = {(r.query_id, r.prediction) for r in first}  # one verdict per distinct answer to a query
    assert judge.backend.calls == len(verdicts) and len(first) == 6
    again_llm, again_judge = _llm(tmp_path, "fake?answer=c"), _llm(tmp_path, "fake")
    second = evaluate(ds, llm=again_llm, judge=again_judge, settings=settings)
    assert again_llm.backend.calls == again_judge.backend.calls == 0
    assert [r.verdict for r in second] == [r.verdict for r in first]
    assert again_judge.usage_summary().by_stage["judge"].cache_hits == 6


def test_judge_agreement_falls_when_a_planted_judge_contradicts_the_key(tmp_path, version):
    settings = EvalSettings(answer="open", limit=8, judge_sample=6)
    honest = run_eval(version, llm=_llm(tmp_path, "fake?answer=correct"), judge=_llm(tmp_path, "fake"),
                      settings=settings, name="honest").summary.judge_agreement
    assert (honest.agreement, honest.correct_accepted, honest.distractor_rejected) == (1.0, 1.0, 1.0)
    assert honest.n_queries == 6 and honest.n_judged == 12 and honest.n_failed == 0
    contrary = LLM(LLMSettings(llm="fake", cache_path=tmp_path / "llm.sqlite"), backend=Contrary())
    run = run_eval(version, llm=_llm(tmp_path, "fake?answer=correct"), judge=contrary, settings=settings,
                   name="contrary")
    assert run.summary.judge_agreement.agreement == 0.0 and run.summary.overall.accuracy == 0.0
    lenient = LLM(LLMSettings(llm="fake", cache_path=tmp_path / "llm.sqlite"),
                  backend=Contrary(flip=("incorrect", "outdated")))
    half = run_eval(version, llm=_llm(tmp_path, "fake?answer=correct"), judge=lenient, settings=settings,
                    name="lenient").summary.judge_agreement
    assert (half.agreement, half.correct_accepted, half.distractor_rejected) == (0.5, 1.0, 0.0)
    assert "Judge agreement with the key: 50.0% over 12 graded options of 6 queries" in render(half, run)


def render(agreement, run) -> str:
    from pipeline.evaluation.summary import render_markdown

    return render_markdown(run.summary.model_copy(update={"judge_agreement": agreement}))


def test_the_agreement_sample_is_seeded_and_grades_a_plain_distractor(ds):
    queries = list(ds.queries)
    sample = agreement_sample(queries, 5, seed=3)
    assert sample == agreement_sample(list(reversed(queries)), 5, seed=3) and len(sample) == 5
    assert agreement_sample(queries, 5, seed=4) != sample
    for q in sample:
        picked = q.options[distractor(q, 3)]
        assert picked.role not in ("correct", "outdated_preference")
    only_outdated = queries[0].model_copy(update={"options": [
        o if o.role in ("correct", "outdated_preference") else Option(text=o.text, role="outdated_preference")
        for o in queries[0].options]})
    assert only_outdated.options[distractor(only_outdated, 3)].role == "outdated_preference"


def test_a_failed_judge_call_is_reported_apart_and_not_scored(tmp_path, version):
    broken = _llm(tmp_path / "j", "fake?server_error=1.0", max_retries=0)
    run = run_eval(version, llm=_llm(tmp_path, "fake?answer=correct"), judge=broken,
                   settings=EvalSettings(answer="open", limit=4, judge_sample=2), name="broken-judge")
    s = run.summary
    assert (s.n_failed, s.n_scored, s.overall.n) == (4, 0, 0) and s.judge_agreement.n_failed == 4
    rows = pq.read_table(run.path / "results.parquet").to_pylist()
    assert all(r["status"] == "failed" and r["skipped_reason"].startswith("judge call failed") for r in rows)
    assert "**4 failed calls** are not scored" in run.markdown


def test_open_answers_need_a_judge(tmp_path, ds):
    with pytest.raises(UserError, match="--answer open needs --judge"):
        evaluate(ds, llm=_llm(tmp_path, "fake"), settings=EvalSettings(answer="open", limit=2))
