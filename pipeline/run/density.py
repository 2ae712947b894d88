"""The plan's filler share per budget, in the units the dataset reports it: filler tokens over a context's tokens.

A context is filled until the larger of its two harness forms ends just below the budget (see
``pipeline.s5_assembly``): PersonaMem's messages (each turn's text plus the message overhead, a date message per
session, the profile message) within the budget less the answer reserve and the question, and LongMemEval's JSON
(each turn's text plus its JSON frame, a header per session) within its reader's cap. Short turns cost more frame
per token in the JSON form, so at the smoke profile's 1,500-2,000-token budgets the JSON cap binds well before the
budget (a context holds ~75% of it), and a share counted against the budget alone read 74% where 51% was
published.
"""

from __future__ import annotations

import json

from pipeline.s5_assembly.fit import LME_SESSION, lme_history_cap, pm_history_cap
from pipeline.tokens import MESSAGE_OVERHEAD, count_tokens
from schemas.config import RunConfig

ASK_TOKENS = 150  # a question message with its four replies, as the message rule counts it (PersonaMem's form)
DATE_TOKENS = 12  # a session's date message
PROFILE_TOKENS = 90  # the profile message ("Current user persona: ...")
# ShareGPT filler turns grow with the longest conversation kept (a quarter of the smallest budget, at most
# filler.max_session_tokens): 44 tokens a turn at a 375-token cap (the smoke profile), 166 at 5,000 (the default),
# about 2.27 x the square root of the cap.
SHAREGPT_TURN_PER_ROOT_CAP = 2.27
SESSION_SLACK = 0.5  # whole filler sessions: a context stops about half a filler session short of its cap


def filler_turn_tokens(config: RunConfig) -> float:
    """Typical tokens of a filler turn: a ShareGPT conversation's under this profile's cap, or a model-written
    filler turn at the profile's reply length."""
    if config.filler.source == "sharegpt":
        from pipeline.s3_text.filler import SHAREGPT_GRAIN

        cap = min(config.filler.max_session_tokens, max(200, min(config.assembly.budgets) // SHAREGPT_GRAIN))
        return SHAREGPT_TURN_PER_ROOT_CAP * cap ** 0.5
    return (40 + 1.3 * (config.text.assistant_words_min + config.text.assistant_words_max) / 2) / 2


def lme_frame() -> tuple[int, int]:
    """LongMemEval's JSON frame: tokens a turn adds to its text, and a session's header."""
    turn = count_tokens(json.dumps([{"role": "user", "content": "x"}, {"role": "assistant", "content": "x"}]))
    header = count_tokens(LME_SESSION.format(12, "2025/01/06 (Mon) 09:00", "[]"))
    return max(1, (turn - 2) // 2), header


def filler_shares(config: RunConfig, own: float, sessions: float, exchanges: float | None = None) -> dict[int, float]:
    """Per budget, the share of a context's tokens that is filler, for a persona with ``own`` tokens of text in
    ``sessions`` sessions of ``exchanges`` exchanges in all (default: ``text.session_exchanges`` a session), its
    own text kept within ``max_persona_fraction`` of the budget."""
    turns = 2 * (exchanges or sessions * config.text.session_exchanges)
    per_turn, header = lme_frame()
    size = filler_turn_tokens(config)
    per_session = 2 * max(1, config.text.filler_exchanges)
    pm_rate = 1 + MESSAGE_OVERHEAD / size + DATE_TOKENS / (size * per_session)
    lme_rate = 1 + per_turn / size + header / (size * per_session)
    shares = {}
    for budget in sorted(config.assembly.budgets):
        own_pm = own + turns * MESSAGE_OVERHEAD + sessions * DATE_TOKENS + PROFILE_TOKENS
        own_lme = own + turns * per_turn + sessions * header
        kept = min(1.0, config.assembly.max_persona_fraction * budget / max(own_pm, 1))
        own_pm, own_lme = own_pm * kept, own_lme * kept
        room = min((pm_history_cap(budget, ASK_TOKENS) - own_pm) / pm_rate, (lme_history_cap(budget) - own_lme) / lme_rate)
        filler = max(0.0, room - SESSION_SLACK * size * per_session) * pm_rate
        shares[budget] = filler / (own_pm + filler) if own_pm + filler else 0.0
    return shares
