"""Implicit turns: the reveal check that keeps a model's implicit turn only when a reader of it alone finds the
preference it was written to show."""

from __future__ import annotations

from pipeline.catalog import load_catalog
from pipeline.checks.verdicts import heard
from pipeline.cues import cues_of
from pipeline.rng import derive_rng
from pipeline.s3_text.beats import Beat
from pipeline.specs import REVEAL
from schemas.reveal_drafts import RevealContext

SAID = {"like": "I enjoy", "dislike": "I avoid"}  # a statement of the reveal check: "I enjoy {item}."


def confirm_implicit(persona, asked, done, before, *, llm, config, stats, sample: int) -> None:
    """The reveal check of the model's implicit turns newly in ``done`` (not in ``before``): the same gateway reads
    each user turn alone and says which of four statements it shows (the beat's, its opposite, and the beat's stance
    toward two other items of the topic); a turn whose answer is not the beat's is taken out of ``done``."""
    checks = []
    for plan, i, beat in asked:
        key = (plan.session_id, i)
        if beat.implicit and key in done and key not in before and done[key].user_from is not None:
            rng = derive_rng(config.seed, persona.persona_id, f"reveal:{plan.session_id}:{i}:{sample}")
            shown, answer = reveal_statements(beat, rng)
            checks.append((key, answer, RevealContext(
                message=done[key].user, statements=[f"{SAID[stance]} {item}." for item, stance in shown],
                cues=[cues_of(beat.topic, item, stance) for item, stance in shown])))
    verdicts = llm.generate_each(REVEAL, [c for _, _, c in checks], sample_index=sample) if checks else []
    for (key, answer, _), verdict in zip(checks, verdicts, strict=True):
        if verdict is None or heard(verdict, None if verdict.answer == answer else
                                    f"the reader chose statement {verdict.answer}; the turn shows {answer}"):
            del done[key]
            stats.problems["implicit turn not recognised"] = stats.problems.get("implicit turn not recognised", 0) + 1


def reveal_statements(beat: Beat, rng) -> tuple[list[tuple[str, str]], int]:
    """Four (item, stance) statements about the user, in a drawn order, and the 1-based number of the beat's: its
    stance toward its item, the opposite, and its stance toward two other catalog items of its topic."""
    catalog = load_catalog().topics.get(beat.topic)
    others = [i.name for i in catalog.items if i.name != beat.item] if catalog else []
    stance = beat.stance or "like"
    true = (beat.item or "", stance)
    shown = [true, (true[0], "dislike" if stance == "like" else "like"),
             *((o, stance) for o in rng.sample(others, min(2, len(others))))]
    rng.shuffle(shown)
    return shown, shown.index(true) + 1
