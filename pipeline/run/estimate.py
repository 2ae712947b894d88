"""The plan printed before a run: sizes, expected LLM calls and tokens, cost, and an ETA."""

from __future__ import annotations

import math
from dataclasses import replace

from pydantic import BaseModel

from pipeline.errors import UserError
from pipeline.llm import LLM, call_label
from pipeline.run.density import filler_shares
from pipeline.run.plan import build_plan
from pipeline.s3_text.beats import plan_sessions
from pipeline.s3_text.filler import filler_need
from pipeline.specs import (
    BEAT,
    FILLER,
    INVENTORY,
    NARRATION,
    PING,
    PROFILE,
    QUERY,
    REVEAL,
    SESSION,
    SMALL_TALK,
    TURN_ASSISTANT,
    TURN_USER,
)
from pipeline.tokens import count_tokens
from schemas.config import RunConfig
from schemas.drafts import exchange_draft, inventory_draft, small_talk_draft
from schemas.query import QUERY_TYPES
from schemas.query_drafts import query_draft

# Typical generated tokens per call of each kind (inventory: per item; small talk and filler: per
# exchange), used until the cache holds MIN_MEASURED calls of a kind from this model. Measured on
# SmolLM2-135M in smoke and default runs, re-asks and failed calls included (inventory 82 tokens for 4
# items, 209 for 10; filler 275 for 2 exchanges, 470 for 4).
OUTPUT_TOKENS = {"profile": 100, "inventory": 21, "narration": 190, "beat": 180, "small_talk": 130, "query": 165,
                 "reveal": 8}  # the reveal check's answer: {"answer": 2}
MIN_MEASURED = 3
# The turn mode's calls until the cache measured them: a message is about 52 tokens, and a reply is asked 2.8 times
# a message (SmolLM2-135M, default-profile runs of 2 personas, seeds 7 and 13: the calls averaged 157 tokens).
TURN_USER_TOKENS, REPLIES_PER_MESSAGE = 52, 2.8
# What it keeps of an exchange, in the dataset's tokens: a 35-token message and a reply of 0.6 of the length asked,
# at most 75 tokens (default-profile run: 35 and 75 tokens; smoke, asked 5-60 words: 31 and 25).
KEPT_USER_TOKENS, KEPT_REPLY_SHARE, KEPT_REPLY_MAX = 35, 0.6, 75
# Calls per planned item before the cache holds a measure of this model's own: SmolLM2-135M (turn mode) took 2.1
# calls a turn (2.9 a reply, 1.05 a message), 2.4 a narrative and 2.75 an inventory in a default-profile run of 2
# personas and 2 topics; other backends start at 1.
TYPICAL_ATTEMPTS = {"local": {"beat": 2.1, "small_talk": 2.1, "narration": 2.4, "inventory": 2.75, "query": 1.9}}
# The measuring calls give up after this many seconds (retries included): a mute server fails the start in a minute.
SETUP_CALL_S = 60.0
# The measuring burst: beat-sized calls under their own name, so the cache's measures of beats leave them out.
BURST = replace(BEAT, name="estimate.burst")
PROMPT_SPEEDUP = 8.0  # prompt tokens are processed this many times faster than tokens are generated
# Share of the prompt tokens sent that the batching engine evaluates (the rest is a cached prefix): 0.655 for a
# smoke run's requests in the session mode (bench/engine.py); 0.42-0.46 in the turn mode (stats.engine of
# default-profile runs of 2 personas).
PROMPT_EVALUATED = 0.66
PROMPT_EVALUATED_TURNS = 0.42
# A run's engine speed against its measure (`BatchEngine.measure`; a run reads longer KV streams, checks grammars):
# a default-profile run of 2 personas decoded and evaluated prompts at 0.83 of the measure at its mean width.
ENGINE_EFFICIENCY = 0.83
MESSAGE_OVERHEAD = 5  # prompt tokens a chat message costs beyond its text (the template's role markers)
# Calls a persona keeps in flight on a batching engine where its stage has several: 2 personas decoded 5.75-9
# sequences a pass in default-profile runs, 3.8-4 in smoke runs (engine counters).
IN_FLIGHT_PER_PERSONA = 2.9


