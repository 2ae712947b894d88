"""What the harnesses send for a context, in tokens, and the target each budget holds them to.

A budget is the most a model receives for any row of a context, in the harness's own format, with
room kept for what follows the history. Two harnesses read our exports:

- PersonaMem's ``inference_standalone_openai.py`` sends the history ``context[:end_index]`` as chat
  messages, then one user message with the question, its instruction and the options; for a model
  whose name contains an "o" (gpt-4o, o1, o3-mini) it first folds every system message into the next
  message. The history is counted with the message rule (``budget.message_tokens``: content plus 4 per
  message, never less than what the folded messages cost); after it come the question message
  (question, instruction and options, ``pm_ask_tokens``) and the answer (``PM_ANSWER_RESERVE``). A
  context keeps room for its persona's longest question, and each row sent costs at most the budget:
  ``Placement.context_tokens + pm_ask_tokens + pm_answer_reserve <= budget`` (validation checks it).
- LongMemEval's ``run_generation.py`` (orig-session, ``--history_format json``) writes each session as
  ``\\n### Session N:\\nSession Date: D\\nSession Content:\\n\\n<json.dumps(turns)>\\n`` (ASCII-escaped
  JSON, ``has_answer`` removed) and truncates the history to ``model_max_length - gen_length - 1000``
  tokens of ``o200k_base``: 126,200 for a 128k model with ``--cot true`` (gen_length 800). Our history
  cap is the budget less that reserve, so no entry is ever truncated.

Below 18,000 tokens (test budgets) each reserve is capped at a tenth of the budget. A context fits when
both counts fit (``fits``); assembly fills it so that the larger of the two, reserve included, ends
within the tolerance below the budget (``fill_tokens``), or, where whole filler sessions are too coarse
for both caps at once (budgets of a few thousand tokens), less than the smallest filler session below
that (``fill_floor``).
"""

from __future__ import annotations

import gc
import json
from collections.abc import Sequence
from typing import Protocol

from pipeline.tokens import MESSAGE_OVERHEAD, count_tokens, encoding

PM_INSTRUCTION = ("Find the most appropriate model response and give your final answer (a), (b), (c), or (d) "
                  "after the special token <final_answer>.")
PM_ANSWER_RESERVE = 1000  # the model's answer, reasoning before <final_answer> included
PM_REPLY_PRIMING = 3  # OpenAI's chat format primes every reply with 3 tokens
LME_GEN_LENGTH = 800  # run_generation.py's gen_length with --cot true (500 without)
LME_PROMPT_RESERVE = 1000  # what run_generation.py keeps for its template and the question
LME_SESSION = "\n### Session {}:\nSession Date: {}\nSession Content:\n\n{}\n"
LME_FRAME_SLACK = 3  # the session number and date vary (priced at their longest), and a join may differ by a token
RESERVE_SHARE = 0.1


class TurnLike(Protocol):
    role: str
    content: str


def _capped(reserve: int, budget: int) -> int:
    return min(reserve, int(budget * RESERVE_SHARE))


def pm_answer_reserve(budget: int) -> int:
    """Tokens of a PersonaMem budget kept for the model's answer."""
    return _capped(PM_ANSWER_RESERVE, budget)


def pm_history_cap(budget: int, ask: int) -> int:
    """The most a context's history may cost under the message rule when its longest question message
    costs ``ask`` (``pm_ask_tokens``)."""
    return budget - pm_answer_reserve(budget) - ask


def lme_reserve(budget: int) -> int:
    """Tokens of a budget LongMemEval's reader keeps from the history (gen_length + 1000)."""
    return _capped(LME_GEN_LENGTH + LME_PROMPT_RESERVE, budget)


def lme_history_cap(budget: int) -> int:
    """LongMemEval's ``max_retrieval_length`` for a model of ``budget`` tokens: 126,200 at 128k."""
    return budget - lme_reserve(budget)


def letter(index: int) -> str:
    """0 -> '(a)'."""
    return f"({chr(ord('a') + index)})"


def option_strings(texts: Sequence[str]) -> list[str]:
    """The options as PersonaMem writes them: '(a) ...'."""
    return [f"{letter(i)} {text}" for i, text in enumerate(texts)]


def pm_ask(question: str, options: Sequence[str]) -> str:
    """The last user message PersonaMem's script sends: question, instruction, the raw ``all_options`` cell."""
    return question + "\n\n" + PM_INSTRUCTION + "\n\n" + json.dumps(option_strings(options), ensure_ascii=False)


def pm_ask_tokens(question: str, options: Sequence[str]) -> int:
    """What that message costs (content plus the message overhead), with the 3 tokens priming the reply."""
    return count_tokens(pm_ask(question, options)) + MESSAGE_OVERHEAD + PM_REPLY_PRIMING


def lme_session_text(turns: Sequence[TurnLike], number: int, date: str) -> str:
    """One session of LongMemEval's JSON history, exactly as its reader writes it."""
    return LME_SESSION.format(number, date, json.dumps([{"role": t.role, "content": t.content} for t in turns]))


def lme_session_tokens_many(sessions: Sequence[Sequence[TurnLike]]) -> list[int]:
    """An upper bound of what each session costs in LongMemEval's JSON history (its frame priced with a
    five-digit session number and the longest date, plus ``LME_FRAME_SLACK``)."""
    encode = encoding().encode_ordinary
    frame = len(encode(LME_SESSION.format(99999, "2000/12/31 (Wed) 23:59", ""))) + LME_FRAME_SLACK
    enabled = gc.isenabled()
    gc.disable()  # as budget.count_sessions does: many short-lived acyclic objects
    try:
        return [len(encode(json.dumps([{"role": t.role, "content": t.content} for t in turns]))) + frame
                for turns in sessions]
    finally:
        if enabled:
            gc.enable()


def fill_tokens(budget: int, chat_tokens: int, lme_tokens: int, ask: int) -> int:
    """How much of ``budget`` a context takes: the larger of its two harness costs, each with its reserve."""
    return max(chat_tokens + ask + pm_answer_reserve(budget), lme_tokens + lme_reserve(budget))


def fits(budget: int, chat_tokens: int, lme_tokens: int, ask: int) -> bool:
    """Whether both harnesses receive the whole context (its longest question message costing ``ask``)
    within ``budget``."""
    return chat_tokens <= pm_history_cap(budget, ask) and lme_tokens <= lme_history_cap(budget)


def fill_floor(budget: int, tolerance: float, smallest_filler: int) -> float:
    """The least a context may fill: the tolerance below the budget, less one filler session (the smallest,
    in LongMemEval's JSON): no pick of whole sessions may land closer under both caps."""
    return budget * (1 - tolerance) - smallest_filler
