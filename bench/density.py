"""Density benchmark: what the persona's own history costs to write (default profile, fake backend).

Reports generated tokens per own session token (every stage's output, re-asks included, over the tokens
of the persona's own sessions; target at most 1.3), calls per persona, and the median turns of an own session.
The fake backend honours the profile's length targets, so these are counts of work, not timings.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.config import load_config  # noqa: E402
from pipeline.llm import LLM  # noqa: E402
from pipeline.run.persona_text import build_persona_text  # noqa: E402
from pipeline.s1_personas.sample_personas import sample_personas  # noqa: E402
from pipeline.s4_queries.generate_queries import generate_queries  # noqa: E402
from schemas.llm import LLMSettings  # noqa: E402

N = int(os.environ.get("BENCH_DENSITY_N", "2"))


def run() -> list[dict]:
    """Text stages and queries for N default-profile personas on the fake backend, with a fresh cache."""
    config = load_config("default", n_personas=N)
    with tempfile.TemporaryDirectory() as tmp:
        llm = LLM(LLMSettings(llm="fake", cache_path=Path(tmp) / "llm.sqlite"))
        own, turns = 0, []
        for seed in sample_personas(N, run_seed=config.seed, settings=config.personas):
            text = build_persona_text(seed, config=config, llm=llm)
            generate_queries(text.persona, text.timeline, text.sessions, llm=llm, config=config)
            own += sum(s.session.n_tokens for s in text.sessions)
            turns += [s.session.n_turns for s in text.sessions]
        total = llm.usage_summary().total
    return [
        {"figure": "generated tokens per own session token", "value": total.output_tokens / own, "unit": "ratio",
         "target": 1.3, "ratio": total.output_tokens / own / 1.3},
        {"figure": "model calls per persona", "value": total.calls / N, "unit": "calls"},
        {"figure": "own tokens per persona", "value": own / N, "unit": "tokens"},
        {"figure": "median turns of an own session", "value": float(median(turns)), "unit": "turns", "target": 10},
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