class Estimate(BaseModel):
    personas: int
    sessions: int
    llm_calls: int
    output_tokens: int
    input_tokens: int
    cost_usd: float | None
    tokens_per_s: float | None
    eta_s: float | None
    own_tokens_per_persona: int = 0
    filler_share: dict[int, float] = {}


def per_persona_counts(config: RunConfig, sample: int = 5) -> dict[str, float]:
    """Average calls of each kind per persona, from the code-only plan of the first personas."""
    plan = build_plan(config.model_copy(update={"n_personas": min(sample, config.n_personas)}))
    n = len(plan.personas)
    planned_sessions = [s for p, t in zip(plan.personas, plan.timelines, strict=True)
                        for s in plan_sessions(p, t, config=config)]
    planned = [b for s in planned_sessions for b in s.beats]
    beats, implicit = len(planned), sum(b.implicit for b in planned)
    life = sum(e.kind == "life_event" for t in plan.timelines for e in t.events)
    sessions = len(config.topics) * len(config.periods) * config.text.sessions_per_period
    queries = sum(config.queries.quota(t) for t in QUERY_TYPES)
    counts = {"profile": 1, "inventory": len(config.topics), "narration": life / n, "beat": beats / n,
              "small_talk": sessions if config.text.small_talk_exchanges else 0,
              "query": queries if config.queries.wording != "code" else 0, "sessions": sessions}
    if config.text.writing in ("session", "auto"):  # one call per session; a beat call only rewrites a failing beat
        # the reveal check of each implicit turn the model wrote
        return counts | {"beat": 0.0, "small_talk": sessions, "beats": beats / n, "reveal": implicit / n}
    if config.text.writing == "turn":  # the user's message, then the reply; an implicit one's message is code's
        ordinary = sum(s.small_talk for s in planned_sessions)  # each a call for the message and one for the reply
        return counts | {"beat": (2 * beats - implicit) / n, "small_talk": 2 * ordinary / n,
                         "exchanges": (beats + ordinary) / n}
    return counts | {"reveal": implicit / n}


def recent_throughput(llm: LLM, *, gap_s: float = 120.0, min_calls: int = 8, min_span_s: float = 20.0) -> float | None:
    """Generated tokens per second the backend sustained in its latest burst of calls in this cache.

    A burst is the newest run of calls with no pause over ``gap_s``; its tokens over its span give the
    real throughput (queueing and concurrency included), which one probe call cannot. None when the
    cache holds too little recent work to judge.
    """
    rows = llm.cache.recent(llm.backend.provider, llm.backend.model)
    burst = rows[:1]
    for row in rows[1:]:
        if burst[-1][0] - row[0] > gap_s:
            break
        burst.append(row)
    span = burst[0][0] - burst[-1][0] if burst else 0.0
    if len(burst) < min_calls or span < min_span_s:
        return None
    return sum(tokens for _, tokens in burst[:-1]) / span  # the oldest call's tokens were made before the span


def probe_speed(llm: LLM) -> float | None:
    """Generated tokens per second of one call, from a probe call (cached, so measured once)."""
    context = PING.sample_context()
    key = llm.cache_key(PING, context)
    if llm.cache.get(key) is None:
        llm.generate(PING, context, stage="estimate")
    record = llm.cache.get(key)
    if record is None or record.latency_s <= 0 or record.output_tokens <= 0:
        return None
    return record.output_tokens / record.latency_s


def run_concurrency(config: RunConfig, llm: LLM, *, workers: int) -> int:
    """Calls the run keeps in flight: one per persona being processed (a persona's stages mostly wait on
    each other), at most ``max_concurrency``."""
    return max(1, min(workers, config.n_personas, llm.settings.max_concurrency))


