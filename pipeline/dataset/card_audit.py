"""The card's "Human audit" section, from the ``stats.audit`` that `personagen audit-score` records."""

from __future__ import annotations

from pipeline.dataset.card_use import markdown_table

QUESTIONS = {
    "choice_agrees_with_key": "the rater's own choice (key hidden) is the marked answer",
    "key_right": "the marked answer is right",
    "another_right": "another option is also right",
    "gives_away": "the message gives the answer away without the history",
    "natural": "the text reads naturally",
}



def render_audit(audit: dict | None) -> str:
    """The card's "Human audit" section: each question's rate with its 95% interval and the raters' agreement."""
    if not audit:
        return ""
    rows = []
    for key, label in QUESTIONS.items():
        q = audit["questions"].get(key)
        if q is None:
            continue
        kappa = "-" if q.get("kappa") is None else \
            f"{q['kappa']:.2f} [{q['kappa_low']:.2f}, {q['kappa_high']:.2f}] on {q['kappa_items']} items"
        rows.append([label, _cell(q), q["answered"], kappa])
    ceiling = audit["ceiling"]
    raters = [[name, r["items"], _cell(r.get("choice_agrees_with_key")), _cell(r.get("key_right"))]
              for name, r in audit["per_rater"].items()]
    return ("## Human audit\n\n"
            f"{audit['raters']} raters judged a stratified sample of {audit['items']} queries of version "
            f"{audit['of']} (drawn by `personagen audit-sheet`, by type, voicing and budget; scored by "
            f"`personagen audit-score` on {audit['scored_at'][:10]} from {', '.join(audit['sheets'])}). Each rater saw "
            "the evidence turns, the message and the four replies in a fresh order, chose one with the key hidden, "
            "then answered the questions below. Rates pool every rating, with a 95% Wilson interval; agreement is "
            f"{audit['agreement']}, with a 95% bootstrap interval over items.\n\n"
            + markdown_table(["question", "yes [95% interval]", "ratings", "agreement (kappa)"], rows)
            + f"\n**Estimated ceiling** (share of items whose marked answer the raters judge right, a split vote "
              f"counting half): {ceiling['rate']:.1%} [{ceiling['low']:.1%}-{ceiling['high']:.1%}] over "
              f"{ceiling['items']} items.\n\nPer rater:\n\n"
            + markdown_table(["rater", "items", "own choice is the key", "marked answer right"], raters))


def _cell(rate: dict | None) -> str:
    return "-" if rate is None else f"{rate['rate']:.1%} [{rate['low']:.1%}-{rate['high']:.1%}]"
