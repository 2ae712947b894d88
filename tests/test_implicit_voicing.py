"""Issue 44: preferences the user shows without saying them. Cues are hand-written per item and stance, a beat is
voiced implicitly in code's share, an implicit turn carries its cue and never the item's name nor a stance word,
the model's wording is kept only when a reader of it alone finds the preference, and every table says the voicing."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from pipeline.catalog import load_catalog
from pipeline.config import DataFileError, load_config
from pipeline.cues import (
    STANCES,
    carries,
    check_cues,
    cue_keys,
    cue_problem,
    cues_of,
    implicit_problem,
    load_cues,
)
from pipeline.run.plan import build_plan
from pipeline.s3_text.beats import VOICES, Beat, fallback_exchange, implicit_wording, plan_sessions
from pipeline.s3_text.implicit import confirm_implicit, reveal_statements
from pipeline.s3_text.turn_mode import Exchange, TurnAsk, write_turns
from pipeline.words import mentions, stems
from schemas.reveal_drafts import RevealContext, RevealVerdict
from schemas.turn_drafts import UserTurnContext


def test_every_catalog_item_has_cues_for_both_stances_and_each_passes_its_rules():
    cues, catalog = load_cues(), load_catalog()
    assert set(cues) == set(catalog.topics)
    for topic, entry in catalog.topics.items():
        assert {i.name for i in entry.items} == set(cues[topic]), topic
        for item, own in cues[topic].items():
            for stance in STANCES:
                assert len(getattr(own, stance)) >= 2, (item, stance)
                for cue in getattr(own, stance):
                    assert cue_problem(cue, item) is None and len(cue_keys(cue)) == 2


@pytest.mark.parametrize("line, why", [
    ('  like: ["a bowl of noodles I really love on a cold night", "x y z w"]', "says the stance outright ('love')"),
    ('  like: ["a place that does proper Sichuan hotpot with friends", "a b c d"]', "uses the item's own word(s)"),
    ('  like: ["hot broth", "a b c d"]', "2 words"),
])
def test_a_bad_cue_is_one_error_naming_its_file_and_line(tmp_path, line, why):
    path = tmp_path / "foodRecommendation.yaml"
    path.write_text(f"# cues\nspicy Sichuan hotpot:\n{line}\n  dislike: [\"a gentle broth that leaves my tongue alone\"]\n")
    with pytest.raises(DataFileError) as err:
        check_cues(path)
    assert str(err.value).startswith(f"{path}:3: like cue of 'spicy Sichuan hotpot': ") and why in str(err.value)


def test_an_item_the_catalog_lacks_is_named(tmp_path):
    path = tmp_path / "foodRecommendation.yaml"
    path.write_text('# cues\ntofu towers:\n  like: ["a plate of silky bean curd"]\n  dislike: ["a dinner of grilled lamb"]\n')
    with pytest.raises(DataFileError, match=r"foodRecommendation.yaml:2: 'tofu towers' is not an item"):
        check_cues(path)


def test_an_implicit_turn_names_no_item_says_no_stance_and_carries_its_cue():
    item, cue = "spicy Sichuan hotpot", "a spot that does a proper numbing-hot broth"
    ok = "Can you help me find a spot that does a proper numbing-hot broth this weekend?"
    assert carries(ok, cue) and implicit_problem(ok, None, item, cue) is None
    assert "item's word" in implicit_problem("Can you find me a numbing-hot broth, maybe Sichuan style?", None, item, cue)
    assert "stance" in implicit_problem("I love a proper numbing-hot broth. Any spots?", None, item, cue)
    assert "cue" in implicit_problem("Can you help me find a nice dinner spot?", None, item, cue)
    assert implicit_problem(ok, "Try a hotpot place downtown; the broth is the point.", item, cue) == \
        "reply names the implicit item (['hotpot'])"
    assert "stance" in implicit_problem(ok, "Since you enjoy heat, try the broth at Chen's.", item, cue)
    assert implicit_problem(ok, "Places like Chen's do a numbing broth; go early on Saturday.", item, cue) is None


def test_half_the_preference_beats_are_implicit_each_with_a_cue_of_its_item_and_stance():
    config = load_config("default", n_personas=4, seed=11)
    plan = build_plan(config)
    voicing, share = [], config.text.implicit_share
    for persona, timeline in zip(plan.personas, plan.timelines, strict=True):
        for session in plan_sessions(persona, timeline, config=config):
            for beat in session.beats:
                if beat.kind in VOICES:
                    voicing.append(beat.voicing)
                if beat.implicit:
                    assert beat.kind in VOICES and beat.cue in cues_of(beat.topic, beat.item, beat.stance)
                    user, reply = fallback_exchange(beat, "food", random.Random(1))
                    assert implicit_problem(user, reply, beat.item, beat.cue) is None, user
                else:
                    assert beat.cue is None
    assert share == 0.5 and abs(voicing.count("implicit") / len(voicing) - share) <= 0.05, voicing.count("implicit")
    none = config.model_copy(update={"text": config.text.model_copy(update={"implicit_share": 0.0})})
    assert not any(b.implicit for s in plan_sessions(plan.personas[0], plan.timelines[0], config=none) for b in s.beats)


def _beat(stance="like", kind="initial_preference", event=None):
    cue = cues_of("foodRecommendation", "spicy Sichuan hotpot", stance)[0]
    return Beat(kind=kind, topic="foodRecommendation", item="spicy Sichuan hotpot", stance=stance, event=event,
                voicing="implicit", cue=cue, pref_versions=["pref_x@1"])


def test_code_words_a_change_around_its_event_and_cue():
    beat = _beat("dislike", "preference_update", "was diagnosed with high blood pressure")
    for seed in range(6):
        user = implicit_wording(beat, random.Random(seed))
        assert "was diagnosed with high blood pressure" in user and carries(user, beat.cue)
        assert implicit_problem(user, None, beat.item, beat.cue) is None


class _Reader:
    """A gateway double for the reveal check: answers each statement list with a fixed rule."""

    def __init__(self, right: bool):
        self.right, self.asked = right, []

    def generate_each(self, spec, contexts, sample_index=0):
        self.asked += contexts
        out = []
        for c in contexts:
            truth = RevealVerdict.fake_output(c, random.Random(0)).answer
            out.append(RevealVerdict(answer=truth if self.right else truth % len(c.statements) + 1))
        return out


class _Plan:
    session_id = "ses_1"


@pytest.mark.parametrize("right", [True, False])
def test_the_models_implicit_turn_is_kept_only_when_a_reader_of_it_alone_finds_the_preference(right):
    from pipeline.s3_text.write_sessions import SessionStats

    beat = _beat()
    config = load_config("smoke")
    done = {("ses_1", 0): Exchange(f"Could you help me find {beat.cue} on Saturday?", "Sure, try the market.", 0, 0)}
    reader, stats = _Reader(right), SessionStats()
    persona = build_plan(config).personas[0]
    confirm_implicit(persona, [(_Plan(), 0, beat)], done, set(), llm=reader, config=config, stats=stats, sample=0)
    assert len(reader.asked) == 1 and len(reader.asked[0].statements) == 4
    assert (("ses_1", 0) in done) is right
    assert stats.problems.get("implicit turn not recognised", 0) == (0 if right else 1)


def test_the_reveal_statements_hold_the_truth_its_opposite_and_two_other_items():
    shown, answer = reveal_statements(_beat("dislike"), random.Random(3))
    assert shown[answer - 1] == ("spicy Sichuan hotpot", "dislike") and ("spicy Sichuan hotpot", "like") in shown
    assert len({item for item, _ in shown}) == 3
    cues = [cues_of("foodRecommendation", i, st) for i, st in shown]
    context = RevealContext(message="Can you find me somewhere mild for dinner on Friday?",
                            statements=[f"I enjoy {i}." for i, _ in shown], cues=cues)
    from pipeline.prompting import PromptEnv
    from pipeline.specs import REVEAL

    prompt = " ".join(m.content for m in PromptEnv().render(REVEAL, context))
    assert context.message in prompt and all(s in prompt for s in context.statements)
    assert not any(c in prompt for own in cues for c in own)  # what the fake reads is never in the prompt


def test_the_turn_mode_asks_only_the_reply_of_a_code_worded_implicit_turn():
    import asyncio
    from types import SimpleNamespace

    from pipeline.s3_text.write_sessions import SessionStats

    class Replies:
        calls: list = []
        runtime = SimpleNamespace(run=asyncio.run)

        async def agenerate(self, spec, context, sample_index=0):
            self.calls.append(spec.name)
            return type("D", (), {"text": "Try the night market on Friday; the stalls there open late."})()

    llm, user = Replies(), "Could you help me find a gentle broth that leaves my tongue alone?"
    ask = TurnAsk(key=("s", 0), topic="food", context=UserTurnContext(name="A", age=30, occupation=None, opening="x"),
                  user_problem=lambda u: "never asked", reply_problem=lambda u, r: None, fixed=user)
    written = write_turns([ask], llm=llm, config=load_config("smoke"), stats=SessionStats())
    assert written[("s", 0)][:2] == (user, None) and written[("s", 0)][2].startswith("Try the night market")
    assert llm.calls == ["write_sessions.turn_assistant"]  # no user turn asked; one reply


def test_no_reply_names_an_item_voiced_only_implicitly(tmp_path):
    """The whole text stage on the fake backend: implicit turns carry their cue, name no item, say no stance, and
    no later turn of either role names an item that was voiced only implicitly."""
    from pipeline.run.persona_text import build_persona_text
    from pipeline.s1_personas.sample_personas import sample_personas
    from tests.test_text_stages import fake_llm

    config = load_config("default", n_personas=3, seed=7)
    llm = fake_llm(tmp_path)
    implicit = explicit = 0
    for seed in sample_personas(3, run_seed=config.seed, settings=config.personas):
        result = build_persona_text(seed, config=config, llm=llm)
        versions = {p.key: p for p in result.timeline.preferences}
        turns = [(s.session.time, t) for s in result.sessions for t in s.turns]
        turns.sort(key=lambda r: (r[0], r[1].session_id, r[1].turn_index))
        named = set()
        for _, turn in turns:
            item = versions[turn.pref_versions[0]].item if turn.voicing else None
            if turn.voicing == "implicit":
                implicit += 1
                assert not stems(turn.content) & stems(item) and implicit_problem(turn.content, None, item, "") in (
                    None, "implicit turn misses its cue's key words")
            elif turn.voicing == "explicit":
                explicit += 1
                named.add(item)
                assert mentions(turn.content, item)
            elif turn.pref_versions:  # a routine names its item
                named.add(versions[turn.pref_versions[0]].item)
            held = {p.item for p in versions.values()}
            if turn.role == "user" and (turn.pref_versions or turn.event_ids):
                continue  # a beat's own words (an event's summary may name a thing in passing)
            leaked = [i for i in held - named if mentions(turn.content, i)  # (not an item whose words another has)
                      and not any(mentions(n, i) for n in named if n)]
            assert not leaked, (turn.role, turn.voicing, turn.pref_versions, leaked, turn.content)
    assert implicit and explicit and 0.35 <= implicit / (implicit + explicit) <= 0.65


def test_every_table_says_the_voicing():
    from schemas.tables import TABLES

    for table in ("turns", "queries", "placements"):
        assert "voicing" in TABLES[table][0].names
    assert Path(__file__).parent.parent.joinpath("pipeline/data/cues").is_dir()


def test_the_eval_reports_accuracy_per_voicing():
    from pipeline.evaluation.summary import EvalRow, group_accuracies

    rows = [EvalRow(persona_id=f"p{i % 3}", query_id=f"q{i}", context_id="c", type="suggest_new_ideas", topic="t",
                    voicing=("implicit", "explicit", "none")[i % 3], budget_tokens=32000, distance_tokens=10,
                    distance_bucket="<1k", correct_letter="a", correct_position=0, status="answered",
                    correct=i % 3 == 1) for i in range(12)]
    by = {a.key: a.accuracy for a in group_accuracies(rows, n_boot=20, seed=1)["voicing"]}
    assert by == {"voicing=explicit": 1.0, "voicing=implicit": 0.0, "voicing=none": 0.0}
