"""PersonaMem's export read the way its `inference_standalone_openai.py` reads it, against a loopback server.

The reader below follows the script's path step by step (our own code, same operations): an offset
index over the JSONL built with tell()/readline() and each line's first key; csv.DictReader with
newline='' and UTF-8; every column the script reads, `stereotypical` included (older versions read it
for every row); ``context[:int(end_index_in_shared_context)]``; the question, the instruction and the
raw ``all_options`` string as the last user message; system messages folded into the next message
(the script does so whenever the model name contains an "o", gpt-4o included); the option letters
after the last ``<final_answer>``, which must be exactly the correct one.
"""

from __future__ import annotations

import ast
import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli.app import app
from pipeline.dataset import load
from pipeline.dataset.export import RELEASED_COLUMNS, option_strings
from pipeline.s5_assembly import fit
from tests.conftest import REPO
from tests.support.harness import fold_system, personamem_request, request_tokens
from tests.support.openai_server import OpenAIServer
from tests.support.smoke import publish_smoke

SCRIPT_READS = [*RELEASED_COLUMNS[:4], "stereotypical", *RELEASED_COLUMNS[4:]]
INSTRUCTION = ("Find the most appropriate model response and give your final answer (a), (b), (c), or (d) "
               "after the special token <final_answer>.")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return publish_smoke(tmp_path_factory.mktemp("smoke"))


