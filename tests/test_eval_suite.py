"""`personagen eval --suite`: model-free references, every mode on the same placements, one table, the memory
gap, and the report that shows it."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from pipeline.dataset import load
from pipeline.evaluation.evaluate import EvalSettings, select_items
from pipeline.evaluation.history import context_view
from pipeline.evaluation.retrieval import reader_score, terms
from pipeline.evaluation.suite import SUITE_MODES, memory_gaps, paired_gap, references, run_suite
from pipeline.evaluation.summary import EvalRow
from pipeline.llm import LLM
from pipeline.llm.fake import FakeBackend
from pipeline.reporting.report import build_report
from schemas.llm import LLMSettings
from tests.support.eval_data import publish_tiny


@pytest.fixture(scope="module")
def version(tmp_path_factory):
    return publish_tiny(tmp_path_factory.mktemp("suite"))


@pytest.fixture(scope="module")
def ds(version):
    return load(version)


class Remembers(FakeBackend):
    """A planted model: right whenever it is shown any history, otherwise always (a)."""

    def __init__(self) -> None:
        super().__init__()
        self.model = "remembers"

    async def complete(self, request):
        letter = request.context.correct_letter if len(request.messages) > 1 else "a"
        return (await super().complete(request)).model_copy(update={"text": f"<final_answer>({letter})"})


def test_the_retrieval_reader_answers_from_the_best_matching_user_turn():
    """BM25 for the question and the options; the best turn (the most recent of equals) picks the option."""
    options = ["You love quiet jazz evenings now.", "You love loud rock concerts.", "You like tea.", "You run."]
    filler = [terms(t) for t in ("The weather is nice.", "My bike needs a new chain.", "Lunch was late today.")]
    old, new = terms("I used to love loud rock concerts."), terms("These days I love quiet jazz evenings.")
    assert reader_score("What music do I like?", options, 0, [*filler, old, new]) == 1.0
    assert reader_score("What music do I like?", options, 1, [*filler, old, new]) == 0.0
    assert reader_score("What music do I like?", options, 1, [*filler, new, old]) == 1.0  # equal scores: recency
    assert reader_score("What music do I like?", options, 2, []) == 0.25
    assert reader_score("What music do I like?", options, 2, filler) == 0.25  # no shared word: a 4-way tie


def test_the_reader_reads_only_user_turns_before_the_question(ds):
    for p in ds.placements[::4]:
        view = context_view(ds, p.context_id)
        before = [terms(m.content) for m in view.messages[:p.end_index] if m.role == "user"]
        assert view.user_terms(p.end_index) == before


def test_references_score_every_placement_without_a_model(ds):
    items = select_items(ds, EvalSettings())
    refs = references(ds, items)
    assert len(refs) == len(items) and {r.chance for r in refs} == {0.25}
    assert all(0 <= r.retrieval_reader <= 1 and 0 <= r.longest_option <= 1 for r in refs)
    assert sum(r.retrieval_reader for r in refs) / len(refs) > 0.25  # the tiny fake text names each item plainly


def _row(persona: str, mode: str, qid: str, correct: bool) -> EvalRow:
    return EvalRow(persona_id=persona, query_id=qid, context_id="c", type="suggest_new_ideas", topic="t",
                   budget_tokens=1000, distance_tokens=1, distance_bucket="<1k", correct_letter="a",
                   correct_position=0, status="answered", mode=mode, correct=correct)


def test_the_memory_gap_pairs_the_same_placements_and_resamples_personas_together():
    rows = [_row(f"p{i % 3}", "mcq", f"q{i}", True) for i in range(9)]
    rows += [_row(f"p{i % 3}", "no-context", f"q{i}", i % 3 == 0) for i in range(9)]
    rows.append(_row("p9", "mcq", "only-mcq", False))  # not scored in no-context: left out of the pairs
    overall = next(g for g in memory_gaps(rows, ["no-context", "mcq"], n_boot=200, seed=0) if g.key == "overall")
    assert overall.mode == "mcq" and overall.n == 9 and overall.gap == pytest.approx(6 / 9)
    assert overall.ci_low <= overall.gap <= overall.ci_high and overall.ci_high <= 1.0
    same = [(_row("p", "mcq", "q", True), _row("p", "no-context", "q", True))]
    assert paired_gap("overall", "mcq", same, n_boot=50, seed=0).model_dump(include={"gap", "ci_low", "ci_high"}) \
        == {"gap": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    assert memory_gaps(rows[:9], ["mcq"], n_boot=50, seed=0) == []


def test_a_suite_writes_one_table_with_the_references_the_modes_and_the_gap(tmp_path, version, ds):
    llm = LLM(LLMSettings(llm="fake", cache_path=tmp_path / "llm.sqlite", max_tokens=32), backend=Remembers())
    run = run_suite(version, llm=llm, settings=EvalSettings(limit=12), name="suite")
    s = run.summary
    assert run.path == version / "evals" / "suite" and s.modes == list(SUITE_MODES) and s.n_items == 12
    assert sorted(p.name for p in run.path.iterdir()) == [".personagen-out", "references.parquet", "results.parquet", "summary.json",
                                                          "summary.md"]
    results = pq.read_table(run.path / "results.parquet").to_pylist()
    sent = [json.dumps(r.messages) for r in llm.backend.requests]
    assert len(results) == 12 * len(SUITE_MODES) and llm.backend.calls == len(set(sent)) <= len(results)
    memory = [m for m in SUITE_MODES if m != "no-context"]
    assert {m: s.runs[m].overall.accuracy for m in memory} == dict.fromkeys(memory, 1.0)
    share_a = s.runs["no-context"].overall.accuracy
    assert share_a < 1
    gaps = {g.mode: g for g in s.gaps if g.key == "overall"}
    assert set(gaps) == set(memory) and all(g.gap == pytest.approx(1 - share_a) for g in gaps.values())
    reader = s.references["retrieval_reader"][0]
    assert reader.key == "overall" and reader.n == 12 and len(pq.read_table(run.path / "references.parquet")) == 12
    header = "| type | n | chance | longest | lexical | reader | no-context | mcq | oracle | recent | rag |"
    assert header in run.markdown and "| mcq - no-context |" in run.markdown
    assert "| overall | 12 | 25.0 [25.0, 25.0] |" in run.markdown
    assert json.loads((run.path / "summary.json").read_text())["kind"] == "suite"
    report = build_report(version)
    assert f"retrieval reader (suite, n=12) | {reader.accuracy:.1%}" in report.summary
    assert "| suite/rag | fake:remembers | rag | choice | 12 | 100.0% |" in report.summary
    assert "Memory gap" in (version / "report" / "report.html").read_text()


def test_a_suite_resumes_from_the_cache(tmp_path, version):
    first = run_suite(version, llm=LLM(LLMSettings(llm="fake?answer=b", cache_path=tmp_path / "c.sqlite")),
                      settings=EvalSettings(limit=5), modes=["no-context", "rag"], name="resume")
    again = LLM(LLMSettings(llm="fake?answer=b", cache_path=tmp_path / "c.sqlite"))
    second = run_suite(version, llm=again, settings=EvalSettings(limit=5), modes=["no-context", "rag"], name="resume")
    assert again.backend.calls == 0 and second.summary.runs == first.summary.runs
