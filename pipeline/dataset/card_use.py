"""The dataset card's sections on using a version: evaluating it, its exports, a glossary, licences, loading it,
and its limitations."""

from __future__ import annotations

from collections import defaultdict
from statistics import mean

from pydantic import BaseModel

from pipeline.dataset.export import size_labels
from pipeline.s5_assembly.fit import PM_ANSWER_RESERVE, lme_history_cap, pm_answer_reserve
from schemas.manifest import Manifest


def evaluating(manifest: Manifest) -> str:
    """Where evaluations of this version go: they come after publishing, and this card is checksummed."""
    return (
        "## Evaluating\n\n"
        "`personagen eval . --suite --llm openai:gpt-4o-mini` asks a model every placed query with the whole "
        "history (`mcq`), none (`no-context`), only the evidence sessions (`oracle`), the latest turns (`recent`) "
        "and BM25-retrieved sessions or turns (`rag`), beside model-free references (chance, longest option, "
        "word overlap, and a retrieval reader with no model), and reports the memory gap per type. Results go to "
        "`evals/<name>/` beside these tables (`summary.md`, `summary.json`, `results.parquet`), and "
        "`personagen report .` shows every eval in `report/report.html`. This card is written once, when the "
        "version is published (manifest.json holds its checksum), so it never lists evaluations made later.\n"
    )


def loading(manifest: Manifest) -> str:
    return (
        "## Loading\n\n```python\nfrom datasets import load_dataset\n"
        "queries = load_dataset(\"parquet\", data_files=\"queries.parquet\")[\"train\"]\n\n"
        "import pandas as pd\nplacements = pd.read_parquet(\"placements.parquet\")\n```\n\n"
        "With a personagen checkout on the path, `from pipeline.dataset import load; ds = load(\".\")` gives "
        "`ds.materialize_context(context_id, upto=end_index)`, the messages before a question. DuckDB reads the "
        "Parquet files directly: `python3 -c \"import duckdb; duckdb.sql('select type, count(*) from "
        "\\'queries.parquet\\' group by type').show()\"` (with `duckdb` installed).\n"
    )


def limitations() -> str:
    return (
        "## Known limitations\n\n"
        "- Users, events and conversations are synthetic; prose quality depends on the model that wrote it, "
        "labels do not.\n"
        "- Filler sessions are persona-neutral and shared across personas, so they carry no signal; by default "
        "they are real ShareGPT conversations, filtered so that none names a persona's item.\n"
        "- English only; one assistant style; simulated time is coarse (a few periods).\n"
        "- Token budgets are counted with `o200k_base`; other tokenizers see slightly different sizes.\n"
        "- A query whose evidence is not in a context (a topic dropped to fit a small budget) is not placed "
        "in that context.\n"
    )


