"""Scoring of an eval run: accuracy per slice with persona-level bootstrap CIs, model-free baselines,
and the markdown table (also posted as a Prefect artifact when running inside a flow)."""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from pipeline.baselines import chance_accuracy, lexical_overlap_accuracy, longest_option_accuracy
from schemas.query import QUERY_TYPES, Query

Status = Literal["answered", "unparsed", "failed", "skipped"]
DISTANCE_BUCKETS: tuple[tuple[int, str], ...] = (
    (1_000, "<1k"), (4_000, "1k-4k"), (16_000, "4k-16k"), (64_000, "16k-64k"), (256_000, "64k-256k"),
)
GROUPS = ("type", "voicing", "topic", "budget", "distance")
REFERENCES = ("chance", "longest_option", "lexical_overlap", "retrieval_reader")
REFERENCE_LABELS = {"chance": "chance", "longest_option": "longest", "lexical_overlap": "lexical",
                    "retrieval_reader": "reader"}


class EvalRow(BaseModel):
    """One evaluated (query, context) pair: what was asked, what came back, and whether it was right."""

    persona_id: str
    query_id: str
    context_id: str
    type: str
    topic: str
    voicing: str = "none"  # how the evidence voiced the preference: explicit, implicit, none (abstention, event)
    budget_tokens: int
    distance_tokens: int
    distance_bucket: str
    correct_letter: str
    correct_position: int
    status: Status
    mode: str = "mcq"
    answer: str = "choice"
    history_messages: int = 0
    prediction: str | None = None
    parsed_letter: str | None = None
    parse_rule: str | None = None
    verdict: str | None = None
    correct: bool = False
    prompt_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    cached: bool = False
    skipped_reason: str | None = None


class Accuracy(BaseModel):
    """Accuracy over one slice of scored rows with a 95% bootstrap CI (personas resampled)."""

    key: str
    n: int
    accuracy: float
    ci_low: float
    ci_high: float


class JudgeAgreement(BaseModel):
    """How often the open-answer judge agrees with the key on answers whose grade is known."""

    n_queries: int
    n_judged: int
    n_failed: int
    agreement: float
    correct_accepted: float
    distractor_rejected: float


class EvalSummary(BaseModel):
    """Everything the markdown table shows, as data (summary.json; the report reads it)."""

    kind: Literal["run"] = "run"
    dataset: str
    version: str
    run: str
    llm: str
    mode: str
    answer: str = "choice"
    judge: str | None = None
    judge_agreement: JudgeAgreement | None = None
    history: dict[str, int | str] = Field(default_factory=dict)
    window: int
    n_items: int
    n_scored: int
    n_skipped: int
    n_unparsed: int
    n_failed: int
    overall: Accuracy
    groups: dict[str, list[Accuracy]] = Field(default_factory=dict)
    baselines: dict[str, float] = Field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    n_boot: int = 1000
    seed: int = 0


def distance_bucket(tokens: int) -> str:
    """The evidence-distance bucket of a placement ("<1k" ... "256k+")."""
    for limit, label in DISTANCE_BUCKETS:
        if tokens < limit:
            return label
    return "256k+"


def budget_label(tokens: int) -> str:
    """32000 -> '32k', 1000000 -> '1M'."""
    if tokens >= 1_000_000 and tokens % 1_000_000 == 0:
        return f"{tokens // 1_000_000}M"
    return f"{tokens // 1000}k" if tokens % 1000 == 0 else str(tokens)


class Scored(Protocol):
    """What accuracy needs of a row: whose it is and its score (an EvalRow; a reference's expected hit)."""

    persona_id: str
    correct: float