def _pass_seconds(step_s: dict[int, float], width: float) -> float:
    """Seconds of one decoding pass over ``width`` sequences, interpolated between the measured widths."""
    widths = sorted(step_s)
    if width <= widths[0]:
        return step_s[widths[0]]
    for low, high in zip(widths, widths[1:], strict=False):
        if width <= high:
            return step_s[low] + (step_s[high] - step_s[low]) * (width - low) / (high - low)
    return step_s[widths[-1]] * width / widths[-1]


def engine_eta(config: RunConfig, counts: dict[str, float], sizes: dict[str, float], speeds: dict, *,
               workers: int, prompt_tokens: float) -> float:
    """The run's model time on a batching engine, from this machine's measured speeds (`LocalBackend.speeds`).

    Each kind of call decodes as wide as the run keeps it: the personas processed at once times the calls
    each keeps in flight, at most the engine's slots. A persona keeps one call in flight where its stage has
    one (its profile), and ``IN_FLIGHT_PER_PERSONA`` on average where the stage has more: a stage waits for
    its slowest call, and the next stage waits for it. A kind's generated tokens take a pass per token per
    sequence at that width; the prompts' evaluated tokens (``PROMPT_EVALUATED`` of those sent: the engine
    reuses shared prefixes) take the measured prompt speed, on the same cores, so they add up.
    """
    step_s, slots = speeds["step_s"], max(speeds["step_s"])
    personas = max(1, min(workers, config.n_personas))
    seconds = 0.0
    for kind, per_persona in counts.items():
        if kind not in sizes or per_persona <= 0:
            continue
        width = min(slots, max(1.0, personas * min(per_persona, IN_FLIGHT_PER_PERSONA)))
        seconds += config.n_personas * per_persona * sizes[kind] * _pass_seconds(step_s, width) / width
    evaluated = PROMPT_EVALUATED_TURNS if config.text.writing == "turn" else PROMPT_EVALUATED
    return (seconds + prompt_tokens * evaluated / speeds["prompt_tokens_per_s"]) / ENGINE_EFFICIENCY


def burst_seconds_per_call(llm: LLM, parallel: int) -> float | None:
    """Mean seconds of a beat-sized call while ``parallel`` of them run at once: a short burst of that many
    calls (a beat's sample context, one sample index each), cached, so measured once per model and width.

    One short probe call knew neither the server's queueing at the run's concurrency nor the run's
    request sizes (against an 8-slot llama.cpp server its ETA was 20x too short).
    """
    context = BURST.sample_context()
    indices = list(range(parallel))
    missing = [i for i in indices if llm.cache.get(llm.cache_key(BURST, context, sample_index=i)) is None]
    if missing:
        llm.generate_each(BURST, [context] * len(indices), sample_index=indices, stage="estimate")
    records = [llm.cache.get(llm.cache_key(BURST, context, sample_index=i)) for i in indices]
    latencies = [r.latency_s for r in records if r is not None and r.latency_s > 0]
    return sum(latencies) / len(latencies) if latencies else None


def call_labels(config: RunConfig) -> dict[str, str]:
    """The cache label of each kind of call this config makes (`pipeline.llm.call_label`); narration's
    output size varies per event, so it is matched by spec name alone."""
    turn = "write_sessions.turn_*" if config.text.writing == "turn" else None  # a call per turn, either kind
    return {
        "profile": call_label(PROFILE), "narration": f"{NARRATION.name}/",
        "beat": turn or
        call_label(replace(BEAT, output=exchange_draft(config.text.assistant_words_min, config.text.assistant_words_max))),
        "inventory": call_label(replace(INVENTORY, output=inventory_draft(config.text.inventory_size))),
        "small_talk": turn or f"{(SESSION if config.text.writing in ('session', 'auto') else SMALL_TALK).name}/",
        "filler": call_label(replace(FILLER, output=small_talk_draft(config.text.filler_exchanges))),
        "query": call_label(replace(QUERY, output=query_draft(config.queries.n_options))),
    }


def _labelled(spec: str, label: str) -> bool:
    """Whether a cache row's spec is a call of this label (a label ending in "/" matches any output size, one
    ending in "*" any spec it starts)."""
    return spec == label or (label.endswith("/") and spec.startswith(label)) or \
        (label.endswith("*") and spec.startswith(label[:-1]))