def exports(tables: dict[str, list[BaseModel]]) -> str:
    """The exports, the harness that reads each, the commands (run in this folder) and how a budget is counted."""
    budgets = sorted({c.budget_tokens for c in tables.get("contexts", [])})
    labels = size_labels(budgets)
    size = labels[budgets[0]] if budgets else "32k"
    rows = [[f"{b:,}", f"{b - pm_answer_reserve(b):,} minus the question message", f"{lme_history_cap(b):,}"]
            for b in budgets]
    return (
        "## Exports and the harnesses that read them\n\n"
        "The commands below run as pasted in a shell opened in this folder; the first line remembers where it "
        "is, so the harness commands, run in the harness's own checkout, find the files by absolute path. "
        "`personagen` is the command of personagen's checkout (`.venv/bin/personagen` there, or on the PATH after "
        "`source .venv/bin/activate`).\n\n"
        "```sh\n"
        'V="$PWD"\n'
        'personagen export personamem "$V" --out "$V/../personamem_format"\n'
        'personagen export longmemeval "$V" --out "$V/../longmemeval_format"\n'
        f'personagen export jsonl "$V" --out "$V/../all_{size}.jsonl" --budget {size}\n'
        "```\n\n"
        "- **PersonaMem**: the export writes `questions_<size>.csv` and `shared_contexts_<size>.jsonl`; in a "
        "PersonaMem checkout, `python inference_standalone_openai.py --step evaluate --model gpt-4o "
        f'--question_path "$V/../personamem_format/questions_{size}.csv" --context_path '
        f'"$V/../personamem_format/shared_contexts_{size}.jsonl" --result_path results_{size}.csv`.\n'
        "- **LongMemEval**: the export writes `longmemeval_<size>.json`; in LongMemEval's `src/generation`, "
        f'`mkdir -p out && python run_generation.py --in_file "$V/../longmemeval_format/longmemeval_{size}.json" '
        "--out_dir out --model_name gpt-4o --model_alias gpt-4o --openai_key KEY --retriever_type orig-session "
        "--topk_context 1000 --history_format json --useronly false --cot true`, then "
        "`src/evaluation/evaluate_qa.py` and "
        "`print_qa_metrics.py` on its output. Our types map onto four of its six; beside each placed question, "
        "code adds up to two per context of each of the other two over the same haystack (temporal-reasoning: the "
        "days between the sessions voicing an item's older and newer stance; single-session-assistant: the "
        "assistant's reply to a voiced preference), named by `derived_from`, so its task average is a number.\n"
        "- **Anything else** (pandas, polars, `datasets`): the JSONL export, one self-contained record per placed "
        "question with its messages. `--budget` reads `32k`, `128000` or `1M` in every command.\n"
        "- **personagen's own evaluation**: `personagen eval \"$V\" --llm openai:gpt-4o-mini --limit 50` (PersonaMem's "
        "multiple-choice protocol; `--suite` adds the no-context, oracle, recent and retrieval modes).\n\n"
        "A budget is the most a model receives for any row, in the harness's own format. PersonaMem's script "
        "sends the history before the question (4 tokens a message on top of its `o200k_base` tokens, system "
        "messages folded in for o-family models), then the question, instruction and options, and keeps "
        f"{PM_ANSWER_RESERVE:,} tokens for the answer. LongMemEval's reader writes each session as JSON under a "
        "`### Session N` header and cuts the history at its model's length less 1,800 (`--cot true`: 800 to "
        "generate, 1,000 for its prompt), 126,200 at 128k; our history never reaches that cap, so it never "
        "truncates. A context is filled so that the larger of the two ends just below the budget; LongMemEval's "
        "JSON costs more per message, so PersonaMem's rows usually end a few percent below theirs.\n\n"
        + markdown_table(["budget", "PersonaMem history, at most", "LongMemEval history, at most"], rows)
    )


def glossary() -> str:
    """What the export fields mean (the CSV's names first, the JSONL's after the slash)."""
    rows = [
        ["`all_options` / `options`", "the options in order; the CSV writes them `(a) text` as a JSON list"],
        ["`correct_answer` / `correct_index`", "the correct option's letter `(a)`-`(d)` / its 0-based index"],
        ["`option_roles`", "what each option is: `correct`, `outdated_preference` (held once), `other_persona`, "
                           "`violates_preference`, `stereotypical`, `generic`, `forgetful`, `wrong_reason`, "
                           "`wrong_sequence`, `already_done`"],
        ["`end_index_in_shared_context` / `end_index`", "the question is asked after `messages[:end_index]`"],
        ["`context_length_in_tokens` / `context_tokens`", "tokens of that history: `o200k_base` plus 4 a message"],
        ["`context_length_in_letters`", "characters of that history"],
        ["`distance_to_ref_in_tokens` / `distance_tokens`", "tokens from the end of the latest evidence turn to "
                                                            "the question"],
        ["`distance_to_ref_in_blocks` / `distance_sessions`", "sessions from the latest evidence to the question"],
        ["`distance_to_ref_proportion_in_context` / `evidence_position`", "that distance as a share of the "
         "history / where the latest evidence starts, as a fraction of the context"],
        ["(all four distances)", "empty for a question without evidence (an abstention: nothing was said): "
                                 "blank in the CSV, `null` in the JSONL"],
        ["`num_irrelevant_tokens`", "filler tokens before the question's session"],
        ["`stereotypical`", "`Yes` when the correct answer voices a preference sampled as stereotypical"],
        ["answer forms", "`statement` (the usual), `abstention` (\"you have not told me\"), `no_change` "
                         "(\"it never changed\"); each form is correct somewhere and a distractor elsewhere"],
        ["dates", "simulated local time without a time zone: `Conversation date: YYYY-MM-DD` system messages; "
                  "LongMemEval's `YYYY/MM/DD (Ddd) HH:MM`"],
    ]
    return "## Field glossary\n\n" + markdown_table(["field", "meaning"], rows)