def bootstrap_ci(rows: Sequence[Scored], *, n_boot: int, rng: random.Random) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of pooled accuracy over personas drawn with replacement."""
    per_persona: dict[str, list[float]] = defaultdict(lambda: [0, 0])
    for row in rows:
        per_persona[row.persona_id][0] += row.correct
        per_persona[row.persona_id][1] += 1
    clusters = [per_persona[p] for p in sorted(per_persona)]
    stats = []
    for _ in range(n_boot):
        draw = rng.choices(clusters, k=len(clusters))
        stats.append(sum(c[0] for c in draw) / sum(c[1] for c in draw))
    stats.sort()
    return stats[int(0.025 * (n_boot - 1))], stats[int(round(0.975 * (n_boot - 1)))]


def accuracy(key: str, rows: Sequence[Scored], *, n_boot: int, seed: int) -> Accuracy:
    """Point accuracy and CI of `rows`; the RNG is seeded by (seed, key), so slices are independent of order."""
    if not rows:
        return Accuracy(key=key, n=0, accuracy=0.0, ci_low=0.0, ci_high=0.0)
    low, high = bootstrap_ci(rows, n_boot=n_boot, rng=random.Random(f"{seed}:{key}"))
    return Accuracy(key=key, n=len(rows), accuracy=sum(r.correct for r in rows) / len(rows), ci_low=low, ci_high=high)


_GROUP_KEYS: dict[str, Callable[[EvalRow], str]] = {
    "type": lambda r: r.type,
    "voicing": lambda r: r.voicing,
    "topic": lambda r: r.topic,
    "budget": lambda r: budget_label(r.budget_tokens),
    "distance": lambda r: r.distance_bucket,
}


def _group_order(group: str, keys: set[str]) -> list[str]:
    if group == "distance":
        order = [label for _, label in DISTANCE_BUCKETS] + ["256k+"]
        return [k for k in order if k in keys]
    if group == "budget":
        return sorted(keys, key=_budget_tokens)
    return sorted(keys)


def _budget_tokens(label: str) -> int:
    scale = {"k": 1000, "M": 1_000_000}.get(label[-1], 1)
    return int(label[:-1] if scale > 1 else label) * scale


def group_accuracies(rows: Sequence[EvalRow], *, n_boot: int, seed: int) -> dict[str, list[Accuracy]]:
    """Accuracy per query type, voicing of the evidence, topic, budget and evidence-distance bucket."""
    out = {}
    for group in GROUPS:
        slices: dict[str, list[EvalRow]] = defaultdict(list)
        for row in rows:
            slices[_GROUP_KEYS[group](row)].append(row)
        out[group] = [accuracy(f"{group}={k}", slices[k], n_boot=n_boot, seed=seed)
                      for k in _group_order(group, set(slices))]
    return out


def baselines(queries: Sequence[Query]) -> dict[str, float]:
    """Model-free accuracies: random guess, longest option, most words shared with the question."""
    return {"random": chance_accuracy(queries), "longest_option": longest_option_accuracy(queries),
            "lexical_overlap": lexical_overlap_accuracy(queries)}


def render_markdown(s: EvalSummary) -> str:
    """The eval's markdown table: overall, per slice, then the baselines."""
    lines = [f"# Eval `{s.run}` on {s.dataset} {s.version}", "", run_line(s), "", "95% CIs: bootstrap over personas "
             f"({s.n_boot} resamples, seed {s.seed}).", *_agreement_lines(s.judge_agreement), "",
             "| slice | n | accuracy | 95% CI |", "|---|---:|---:|---|", _row("overall", s.overall)]
    for group in GROUPS:
        lines += [_row(a.key.replace("=", ": ", 1), a) for a in s.groups.get(group, [])]
    lines += ["", f"Baselines without a model (over all {s.n_items} selected queries):", "",
              "| baseline | accuracy |", "|---|---:|"]
    lines += [f"| {name} | {value:.1%} |" for name, value in s.baselines.items()]
    return "\n".join(lines) + "\n"


def run_line(s: EvalSummary) -> str:
    """What was asked and what came of it, failed calls apart from the scored ones."""
    answers = f"open answers graded by `{s.judge}`" if s.answer == "open" else "multiple choice"
    history = "".join(f", {k} {v}" for k, v in s.history.items())
    failed = (f" **{s.n_failed} failed calls** are not scored: rerun the same command to retry them."
              if s.n_failed else "")
    return (f"Model `{s.llm}`, mode `{s.mode}`{history}, {answers}, window {s.window:,} tokens. {s.n_items} "
            f"queries: {s.n_scored} scored, {s.n_skipped} skipped (longer than the window), {s.n_unparsed} "
            f"unparseable (scored wrong), {s.n_failed} failed.{failed} Tokens: {s.input_tokens:,} in, "
            f"{s.output_tokens:,} out.")


def _agreement_lines(a: JudgeAgreement | None) -> list[str]:
    if a is None:
        return []
    return ["", f"Judge agreement with the key: {a.agreement:.1%} over {a.n_judged} graded options of {a.n_queries} "
                f"queries (correct option accepted {a.correct_accepted:.1%}, distractor rejected "
                f"{a.distractor_rejected:.1%}; {a.n_failed} judge calls failed)."]


def _row(label: str, a: Accuracy) -> str:
    return f"| {label} | {a.n} | {a.accuracy:.1%} | [{a.ci_low:.1%}, {a.ci_high:.1%}] |"


class Gap(BaseModel):
    """A mode's accuracy minus `no-context`'s on the placements both scored, with a paired 95% CI."""

    key: str
    mode: str
    n: int
    gap: float
    ci_low: float
    ci_high: float