def call_tokens(config: RunConfig, llm: LLM, counts: dict[str, float] | None = None) -> dict[str, float]:
    """Generated tokens per call of each kind: this model's mean in the cache (re-asks and failed calls
    included) over calls of the same size (10-item inventories, 4-exchange filler) once it holds
    ``MIN_MEASURED`` of them, else the typical size (scaled by the configured items or exchanges)."""
    sizes = dict(OUTPUT_TOKENS)
    sizes["inventory"] = OUTPUT_TOKENS["inventory"] * config.text.inventory_size
    sizes["small_talk"] = OUTPUT_TOKENS["small_talk"] * max(1, config.text.small_talk_exchanges)  # a session's
    sizes["filler"] = OUTPUT_TOKENS["small_talk"] * config.text.filler_exchanges
    sizes |= target_sizes(config, counts or per_persona_counts(config))  # counts: per persona, before re-asks
    return _measured(config, sizes, llm.cache.tokens_by_spec(llm.backend.provider, llm.backend.model))


def _measured(config: RunConfig, sizes: dict[str, float], measured: dict[str, tuple[int, float]]) -> dict[str, float]:
    """``sizes`` with each kind's mean in ``measured`` (spec -> (calls, mean)) where the cache holds
    ``MIN_MEASURED`` calls of it."""
    for kind, label in call_labels(config).items():
        rows = [(n, mean) for spec, (n, mean) in measured.items() if _labelled(spec, label)]
        calls = sum(n for n, _ in rows)
        if calls >= MIN_MEASURED:
            sizes[kind] = sum(n * mean for n, mean in rows) / calls
    return sizes


def _prompt_specs(config: RunConfig) -> dict[str, tuple]:
    """The prompt(s) each kind of call renders (the turn mode's beat calls: the user's message and the reply)."""
    turn = config.text.writing == "turn"
    return {"profile": (PROFILE,), "inventory": (INVENTORY,), "narration": (NARRATION,),
            "beat": (TURN_USER, TURN_ASSISTANT) if turn else (BEAT,),
            "small_talk": (TURN_USER, TURN_ASSISTANT) if turn else
            (SESSION,) if config.text.writing in ("session", "auto") else (SMALL_TALK,),
            "filler": (FILLER,), "query": (QUERY,), "reveal": (REVEAL,)}


def prompt_sizes(config: RunConfig, llm: LLM) -> dict[str, float]:
    """Prompt tokens per call of each kind: this model's mean in the cache once it holds ``MIN_MEASURED`` calls
    of the kind, else its template rendered with its sample context (texts + ``MESSAGE_OVERHEAD`` a message)."""
    exact = getattr(llm.backend, "prompt_tokens", None)  # the embedded model counts with its own tokenizer

    def tokens(messages) -> int:
        if exact is not None:
            return exact([m.model_dump() for m in messages])
        return sum(count_tokens(m.content) + MESSAGE_OVERHEAD for m in messages)

    def prompt(spec) -> tuple[float, float]:  # (tokens, weight): a reply's prompt holds a whole message, asked more
        context, reply = spec.sample_context(), spec is TURN_ASSISTANT
        grown = max(0, TURN_USER_TOKENS - count_tokens(context.message)) if reply else 0
        return tokens(llm.prompts.render(spec, context)) + grown, REPLIES_PER_MESSAGE if reply else 1.0

    sizes = {}
    for kind, specs in _prompt_specs(config).items():
        rows = [prompt(spec) for spec in specs]
        sizes[kind] = sum(n * w for n, w in rows) / sum(w for _, w in rows)
    return _measured(config, sizes, llm.cache.tokens_by_spec(llm.backend.provider, llm.backend.model, "input_tokens"))