@pytest.fixture(scope="module")
def exported(smoke, tmp_path_factory):
    out = tmp_path_factory.mktemp("pm")
    result = CliRunner().invoke(app, ["export", "personamem", str(smoke), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def offset_index(path) -> dict[str, int]:
    """Context id -> byte offset of its line, as the script builds it (first key of each line)."""
    index = {}
    with open(path, encoding="utf-8") as fh:
        while True:
            at = fh.tell()
            line = fh.readline()
            if not line:
                return index
            index[next(iter(json.loads(line)))] = at


def context_at(path, offset: int) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        fh.seek(offset)
        return next(iter(json.loads(fh.readline()).values()))


def rows_with_context(csv_path, jsonl_path):
    """(row, full shared context) pairs; a missing context id raises, as it does in the script."""
    index = offset_index(jsonl_path)
    with open(csv_path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            yield dict(row), context_at(jsonl_path, index[row["shared_context_id"]])


def letters_in(text: str) -> set[str]:
    text = text.lower()
    return set(re.findall(r"\(([a-d])\)", text)) or set(re.findall(r"\b([a-d])\b", text))


def score(response: str, correct: str) -> bool:
    """The script's rule: the letters after the last <final_answer> (else in the whole reply) are exactly the correct one."""
    want = {correct.lower().strip("() ")}
    tail = response.strip().split("<final_answer>")[-1].strip().removesuffix("</final_answer>").strip()
    return letters_in(tail) == want or letters_in(response) == want


def evaluate(csv_path, jsonl_path, base_url: str, model: str = "gpt-4o") -> tuple[list[bool], list[str]]:
    """Every row through the script's steps; a row that fails is an error, as the script logs it."""
    from openai import OpenAI

    client = OpenAI(api_key="test", base_url=base_url, max_retries=0)
    scores, errors = [], []
    for row, context in rows_with_context(csv_path, jsonl_path):
        try:
            values = {name: row[name] for name in SCRIPT_READS}
            history = context[: int(values["end_index_in_shared_context"])]
            ask = values["user_question_or_message"] + "\n\n" + INSTRUCTION + "\n\n" + values["all_options"]
            messages = history + [{"role": "user", "content": ask}]
            if "o" in model:
                messages = fold_system(messages)
            reply = client.chat.completions.create(model=model, messages=messages).choices[0].message.content
            scores.append(score(reply, values["correct_answer"]))
        except Exception as exc:  # the script catches, logs and skips the row
            errors.append(f"{row.get('question_id')}: {exc!r}")
    return scores, errors


def oracle(ds, *, right: bool):
    """Answers the correct letter (or a wrong one) when every evidence turn is in the history it was sent."""
    turns = {(t.session_id, t.turn_index): t.content for t in ds.turns}
    by_options = {json.dumps(option_strings(q), ensure_ascii=False): q for q in ds.queries}

    def respond(body: dict) -> str:
        sent = "\n".join(m["content"] for m in body["messages"])
        (q,) = [q for key, q in by_options.items() if body["messages"][-1]["content"].endswith(key)]
        seen = all(turns[(e.session_id, e.turn_index)] in sent for e in q.evidence)
        index = q.correct_index if right and seen else (q.correct_index + 1) % len(q.options)
        return f"Thinking about what you told me.\n<final_answer>({'abcd'[index]})"

    return respond


def test_one_file_pair_per_budget_with_the_released_columns_then_stereotypical(smoke, exported):
    ds = load(smoke)
    budgets = sorted({c.budget_tokens for c in ds.contexts})
    assert budgets == [1500, 2000]  # both round to "2k": the labels fall back to the exact budget
    assert sorted(p.name for p in exported.iterdir() if p.name != ".personagen-out") == [
        "README.md", "questions_1500.csv", "questions_2000.csv", "shared_contexts_1500.jsonl", "shared_contexts_2000.jsonl"]
    rows = 0
    for budget in budgets:
        with open(exported / f"questions_{budget}.csv", newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            assert reader.fieldnames == [*RELEASED_COLUMNS, "stereotypical"]
            for row in reader:
                assert row["stereotypical"] in ("Yes", "No")
                assert json.loads(row["all_options"]) == ast.literal_eval(row["all_options"])
                rows += 1
    assert rows == len(ds.placements)


def test_the_standalone_scripts_reading_and_scoring_path_runs_every_row(smoke, exported):
    ds = load(smoke)
    for right, expected in ((True, True), (False, False)):
        with OpenAIServer(responder=oracle(ds, right=right)) as server:
            for budget in (1500, 2000):
                scores, errors = evaluate(exported / f"questions_{budget}.csv",
                                          exported / f"shared_contexts_{budget}.jsonl", server.base_url)
                assert errors == []
                placed = sum(1 for p in ds.placements if p.context_id in
                             {c.context_id for c in ds.contexts if c.budget_tokens == budget})
                assert len(scores) == placed > 0
                assert set(scores) == {expected}
            assert server.requests == len(ds.placements)


def test_the_script_is_sent_exactly_the_history_before_the_question(smoke, exported):
    ds = load(smoke)
    with OpenAIServer(responder=oracle(ds, right=True)) as server:
        evaluate(exported / "questions_1500.csv", exported / "shared_contexts_1500.jsonl", server.base_url)
        bodies = list(server.bodies)
    with open(exported / "questions_1500.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(bodies) == len(rows)
    for row, body in zip(rows, bodies, strict=True):
        history = ds.materialize_context(row["shared_context_id"], upto=int(row["end_index_in_shared_context"]))
        expected = fold_system([m.model_dump() for m in history] + [{"role": "user", "content": "QUESTION"}])
        sent = body["messages"]
        assert [m["role"] for m in sent] == [m["role"] for m in expected]
        assert [m["content"] for m in sent[:-1]] == [m["content"] for m in expected[:-1]]
        assert sent[-1]["content"].endswith(INSTRUCTION + "\n\n" + row["all_options"])


def test_a_json_loads_reader_gets_every_option(exported):
    """Third-party adapters parse all_options with json.loads; a failed parse would leave no options."""
    for path in exported.glob("questions_*.csv"):
        with open(path, newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                options = json.loads(row["all_options"])
                assert [o[:4] for o in options] == ["(a) ", "(b) ", "(c) ", "(d) "]
                assert row["correct_answer"] in [o[:3] for o in options]


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4"])
def test_every_row_as_the_script_sends_it_fits_the_budget_with_the_answer_reserve(smoke, exported, model):
    """The request rebuilt as the script builds it (folded for an o-family model, as sent otherwise), 4 tokens a
    message and 3 priming the reply, plus the answer reserve: at most the budget on every row."""
    ds = load(smoke)
    rows = 0
    for budget in sorted({c.budget_tokens for c in ds.contexts}):
        for row, context in rows_with_context(exported / f"questions_{budget}.csv",
                                              exported / f"shared_contexts_{budget}.jsonl"):
            sent = request_tokens(personamem_request(context, row, model))
            assert sent + fit.pm_answer_reserve(budget) <= budget, (row["question_id"], sent, budget)
            assert int(row["context_length_in_tokens"]) + fit.pm_answer_reserve(budget) < budget
            rows += 1
    assert rows == len(ds.placements)
    assert fit.pm_answer_reserve(128_000) == fit.PM_ANSWER_RESERVE == 1000


def test_a_question_without_evidence_has_no_distance_blank_in_the_csv_and_null_in_jsonl(smoke, exported, tmp_path):
    ds = load(smoke)
    queries = {q.query_id: q for q in ds.queries}
    abstentions = {q.query_id for q in ds.queries if not q.evidence}
    assert abstentions
    seen = 0
    for path in exported.glob("questions_*.csv"):
        with open(path, newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                distances = [row[k] for k in ("distance_to_ref_in_blocks", "distance_to_ref_in_tokens",
                                              "distance_to_ref_proportion_in_context")]
                if row["question_id"] in abstentions:
                    assert distances == ["", "", ""]
                    seen += 1
                else:
                    assert all(distances) and queries[row["question_id"]].evidence
    assert seen > 0
    result = CliRunner().invoke(app, ["export", "jsonl", str(smoke), "--out", str(tmp_path / "all.jsonl")])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text(encoding="utf-8").splitlines()]
    for record in records:
        empty = record["query_id"] in abstentions
        values = [record["distance_tokens"], record["distance_sessions"], record["evidence_position"]]
        assert (values == [None, None, None]) if empty else all(v is not None for v in values)
    assert sum(r["query_id"] in abstentions for r in records) == seen


@pytest.mark.parametrize("budget", ["1500", "1.5k", "1,500"])
def test_every_export_reads_the_budget_the_same_way(smoke, tmp_path, budget):
    runner = CliRunner()
    jsonl = runner.invoke(app, ["export", "jsonl", str(smoke), "--out", str(tmp_path / "b.jsonl"), "--budget", budget])
    assert jsonl.exit_code == 0, jsonl.output
    records = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text(encoding="utf-8").splitlines()]
    assert records and {r["budget_tokens"] for r in records} == {1500}
    lme = runner.invoke(app, ["export", "longmemeval", str(smoke), "--out", str(tmp_path / "lme"), "--budget", budget])
    assert lme.exit_code == 0, lme.output
    assert sorted(p.name for p in (tmp_path / "lme").iterdir() if p.name != ".personagen-out") == [
        "README.md", "longmemeval_1500.json"]


def test_a_budget_the_version_lacks_is_one_line_for_every_export(smoke, tmp_path):
    runner = CliRunner()
    for kind, out in (("jsonl", "x.jsonl"), ("longmemeval", "lme")):
        result = runner.invoke(app, ["export", kind, str(smoke), "--out", str(tmp_path / out), "--budget", "32k"])
        assert result.exit_code == 2 and "--budget 32,000" in result.output and "1,500, 2,000" in result.output
        result = runner.invoke(app, ["export", kind, str(smoke), "--out", str(tmp_path / out), "--budget", "lots"])
        assert result.exit_code == 2 and "32k, 128000 or 1M" in result.output


def test_every_command_of_the_card_runs_as_pasted_and_the_harness_lines_find_their_files(smoke, tmp_path,
                                                                                          monkeypatch):
    """The card's shell block, taken from the published README.md, runs in bash in a copy of the version folder
    (`personagen` from the venv); the harness commands, meant for another checkout, name files that exist by
    absolute path once the block has run; so do the export folders' own READMEs."""
    version = tmp_path / "personamem" / "v0001"
    shutil.copytree(smoke, version)
    for path in version.iterdir():
        path.chmod(0o644)
    card = (version / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```sh\n(.*?)```", card, re.S).group(1)
    assert block.startswith('V="$PWD"') and block.count("personagen export") == 3
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(REPO),
           "TIKTOKEN_CACHE_DIR": os.environ.get("TIKTOKEN_CACHE_DIR", "")}
    done = subprocess.run(["bash", "-euc", block], cwd=version, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    prose = card.replace(f"```sh\n{block}```", "")
    harness = [c for c in re.findall(r"`([^`]+)`", prose) if "--question_path" in c or "--in_file" in c]
    assert len(harness) == 2 and any(c.startswith("mkdir -p out && ") for c in harness)
    for command in harness:
        paths = re.findall(r'(?:--question_path|--context_path|--in_file) ("[^"]+")', command)
        for quoted in paths:
            expanded = subprocess.run(["bash", "-c", f'V="$PWD"; echo {quoted}'], cwd=version, capture_output=True,
                                      text=True, check=True).stdout.strip()
            assert Path(expanded).is_absolute() and Path(expanded).is_file(), expanded
    for readme in (tmp_path / "personamem" / "personamem_format" / "README.md",
                   tmp_path / "personamem" / "longmemeval_format" / "README.md"):
        line = next(li for li in readme.read_text(encoding="utf-8").splitlines() if "python " in li)
        named = [w for w in shlex.split(line) if w.endswith((".csv", ".jsonl", ".json")) and "results_" not in w]
        assert named and all(Path(n).is_absolute() and Path(n).is_file() for n in named), line
    evals = re.findall(r"`(personagen eval [^`]+)`", prose)
    monkeypatch.chdir(version)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    models = tuple(sorted({m.split("openai:")[1].split()[0] for m in evals}))
    with OpenAIServer(responder=lambda body: "<final_answer>(a)", models=models) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        for command in evals:
            result = CliRunner().invoke(app, shlex.split(command.replace('"$V"', str(version)))[1:])
            assert result.exit_code == 0, (command, result.output)
    # run inside the version, the eval writes only its run folder there; its cache goes beside the datasets
    assert sorted(p.name for p in version.iterdir() if p.is_dir()) == ["evals"]
    assert (tmp_path / ".cache" / "llm.sqlite").is_file()


def test_the_load_hints_generate_prints_run_as_printed_in_a_fresh_shell(smoke, capsys, tmp_path):
    """They name personagen's own interpreter and command: a bare `python` may be one without its packages, and
    a fresh shell has no venv on its PATH."""
    from pipeline.cli.generate import _summary

    version = tmp_path / "personamem" / "v0001"
    shutil.copytree(smoke, version)
    _summary(version)
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    start = lines.index("Load it with:")
    hints = lines[start + 1:start + 4]
    assert hints[0].startswith(shlex.quote(sys.executable) + " -c") and " export personamem " in hints[2]
    for hint in hints:
        done = subprocess.run(hint, shell=True, capture_output=True, text=True, timeout=300,
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(REPO),
                                   "TIKTOKEN_CACHE_DIR": os.environ.get("TIKTOKEN_CACHE_DIR", "")})
        assert done.returncode == 0, (hint, done.stderr)
        assert done.stdout.strip()
    assert (tmp_path / "personamem" / "personamem_format" / "README.md").is_file()