class SuiteSummary(BaseModel):
    """The suite's table as data (summary.json; the report reads it)."""

    kind: Literal["suite"] = "suite"
    dataset: str
    version: str
    run: str
    llm: str
    answer: str
    judge: str | None = None
    judge_agreement: JudgeAgreement | None = None
    modes: list[str]
    n_items: int
    runs: dict[str, EvalSummary]
    references: dict[str, list[Accuracy]] = Field(description="reference -> overall, then per type")
    gaps: list[Gap] = Field(default_factory=list)
    k: int
    n_boot: int
    seed: int

    @property
    def n_failed(self) -> int:
        """Failed calls over every mode."""
        return sum(s.n_failed for s in self.runs.values())


def _cell(a: Accuracy | None) -> str:
    return "n/a" if a is None or a.n == 0 else f"{100 * a.accuracy:.1f} [{100 * a.ci_low:.1f}, {100 * a.ci_high:.1f}]"


def _gap_cell(g: Gap | None) -> str:
    return "n/a" if g is None or g.n == 0 else f"{100 * g.gap:+.1f} [{100 * g.ci_low:+.1f}, {100 * g.ci_high:+.1f}]"


def render_suite(s: SuiteSummary) -> str:
    """The suite's markdown: one accuracy table (mode x type), the memory gap per type, each mode's counts."""
    columns = [*REFERENCES, *s.modes]
    keys = ["overall", *(f"type={t}" for t in QUERY_TYPES)]
    cells = {name: {a.key: a for a in accs} for name, accs in s.references.items()}
    cells |= {m: {"overall": run.overall} | {a.key: a for a in run.groups.get("type", [])} for m, run in s.runs.items()}
    n = {a.key: a.n for a in s.references[REFERENCES[0]]}
    lines = [f"# Eval suite `{s.run}` on {s.dataset} {s.version}", "",
             f"Model `{s.llm}`; {s.n_items} placed queries, every column on the same ones. References need no "
             "model: chance, the longest option, the one sharing most words with the question (lexical), and the "
             "retrieval reader (BM25 over the user turns before the question, for the question and its options; "
             "the option sharing the most words with the best-matching turn). Cells: accuracy in % "
             f"[95% CI, bootstrap over personas, {s.n_boot} resamples, seed {s.seed}]; a mode's cells leave out "
             "its skipped and failed calls.", "",
             "| type | n | " + " | ".join(REFERENCE_LABELS.get(c, c) for c in columns) + " |",
             "|---|---:|" + "---|" * len(columns)]
    for key in keys:
        if key in n:
            lines.append(f"| {key.removeprefix('type=')} | {n[key]} | "
                         + " | ".join(_cell(cells[c].get(key)) for c in columns) + " |")
    lines += _gap_lines(s, keys) + ["", "Per mode:", ""] + [f"- `{m}`: {run_line(r)}" for m, r in s.runs.items()]
    if s.judge_agreement:
        a = s.judge_agreement
        lines += ["", f"Judge agreement with the key: {a.agreement:.1%} over {a.n_judged} graded options of "
                      f"{a.n_queries} queries (correct accepted {a.correct_accepted:.1%}, distractor rejected "
                      f"{a.distractor_rejected:.1%})."]
    return "\n".join(lines) + "\n"


def _gap_lines(s: SuiteSummary, keys: list[str]) -> list[str]:
    modes = list(dict.fromkeys(g.mode for g in s.gaps))
    if not modes:
        return ["", "No memory gap: the suite has no `no-context` mode to subtract."]
    gaps = {(g.mode, g.key): g for g in s.gaps}
    lines = ["", "Memory gap: a mode's accuracy minus `no-context`'s on the same placements, in points "
                 "[95% CI, paired bootstrap over personas].", "",
             "| type | " + " | ".join(f"{m} - no-context" for m in modes) + " |", "|---|" + "---:|" * len(modes)]
    for key in keys:
        if any((m, key) in gaps for m in modes):
            lines.append(f"| {key.removeprefix('type=')} | " + " | ".join(_gap_cell(gaps.get((m, key))) for m in modes)
                         + " |")
    return lines


def artifact_key(*parts: str) -> str:
    """A Prefect artifact key (lowercase letters, digits and dashes) from `parts`."""
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")


def publish_artifact(key: str, markdown: str, description: str) -> bool:
    """Post `markdown` as a Prefect artifact when called inside a flow or task run; a no-op (False) outside."""
    from prefect.context import get_run_context
    from prefect.exceptions import MissingContextError

    try:
        get_run_context()
    except MissingContextError:
        return False
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(markdown=markdown, key=key, description=description)
    return True
