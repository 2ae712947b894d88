"""Lower the taxonomy's event weights so that no (life event -> change) pair reaches more than a few percent of a run.

A maintainer's tool, run after the taxonomy's events change (``make calibrate-weights``): it plans the default
profile at N=180 on calibration seeds (not the seeds the acceptance figures are read on), counts how many personas
each (event, item, stance) pair reaches, and scales down the weight of each event whose busiest pair is over the
target (an event of weight w < 1 is open to a persona with chance w, drawn once, and weighs w in the order
candidates are tried: pipeline/s2_timeline/simulate_timeline.py). Every other weight is left as it was: weights
are only lowered, so weights lowered under an earlier simulator stay low until someone raises them by hand. It
writes the weights into taxonomy.yaml (one line each, nothing else changes), repeats, and measures once more after
the last write; it exits 1 if an event is still over the target.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter

from pipeline.catalog import DATA_DIR

TAXONOMY = DATA_DIR / "taxonomy.yaml"
WEIGHT = re.compile(r"(\{summary: \"(?P<summary>[^\"]+)\")(?P<weight>, weight: [0-9.]+)?")
FLOOR = 0.02  # the lowest weight it sets: an event this rare is open to one persona in fifty


def busiest_pairs(seeds: list[int], n: int) -> Counter[str]:
    """For each life event, the mean over ``seeds`` of how many personas its busiest (item, stance) change reaches."""
    from pipeline.config import load_config
    from pipeline.run.plan import build_plan, change_pairs

    busiest: Counter[str] = Counter()
    for seed in seeds:
        top: Counter[str] = Counter()
        for (summary, _, _), count in change_pairs(build_plan(load_config("default", n_personas=n, seed=seed)).timelines).items():
            top[summary] = max(top[summary], count)
        for summary, count in top.items():
            busiest[summary] += count / len(seeds)
    return busiest


def new_weights(weights: dict[str, float], busiest: Counter[str], target: float) -> dict[str, float]:
    """Weights scaled by target / busiest where over the target (never below FLOOR, never raised), the rest as
    they were."""
    return {summary: min(weight, max(FLOOR, weight * target / busiest[summary]))
            if busiest.get(summary, 0.0) > target else weight for summary, weight in weights.items()}


def write_weights(text: str, weights: dict[str, float]) -> str:
    """``text`` (taxonomy.yaml) with the weight of each event line named in ``weights`` set where it changed (a
    weight of 1 is the default and left out)."""
    def swap(match: re.Match) -> str:
        summary = match.group("summary")
        old = float(match.group("weight").split(":")[1]) if match.group("weight") else 1.0
        if summary not in weights or round(weights[summary], 3) == round(old, 3):
            return match.group(0)
        weight = round(weights[summary], 3)
        return match.group(1) + ("" if weight == 1 else f", weight: {weight:g}")
    return WEIGHT.sub(swap, text)


def read_weights(text: str) -> dict[str, float]:
    return {m.group("summary"): float(m.group("weight").split(":")[1]) if m.group("weight") else 1.0
            for m in WEIGHT.finditer(text)}


def over_target(busiest: Counter[str], weights: dict[str, float], target: float) -> list[str]:
    """Events still over the target that can go lower (those at FLOOR cannot)."""
    return [s for s, count in busiest.items() if count > target and weights.get(s, 1.0) > FLOOR]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3", help="calibration seeds, comma-separated")
    parser.add_argument("--n", type=int, default=180)
    parser.add_argument("--target", type=float, default=0.022, help="busiest pair's share of a run to aim under")
    parser.add_argument("--rounds", type=int, default=3, help="rounds that may lower weights")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    from pipeline.catalog import load_taxonomy
    from pipeline.s2_timeline.events import forget_indexes

    target = args.target * args.n
    for round_ in range(args.rounds + 1):
        load_taxonomy.cache_clear()
        forget_indexes()
        text = TAXONOMY.read_text()
        weights = read_weights(text)
        if set(weights) != set(load_taxonomy().event_specs()):
            print(f"{TAXONOMY}: an event line this tool cannot read (its summary is not the first field, or it "
                  "holds a quote); nothing written", file=sys.stderr)
            return 2
        busiest = busiest_pairs(seeds, args.n)
        over = over_target(busiest, weights, target)
        top = max(busiest.values(), default=0.0)
        print(f"{'measured' if round_ == args.rounds else f'round {round_ + 1}'}: busiest pair {top:.1f} personas "
              f"({top / args.n:.1%}), {len(over)} events over the target")
        if not over or round_ == args.rounds:
            return 1 if over else 0
        tmp = TAXONOMY.with_suffix(".yaml.tmp")
        tmp.write_text(write_weights(text, new_weights(weights, busiest, target)))
        os.replace(tmp, TAXONOMY)
    return 0


if __name__ == "__main__":
    sys.exit(main())
