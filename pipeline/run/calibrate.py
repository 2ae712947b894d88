"""Set the taxonomy's event weights so that no (life event -> change) pair reaches more than a few percent of a run.

A maintainer's tool, run after the taxonomy's events change (``make calibrate-weights``): it plans the default
profile at N=180 on calibration seeds (not the seeds the acceptance figures are read on), counts how many personas
each (event, item, stance) pair reaches, and scales down the weight of each event whose busiest pair is over the
target (an event of weight w < 1 is open to a persona with chance w: pipeline/s2_timeline/simulate_timeline.py),
and leaves every other weight as it was. Then it writes the weights into taxonomy.yaml, one
line each, and repeats. Nothing else in the file changes.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

from pipeline.catalog import DATA_DIR

WEIGHT = re.compile(r"(\{summary: \"(?P<summary>[^\"]+)\")(?P<weight>, weight: [0-9.]+)?")


def pair_counts(seeds: list[int], n: int) -> Counter[str]:
    """For each life event, the mean over ``seeds`` of how many personas its busiest (item, stance) change reaches."""
    from pipeline.config import load_config
    from pipeline.run.plan import build_plan

    busiest: Counter[str] = Counter()
    for seed in seeds:
        config = load_config("default", n_personas=n, seed=seed)
        pairs: Counter[tuple[str, str, str]] = Counter()
        for timeline in build_plan(config).timelines:
            by_id = {e.event_id: e for e in timeline.events}
            pairs.update({(by_id[by_id[v.caused_by_event_id].cause_event_id].summary, v.item, v.stance)
                          for v in timeline.preferences if v.caused_by_event_id})
        top: Counter[str] = Counter()
        for (summary, _, _), count in pairs.items():
            top[summary] = max(top[summary], count)
        for summary, count in top.items():
            busiest[summary] += count / len(seeds)
    return busiest


def new_weights(weights: dict[str, float], busiest: Counter[str], target: float) -> dict[str, float]:
    """Weights scaled by target / busiest where over the target, the rest as they were (a weight is only lowered:
    other profiles' topics and the major events' spacing were tuned on the same weights)."""
    return {summary: max(0.02, weight * target / busiest[summary]) if busiest.get(summary, 0.0) > target else weight
            for summary, weight in weights.items()}


def write_weights(text: str, weights: dict[str, float]) -> str:
    """``text`` (taxonomy.yaml) with each event line's weight set to ``weights[summary]`` (left out at 1)."""
    def swap(match: re.Match) -> str:
        summary = match.group("summary")
        if summary not in weights:
            return match.group(0)
        weight = round(weights[summary], 3)
        return match.group(1) + ("" if weight >= 1 else f", weight: {weight:g}")
    return WEIGHT.sub(swap, text)


def read_weights(text: str) -> dict[str, float]:
    return {m.group("summary"): float(m.group("weight").split(":")[1]) if m.group("weight") else 1.0
            for m in WEIGHT.finditer(text)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3", help="calibration seeds, comma-separated")
    parser.add_argument("--n", type=int, default=180)
    parser.add_argument("--target", type=float, default=0.022, help="busiest pair's share of a run to aim under")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--taxonomy", type=Path, default=DATA_DIR / "taxonomy.yaml")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    from pipeline.catalog import load_taxonomy

    for round_ in range(1, args.rounds + 1):
        text = args.taxonomy.read_text()
        load_taxonomy.cache_clear()
        busiest = pair_counts(seeds, args.n)
        over = sum(count > args.target * args.n for count in busiest.values())
        top = max(busiest.values(), default=0.0)
        print(f"round {round_}: busiest pair {top:.1f} personas ({top / args.n:.1%}), {over} events over the target")
        if not over:
            break
        args.taxonomy.write_text(write_weights(text, new_weights(read_weights(text), busiest, args.target * args.n)))
    load_taxonomy.cache_clear()


if __name__ == "__main__":
    main()