def attempts_per_item(config: RunConfig, llm: LLM) -> dict[str, float]:
    """Model calls per planned item of each kind: a stage asks again with a new sample index when code
    rejects a reply (a beat that does not voice its fact, a query that fails a gate), up to its
    ``attempts``. Measured in this model's cache as calls per distinct first ask, once it holds
    ``MIN_MEASURED`` items of the kind; else the backend's typical figure (`TYPICAL_ATTEMPTS`), or 1.
    Never more than this run's own ``attempts``."""
    import json

    from pipeline.llm import first_ask

    labels = call_labels(config)
    rows: dict[str, list[str]] = {kind: [] for kind in labels}
    for spec, request in llm.cache.requests_by_spec(llm.backend.provider, llm.backend.model):
        for kind, label in labels.items():
            if _labelled(spec, label):
                rows[kind].append(request)
    factors = {}
    for kind, requests in rows.items():
        items = {json.dumps(first_ask(json.loads(r)), sort_keys=True) for r in requests}
        limit = config.queries.attempts if kind == "query" else \
            config.text.turn_attempts if config.text.writing == "turn" and kind in ("beat", "small_talk") else \
            config.text.attempts  # this run's own limit
        typical = TYPICAL_ATTEMPTS.get(llm.backend.provider, {}).get(kind, 1.0)
        factors[kind] = min(len(requests) / len(items) if len(items) >= MIN_MEASURED else typical, limit)
    return factors


def filler_calls(config: RunConfig, counts: dict[str, float], sizes: dict[str, float]) -> int:
    """Filler sessions the run will write: the configured pool, or more when the largest budget needs more
    filler than that pool holds (the run tops the pool up until it can fill every context)."""
    if config.filler.source == "sharegpt":
        return 0  # real conversations: no model call
    own = sizes["beat"] * counts["beat"] + sizes["small_talk"] * counts["small_talk"]
    return max(config.text.filler_pool_size, math.ceil(filler_need(config, [int(own)]) / max(sizes["filler"], 1.0)))


def _first_eta(config: RunConfig, llm: LLM, *, workers: int, calls: float, out: float, inp: int) -> float | None:
    """The ETA before this cache holds a burst of this model's work: the calls, as many at a time as the run
    keeps in flight, each as long as a measured burst at that width said; else the single probe's speed."""
    parallel = run_concurrency(config, llm, workers=workers)
    with llm.bounded(SETUP_CALL_S):
        per_call = burst_seconds_per_call(llm, parallel)
        if per_call:
            return calls * per_call / parallel
        probe = probe_speed(llm)
    return (out + inp / PROMPT_SPEEDUP) / (probe * parallel) if probe else None


def estimate_run(config: RunConfig, llm: LLM, *, workers: int) -> Estimate:
    """Sizes from the plan, tokens per call as measured on this model (else typical), time from its measured speed."""
    counts = per_persona_counts(config)
    items = dict(counts)  # the calls of a first ask each, before any is asked again
    for kind, factor in attempts_per_item(config, llm).items():
        if kind in counts:
            counts[kind] *= factor
    sizes = call_tokens(config, llm, items)
    n = config.n_personas
    filler = filler_calls(config, counts, sizes)
    calls = sum(v for k, v in counts.items() if k not in ("sessions", "beats", "exchanges")) * n + filler
    out = sum(sizes[k] * v for k, v in counts.items() if k in sizes) * n + filler * sizes["filler"]
    prompts = prompt_sizes(config, llm)
    inp = int(sum(prompts[k] * v for k, v in counts.items() if k in prompts) * n + filler * prompts["filler"])
    measure = getattr(llm.backend, "speeds", None)
    speed = recent_throughput(llm) if measure is None else None
    if measure is not None:  # a batching engine: its speeds at the widths this run decodes at, on this machine
        # (a burst of an earlier run tells the speed at that run's width: two personas decode ~4 sequences a
        # pass, 180 keep all 16 slots busy)
        eta = engine_eta(config, counts, sizes, measure(llm.settings.cache_path.parent), workers=workers,
                         prompt_tokens=inp)
        speed = out / eta if eta else None
    elif speed is not None:  # a real burst already paid for its prompts, queueing and concurrency
        eta = out / speed
    else:
        eta = _first_eta(config, llm, workers=workers, calls=calls, out=out, inp=inp)
        speed = out / eta if eta else None
    price = llm.settings.prices.get(llm.backend.model)
    cost = (inp * price.input_per_mtok + out * price.output_per_mtok) / 1e6 if price else None
    # the turn mode keeps a message and a reply per exchange; the others what their beat and session calls wrote
    own = int(sizes["exchange"] * items["exchanges"] if "exchange" in sizes else
              sizes["beat"] * counts["beat"] + sizes["small_talk"] * counts["small_talk"])
    return Estimate(personas=n, sessions=int(counts["sessions"] * n), llm_calls=int(calls), output_tokens=int(out),
                    input_tokens=inp, cost_usd=cost, tokens_per_s=speed, eta_s=eta, own_tokens_per_persona=own,
                    filler_share=filler_shares(config, own, counts["sessions"], items.get("exchanges")))


