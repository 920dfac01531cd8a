"""Device memory of each reference model's GPU plan: the intermediates' arenas and scratch textures against the
largest live set (live tensors plus the layer's own scratch at any step), as ``Worker.stats()`` reports them.

    python tools/memory_plan.py [--models a,b] [--backend gpu-compute]

Prints one row per model and the worst ratio; the planner's target is at most 1.5x on every model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import zoo

import wgsentis as ws


def measure(name: str, backend: str) -> dict:
    proto = zoo.load_proto(name)
    model = ws.load_model(proto)
    feeds = zoo.input_feeds(name, proto)
    with ws.Worker(model, backend) as worker:
        worker.run(feeds)
        stats = worker.stats()
    bound = stats["intermediate_lower_bound_bytes"]
    return {"model": name, "intermediate": stats["intermediate_bytes"], "bound": bound,
            "ratio": stats["intermediate_bytes"] / bound if bound else 0.0, "weights": stats["weight_bytes"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo.ALL_MODELS))
    parser.add_argument("--backend", default="gpu-compute")
    args = parser.parse_args()
    print(f"{'model':24} {'intermediate MB':>16} {'live-set MB':>12} {'ratio':>6} {'weights MB':>11}")
    worst = 0.0
    for name in args.models.split(","):
        row = measure(name, args.backend)
        worst = max(worst, row["ratio"])
        print(f"{name:24} {row['intermediate'] / 1e6:16.2f} {row['bound'] / 1e6:12.2f} {row['ratio']:6.2f} "
              f"{row['weights'] / 1e6:11.1f}", flush=True)
    print(f"worst ratio {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
