"""Run every benchmark and write one table to bench/results.md (`make bench`).

Each module in BENCHMARKS exposes ``run() -> list[dict]`` with keys figure, value, unit, target, ratio.
"""

from __future__ import annotations

import importlib
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
BENCHMARKS = ["llm_gateway", "engine", "assembly", "flow", "resume", "eta", "density", "scaleout"]


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return "" if value is None else str(value)


def main(names: list[str]) -> int:
    rows, failed = [], []
    for name in names:
        if not (HERE / f"{name}.py").exists():
            continue
        started = time.perf_counter()
        try:
            module = importlib.import_module(f"bench.{name}")
            for row in module.run():
                rows.append({"bench": name, **row})
        except Exception as exc:  # a broken benchmark is reported, the others still run
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
        print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    lines = [
        "# Benchmarks",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"Python {platform.python_version()}; ratios are measured in this one run.",
        "",
        "| bench | figure | value | unit | target | ratio |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['bench']} | {r['figure']} | {_fmt(r.get('value'))} | {r.get('unit', '')} | "
        f"{_fmt(r.get('target'))} | {_fmt(r.get('ratio'))} |"
        for r in rows
    ]
    if failed:
        lines += ["", "Failed:", *[f"- {f}" for f in failed]]
    (HERE / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or BENCHMARKS))