def target_sizes(config: RunConfig, counts: dict[str, float]) -> dict[str, float]:
    """Typical generated tokens of a beat call and of a session's ordinary exchanges under the profile's
    length targets (about 1.3 tokens a word, 40 tokens a user turn), before the cache has measured them."""
    text = config.text
    exchange = 40 + 1.3 * (text.assistant_words_min + text.assistant_words_max) / 2
    if text.writing == "turn":  # a call per turn: the user's message, or (more often: asked again) the reply
        reply = 1.3 * (text.assistant_words_min + text.assistant_words_max) / 2
        turn = (TURN_USER_TOKENS + REPLIES_PER_MESSAGE * reply) / (1 + REPLIES_PER_MESSAGE)
        return {"beat": turn, "small_talk": turn, "exchange": KEPT_USER_TOKENS + min(KEPT_REPLY_MAX, KEPT_REPLY_SHARE * reply)}
    beats_per_session = counts.get("beats", counts["beat"]) / max(counts["sessions"], 1)
    ordinary = max(text.small_talk_exchanges, text.session_exchanges - beats_per_session, 1)
    whole = ordinary + beats_per_session if text.writing in ("session", "auto") else ordinary
    return {"beat": max(OUTPUT_TOKENS["beat"], exchange), "small_talk": exchange * whole}


# A topic's own text varies around the mean; refuse only a budget that cannot hold half of a typical topic.
TOPIC_MARGIN = 0.5


def check_budgets(config: RunConfig, estimate: Estimate) -> None:
    """Refuse (UserError, before any call of the run) a budget whose persona share cannot hold one typical topic
    of a persona's own text: assembly would fail only after every call was made."""
    if not config.topics or not estimate.own_tokens_per_persona:
        return
    per_topic = estimate.own_tokens_per_persona / len(config.topics)
    smallest = min(config.assembly.budgets)
    share = config.assembly.max_persona_fraction
    if smallest * share < TOPIC_MARGIN * per_topic:
        raise UserError(f"assembly.budgets: a {smallest:,}-token context cannot hold one topic of a persona's own "
                        f"text (about {per_topic:,.0f} tokens a topic as planned, max_persona_fraction {share:g}); "
                        "raise the budget or shorten the sessions; nothing was asked")


def density_rows(estimate: Estimate) -> list[tuple[str, str]]:
    """The plan's lines on density and cost per persona: own tokens, filler share per budget, calls, tokens."""
    n = max(estimate.personas, 1)
    shares = ", ".join(f"{b:,}: {s:.0%}" for b, s in estimate.filler_share.items())
    return [("own tokens per persona", f"{estimate.own_tokens_per_persona:,}"),
            ("filler share per budget (own text first)", shares or "n/a"),
            ("calls per persona", f"{estimate.llm_calls / n:,.1f}"),
            ("tokens per persona (generated + prompt)", f"{(estimate.output_tokens + estimate.input_tokens) / n:,.0f}"),
            ("cost per persona", f"${estimate.cost_usd / n:,.4f}" if estimate.cost_usd is not None else "n/a")]