def license_meta(stats: dict) -> dict:
    """The YAML licence: the generated text's, or ``other`` naming the mix when ShareGPT filler is inside."""
    own = stats.get("license", "cc-by-4.0")
    if not stats.get("filler_conversation_ids"):
        return {"license": own}
    return {"license": "other", "license_name": f"{own} (generated text) + ShareGPT filler under its own terms",
            "license_link": "https://huggingface.co/datasets/anon8231489123/ShareGPT_Vicuna_unfiltered"}


def licences(stats: dict, tables: dict[str, list[BaseModel]]) -> str:
    """The licence of each part, and how much of each budget's text is filler."""
    own = stats.get("license", "cc-by-4.0")
    parts = [f"- Generated text (personas, timelines, conversations, questions, options) and the tables: `{own}`."]
    if stats.get("filler_conversation_ids"):
        shares = defaultdict(list)
        for c in tables.get("contexts", []):
            shares[c.budget_tokens].append(c.filler_tokens / max(c.n_tokens, 1))
        mix = ", ".join(f"{mean(v):.0%} at {b:,}" for b, v in sorted(shares.items()))
        parts.append(f"- Filler sessions ({stats.get('filler_dataset', 'ShareGPT')}; {mix} of the context "
                     f"tokens): not ours to license. {stats.get('filler_terms', '')}")
    return "## Licences\n\n" + "\n".join(parts) + "\n"


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    """A Markdown table of ``rows`` under ``header``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def voicing(tables: dict[str, list[BaseModel]], share: float | None) -> str:
    """How the persona's preferences are voiced: said outright, or shown through what the user asks for; the
    turns and the queries of each kind, and what the split measures."""
    turns = [t for t in tables["turns"] if getattr(t, "voicing", None)]
    queries = tables["queries"]
    rows = [[kind, sum(t.voicing == kind for t in turns), sum(q.voicing == kind for q in queries)]
            for kind in ("explicit", "implicit")]
    rows.append(["none (an abstention, a life event)", "", sum(q.voicing is None for q in queries)])
    asked = f" (`text.implicit_share`: {share:g} of the preference-voicing turns)" if share is not None else ""
    return ("## How preferences are voiced\n\n"
            f"A user turn that voices a preference is either explicit (\"I really enjoy spicy Sichuan hotpot\") or "
            f"implicit{asked}: the user asks for something that shows the stance (\"Can you help me find a spot "
            "that does a proper numbing-hot broth?\") without the item's name or a stance word. Each implicit turn "
            "is built on a hand-written cue of the item and stance (`pipeline/data/cues/`) and carries the cue's "
            "key words; a model's wording is kept only when the same model, reading the turn alone, picks the "
            "right one of four preference statements, else code's wording of the cue is used. No reply and no "
            "ordinary turn names an item voiced only implicitly. A keyword lookup over the history (an item's name "
            "beside a stance word) answers explicit queries and fails implicit ones, so the split tells recall "
            "of what was said from understanding of what was meant: `personagen eval` reports accuracy per "
            "voicing. A query's voicing is its evidence's (implicit when any evidence turn is).\n\n"
            + markdown_table(["voicing", "user turns", "queries"], rows))
