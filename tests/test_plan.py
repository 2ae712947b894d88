"""Default-config statistics over 180 personas, determinism across N, and the plan/show commands."""

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli.app import app
from pipeline.config import load_config
from pipeline.run.plan import build_plan, plan_stats

runner = CliRunner()


def test_default_config_over_180_personas_exercises_the_benchmark():
    config = load_config("default", n_personas=180, seed=7)
    stats = plan_stats(build_plan(config).timelines, config.topics)
    assert all(count > 0 for count in stats["updates_per_topic"].values()), stats["updates_per_topic"]
    assert stats["cross_topic_fraction"] >= 0.10  # every multi-topic link passes the same strict read as any other
    assert stats["max_chain_length"] >= 3
    assert stats["events"]["routine"] > 0
    assert stats["max_causal_depth"] >= 3


def test_persona_i_is_identical_for_any_n():
    small = build_plan(load_config("default", n_personas=3, seed=5))
    large = build_plan(load_config("default", n_personas=25, seed=5))
    assert small.personas == large.personas[:3]
    assert small.timelines == large.timelines[:3]


def test_plan_writes_parquet_and_show_prints_a_dated_tree(tmp_path):
    out = tmp_path / "plan"
    result = runner.invoke(app, ["plan", "--n", "5", "--seed", "7", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "life events changing 2+ topics" in result.output
    assert "most frequent (event -> change) pair" in result.output
    tables = {p.stem: pq.read_table(p) for p in out.glob("*.parquet")}
    assert set(tables) == {"personas", "preferences", "events", "event_edges"}
    assert tables["personas"].num_rows == 5
    persona_id = tables["personas"].column("persona_id")[0].as_py()
    shown = runner.invoke(app, ["show", persona_id, "--plan", str(out)])
    assert shown.exit_code == 0, shown.output
    assert "initial preferences" in shown.output and "2025-" in shown.output
    # every change is printed with the event and the facet that link them
    assert shown.output.count("why: ") == shown.output.count(" → ") + shown.output.count(" new: ") > 0
    assert "pushes" in shown.output and "facet '" in shown.output


def test_plan_rejects_bad_input_with_one_line(tmp_path):
    result = runner.invoke(app, ["plan", "--n", "0", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert "n_personas" in result.output
    assert not (tmp_path / "x").exists()
    missing = runner.invoke(app, ["show", "per_nope", "--plan", str(tmp_path / "x")])
    assert missing.exit_code == 2


def test_plan_reads_personahub(tmp_path, personahub_file):
    out = tmp_path / "plan"
    result = runner.invoke(app, ["plan", "--n", "4", "--personahub", str(personahub_file), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert pq.read_table(out / "personas.parquet").column("seed_source").to_pylist() == ["personahub"] * 4


def test_eta_speed_comes_from_the_latest_burst_of_calls_else_a_probe(tmp_path):
    from pipeline.llm import LLM
    from pipeline.llm.cache import CallRecord
    from pipeline.run.estimate import recent_throughput
    from schemas.llm import LLMSettings

    llm = LLM(LLMSettings(llm="fake", cache_path=tmp_path / "llm.sqlite"))
    assert recent_throughput(llm) is None  # an empty cache: the plan falls back to one probe call

    def call(i: int, at: float, tokens: int, model: str = "fake") -> CallRecord:
        return CallRecord(key=f"k{model}{i}", status="ok", spec="s", provider="fake", model=model, request="[]",
                          output_tokens=tokens, latency_s=99.0, created_at=at)

    for i in range(10):  # an old burst at 1 tokens/s, then an hour's pause
        llm.cache.put(call(i, 1000.0 + 100 * i, 100))
    for i in range(11):  # the latest burst: 50 tokens every 2 s = 25 tokens/s, whatever each call's latency
        llm.cache.put(call(100 + i, 10_000.0 + 2 * i, 50))
    llm.cache.put(call(500, 20_000.0, 10**6, model="other"))  # another model's calls do not count
    assert recent_throughput(llm) == 25.0


def test_first_eta_is_a_burst_at_the_runs_concurrency(tmp_path):
    """An empty cache: `workers` beat-sized calls at once (the run's width), each call's time x calls / width;
    measured once (the burst is cached), and the embedded model is one call at a time."""
    from pipeline.config import load_config
    from pipeline.llm import LLM
    from pipeline.run.estimate import burst_seconds_per_call, estimate_run, run_concurrency
    from schemas.llm import LLMSettings

    config = load_config("smoke", n_personas=4)
    llm = LLM(LLMSettings(llm="fake?latency_s=0.2", cache_path=tmp_path / "llm.sqlite"))
    assert run_concurrency(config, llm, workers=3) == 3 and run_concurrency(config, llm, workers=16) == 4
    estimate = estimate_run(config, llm, workers=3)
    assert llm.cache.count("ok") == 3  # the burst: three calls, nothing else
    per_call = burst_seconds_per_call(llm, 3)
    assert per_call >= 0.2
    assert estimate.eta_s == pytest.approx(estimate.llm_calls * per_call / 3, rel=0.01)
    estimate_run(config, llm, workers=3)
    assert llm.cache.count("ok") == 3  # measured once


def test_progress_display_counts_model_calls_against_the_plan(tmp_path):
    import io

    from rich.console import Console
    from rich.progress import Progress

    from pipeline.cli.generate import RichReporter
    from pipeline.llm import listen
    from tests.support.llm_helpers import SPEC, TopicContext, fake_llm

    llm, _ = fake_llm(tmp_path)
    with Progress(console=Console(file=io.StringIO())) as progress:
        reporter = RichReporter(progress, total=2, calls=6)
        calls = progress.tasks[reporter.calls]
        unlisten = listen(reporter.call_done)
        try:
            llm.generate(SPEC, TopicContext(name="Ada", topic="tea"))
            llm.generate(SPEC, TopicContext(name="Ada", topic="tea"))  # a cache hit is progress too
            assert calls.completed == 2
            reporter.persona_done(1, from_checkpoint=True, failed=False)  # made no call: the plan left it off
            assert (calls.completed, calls.total) == (2, 6)
            for topic in ("a", "b", "c", "d", "e"):
                llm.generate(SPEC, TopicContext(name="Ada", topic=topic))
            assert (calls.completed, calls.total) == (7, 7)  # more calls than planned: the total follows
        finally:
            unlisten()
        llm.generate(SPEC, TopicContext(name="Bo", topic="tea"))
        assert calls.completed == 7  # no longer listening
        reporter.done()
        assert calls.total == 7 and progress.tasks[reporter.personas].completed == 1


def test_a_rerun_plan_says_which_personas_are_made_and_leaves_their_calls_off(tmp_path):
    from typer.testing import CliRunner

    from pipeline.cli.app import app

    args = ["generate", "--n", "2", "--profile", "smoke", "--llm", "fake", "--outputs", str(tmp_path / "out")]
    first = CliRunner().invoke(app, args, env={"PREFECT_API_URL": "", "COLUMNS": "200"})
    assert first.exit_code == 0 and "made already" not in first.output, first.output
    from pipeline.config import load_config, with_writing
    from pipeline.dataset import load
    from pipeline.llm import LLM
    from pipeline.run.estimate import estimate_run
    from schemas.llm import LLMSettings

    ds = load(tmp_path / "out" / "smoke")  # the plan's filler share, in the units the dataset reports it
    llm = LLM(LLMSettings(llm="fake", cache_path=tmp_path / "out" / ".cache" / "llm.sqlite"))
    planned = estimate_run(with_writing(load_config("smoke", n_personas=2), llm), llm, workers=2).filler_share
    for budget, share in planned.items():
        contexts = [c for c in ds.contexts if c.budget_tokens == budget]
        published = sum(c.filler_tokens for c in contexts) / sum(c.n_tokens for c in contexts)
        assert 1 / 1.25 < share / published < 1.25, (budget, share, published)
    again = CliRunner().invoke(app, [*args, "--dry-run"], env={"COLUMNS": "200"})
    assert again.exit_code == 0 and "made already (checkpoints: no calls)" in again.output, again.output
    assert "2 of 2 personas" in again.output and "ETA (cache misses only)" in again.output


def test_plan_sizes_calls_from_this_models_cache_once_it_holds_enough_of_a_kind(tmp_path):
    from pipeline.config import load_config
    from pipeline.llm import LLM
    from pipeline.llm.cache import CallRecord
    from pipeline.run.estimate import MIN_MEASURED, OUTPUT_TOKENS, call_labels, call_tokens, estimate_run
    from schemas.llm import LLMSettings

    config = load_config("smoke", n_personas=2)
    labels = call_labels(config)
    assert labels["inventory"] == f"expand_persona.inventory/InventoryDraft{config.text.inventory_size}"
    llm = LLM(LLMSettings(llm="fake", cache_path=tmp_path / "llm.sqlite"))
    assert call_tokens(config, llm)["beat"] == OUTPUT_TOKENS["beat"]
    before = estimate_run(config, llm, workers=1)

    def put(i: int, spec: str, tokens: int, status: str = "ok", model: str = "fake") -> None:
        llm.cache.put(CallRecord(key=f"k{i}", status=status, spec=spec, provider="fake", model=model, request="[]",
                                 output_tokens=tokens))

    for i in range(MIN_MEASURED - 1):
        put(i, labels["beat"], 400)
    put(10, labels["beat"], 1000, status="failed")  # a failed call's asks cost tokens too
    put(11, labels["query"], 999)                      # too few query calls to trust
    put(12, labels["beat"], 10**6, model="other")      # another model's calls do not count
    for i in range(MIN_MEASURED):
        put(20 + i, "expand_persona.inventory/InventoryDraft10", 5000)  # another profile's inventory size
        put(30 + i, f"narrate_events.narrative/NarrationDraft{i + 1}", 100 * (i + 1))  # any size of narration
    sizes = call_tokens(config, llm)
    assert sizes["beat"] == (400 * (MIN_MEASURED - 1) + 1000) / MIN_MEASURED
    assert sizes["query"] == OUTPUT_TOKENS["query"]
    assert sizes["inventory"] == OUTPUT_TOKENS["inventory"] * config.text.inventory_size
    assert sizes["narration"] == sum(100 * (i + 1) for i in range(MIN_MEASURED)) / MIN_MEASURED
    assert sizes["filler"] == OUTPUT_TOKENS["small_talk"] * config.text.filler_exchanges
    assert estimate_run(config, llm, workers=1).output_tokens > before.output_tokens


def test_the_cache_labels_each_call_with_its_spec_and_output_size(tmp_path):
    from dataclasses import replace

    from pipeline.llm import call_label
    from schemas.drafts import small_talk_draft
    from tests.support.llm_helpers import SPEC, TopicContext, fake_llm

    llm, _ = fake_llm(tmp_path)
    llm.generate(SPEC, TopicContext(name="Ada", topic="tea"))
    (label,) = llm.cache.tokens_by_spec("fake", llm.backend.model)
    assert label == call_label(SPEC) == f"{SPEC.name}/TopicNote"
    assert call_label(replace(SPEC, output=small_talk_draft(4))).endswith("/SmallTalkDraft4")


def test_plan_counts_the_calls_a_stage_makes_again_after_code_rejects_a_reply(tmp_path):
    import json

    from pipeline.config import load_config
    from pipeline.llm import LLM, RESAMPLE, first_ask
    from pipeline.llm.cache import CallRecord
    from pipeline.run.estimate import attempts_per_item, call_labels, estimate_run
    from schemas.llm import LLMSettings

    ask = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert first_ask([*ask, {"role": "assistant", "content": "bad"}, {"role": "user", "content": "again"}]) == ask
    resampled = [ask[0], {"role": "user", "content": "u\n\n" + RESAMPLE.format(problem="too long")}]
    assert first_ask(resampled) == ask

    config = load_config("default", n_personas=2)  # a call per beat (whole sessions call BEAT only to rewrite one)
    config = config.model_copy(update={"text": config.text.model_copy(update={"writing": "exchange"})})
    llm = LLM(LLMSettings(llm="fake", cache_path=tmp_path / "llm.sqlite"))
    before = estimate_run(config, llm, workers=1)
    label, n = call_labels(config)["beat"], 0
    for beat in range(4):  # 4 beats: 3 samples each, one of them re-asked (a resampled request)
        messages = [{"role": "system", "content": "s"}, {"role": "user", "content": f"beat {beat}"}]
        for sample in range(3):
            stored = [messages[0], {"role": "user", "content": messages[1]["content"] + "\n\n" + RESAMPLE.format(
                problem="x")}] if sample == 1 else messages
            llm.cache.put(CallRecord(key=f"k{n}", status="ok", spec=label, provider="fake", model="fake",
                                     request=json.dumps(stored), output_tokens=100))
            n += 1
    factors = attempts_per_item(config, llm)
    assert factors["beat"] == 3.0 and factors["query"] == 1.0
    assert attempts_per_item(config.model_copy(update={"text": config.text.model_copy(update={"attempts": 2})}),
                             llm)["beat"] == 2.0  # never more than the run's own attempts
    assert estimate_run(config, llm, workers=1).llm_calls > before.llm_calls


def test_engine_eta_decodes_each_kind_as_wide_as_the_run_keeps_it():
    """A batching engine's ETA: a kind with one call per persona decodes alone, one with many keeps
    IN_FLIGHT_PER_PERSONA of them in flight per persona, up to the slots; the evaluated share of the prompts (the
    turn mode's own) takes the measured prompt speed; all at the engine's efficiency in a run."""
    from pipeline.config import load_config
    from pipeline.run.estimate import (
        ENGINE_EFFICIENCY,
        IN_FLIGHT_PER_PERSONA,
        PROMPT_EVALUATED,
        PROMPT_EVALUATED_TURNS,
        _pass_seconds,
        engine_eta,
    )

    speeds = {"prompt_tokens_per_s": 100.0, "step_s": {1: 0.02, 2: 0.03, 4: 0.05, 8: 0.08}}
    assert _pass_seconds(speeds["step_s"], 3) == pytest.approx(0.04)
    assert _pass_seconds(speeds["step_s"], 16) == pytest.approx(0.16)  # beyond the slots: passes queue up
    config = load_config("smoke", n_personas=1)
    alone = engine_eta(config, {"profile": 1}, {"profile": 100}, speeds, workers=4, prompt_tokens=0)
    assert alone == pytest.approx(100 * 0.02 / ENGINE_EFFICIENCY)  # 100 tokens, one sequence: a pass each
    wide = engine_eta(config.model_copy(update={"n_personas": 8}), {"query": 8}, {"query": 100}, speeds,
                      workers=8, prompt_tokens=0)
    assert wide == pytest.approx(8 * 8 * 100 * 0.08 / 8 / ENGINE_EFFICIENCY)  # the 8 slots full
    one = engine_eta(config, {"query": 8}, {"query": 100}, speeds, workers=4, prompt_tokens=0)
    assert one == pytest.approx(800 * _pass_seconds(speeds["step_s"], IN_FLIGHT_PER_PERSONA)
                                / IN_FLIGHT_PER_PERSONA / ENGINE_EFFICIENCY)  # one persona
    prompts = engine_eta(config, {}, {}, speeds, workers=4, prompt_tokens=1000)
    assert prompts == pytest.approx(1000 * PROMPT_EVALUATED / 100 / ENGINE_EFFICIENCY)
    turns = config.model_copy(update={"text": config.text.model_copy(update={"writing": "turn"})})
    assert engine_eta(turns, {}, {}, speeds, workers=4, prompt_tokens=1000) == \
        pytest.approx(1000 * PROMPT_EVALUATED_TURNS / 100 / ENGINE_EFFICIENCY)


def test_first_eta_of_a_batching_engine_uses_its_measured_speeds_not_a_burst(tmp_path):
    from pipeline.config import load_config
    from pipeline.llm import LLM
    from pipeline.run.estimate import estimate_run
    from schemas.llm import LLMSettings

    config = load_config("smoke", n_personas=2)
    llm = LLM(LLMSettings(llm="fake", cache_path=tmp_path / "llm.sqlite"))
    asked = []
    llm.backend.speeds = lambda folder: asked.append(folder) or {"prompt_tokens_per_s": 150.0,
                                                                 "step_s": {1: 0.02, 8: 0.1}}
    estimate = estimate_run(config, llm, workers=4)
    assert asked == [tmp_path] and llm.cache.count() == 0  # no model call: the engine's own measure
    assert estimate.eta_s > estimate.output_tokens * 0.1 / 8  # never faster than every pass full
    assert estimate.eta_s < estimate.output_tokens * 0.02 + estimate.input_tokens / 150  # nor one at a time
