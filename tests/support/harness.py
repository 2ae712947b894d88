"""The prompts the harnesses build from our exports, rebuilt step by step as their scripts do (our own code).

- PersonaMem's ``inference_standalone_openai.py``: ``context[:end_index]`` plus one user message
  (question, instruction, the raw ``all_options`` cell); for a model whose name contains an "o" every
  system message is folded into the next message and consecutive same-role messages merge.
- LongMemEval's ``run_generation.py`` with ``--retriever_type orig-session --history_format json
  --useronly false --cot true``: sessions sorted by date, ``has_answer`` popped, each written as
  ``\\n### Session N:\\nSession Date: D\\nSession Content:\\n\\n`` + ``json.dumps(turns)`` + ``\\n``,
  then the history tokenized with ``o200k_base`` and cut to ``max_retrieval_length``.
"""

from __future__ import annotations

import copy
import json

from pipeline.tokens import count_tokens

PM_INSTRUCTION = ("Find the most appropriate model response and give your final answer (a), (b), (c), or (d) "
                  "after the special token <final_answer>.")
OPENAI_PER_MESSAGE = 4  # what the measurement charges a message for its framing
LME_COT_TEMPLATE = ("I will give you several history chats between you and a user. Please answer the question based "
                    "on the relevant chat history. Answer the question step by step: first extract all the relevant "
                    "information, and then reason over the information to get the answer.\n\n\nHistory Chats:\n\n{}"
                    "\n\nCurrent Date: {}\nQuestion: {}\nAnswer (step by step):")


def fold_system(messages: list[dict]) -> list[dict]:
    """System messages become a prefix of the next message; consecutive same-role messages merge."""
    out, pending = [], ""
    for m in messages:
        if m["role"] == "system":
            pending += f"[System]: {m['content']}\n"
            continue
        content, pending = pending + m["content"], ""
        if out and out[-1]["role"] == m["role"]:
            out[-1]["content"] += "\n" + content
        else:
            out.append({"role": m["role"], "content": content})
    return out


def personamem_request(context: list[dict], row: dict, model: str = "gpt-4o") -> list[dict]:
    """The messages the script sends for one CSV row and its shared context."""
    history = context[: int(row["end_index_in_shared_context"])]
    ask = row["user_question_or_message"] + "\n\n" + PM_INSTRUCTION + "\n\n" + row["all_options"]
    messages = history + [{"role": "user", "content": ask}]
    return fold_system(messages) if "o" in model else messages


def request_tokens(messages: list[dict]) -> int:
    """A chat request's tokens: each message's content plus its framing, plus 3 priming the reply."""
    return sum(count_tokens(m["content"]) + OPENAI_PER_MESSAGE for m in messages) + 3


def lme_history(entry: dict) -> str:
    """The history string of LongMemEval's reader for one entry (before its truncation)."""
    chunks = [(d, copy.deepcopy(s)) for d, s in zip(entry["haystack_dates"], entry["haystack_sessions"], strict=True)]
    for _, session in chunks:
        for turn in session:
            turn.pop("has_answer", None)
    chunks.sort(key=lambda x: x[0])
    history = ""
    for i, (date, session) in enumerate(chunks):
        history += "\n### Session {}:\nSession Date: {}\nSession Content:\n{}\n".format(
            i + 1, date, "\n" + json.dumps(session))
    return history


def lme_prompt(entry: dict, max_retrieval_length: int) -> tuple[str, bool]:
    """The reader's prompt and whether it truncated the history (it keeps the first tokens only)."""
    from pipeline.tokens import encoding

    history = lme_history(entry)
    tokens = encoding().encode(history, allowed_special={"<|endoftext|>"})
    truncated = len(tokens) > max_retrieval_length
    if truncated:
        history = encoding().decode(tokens[:max_retrieval_length])
    return LME_COT_TEMPLATE.format(history, entry["question_date"], entry["question"]), truncated
