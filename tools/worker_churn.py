"""Workers made, run and closed in turn must give their memory back: the process's resident size after each
closed worker, for a reference model on a backend (on lavapipe device memory is host memory, so it shows).

    python tools/worker_churn.py [--model vgg19] [--backend gpu-compute] [--workers 6]

Prints the resident size after each worker and the growth after the first; the target is at most 150 MB for
six VGG-19 workers on gpu-compute (before programs owned their caches: +7.6 GB).
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import zoo
from soak import rss_bytes

import wgsentis as ws


def churn(name: str, backend: str, workers: int) -> list[int]:
    """Resident bytes after each of ``workers`` workers of model ``name`` was loaded, made, run twice and closed
    (each worker loads the model anew, as separate users of a process would: its weights are new arrays)."""
    proto = zoo.load_proto(name)
    feeds = zoo.input_feeds(name, proto)
    sizes = []
    for _ in range(workers):
        model = ws.load_model(proto)
        with ws.Worker(model, backend) as worker:
            worker.run(feeds)
            worker.run(feeds)
        del model
        gc.collect()
        sizes.append(rss_bytes())
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vgg19")
    parser.add_argument("--backend", default="gpu-compute")
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--limit-mb", type=float, default=150.0)
    args = parser.parse_args(argv)
    sizes = churn(args.model, args.backend, args.workers)
    for k, size in enumerate(sizes, start=1):
        print(f"after worker {k}: {size / 1e6:9.1f} MB resident")
    growth = (sizes[-1] - sizes[0]) / 1e6
    print(f"growth after the first: {growth:+.1f} MB (limit {args.limit_mb:g} MB)")
    return 0 if growth <= args.limit_mb else 1


if __name__ == "__main__":
    sys.exit(main())
