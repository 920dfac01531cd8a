"""Benchmark: greedy generation with a GPT-2-style decoder (tools/decoders.py), per token, wgsentis against ONNX
Runtime (CPU) in the same process (``python tools/bench.py --generate``).

Each round generates ``--steps`` tokens with ORT, then with wgsentis on each backend, alternating, so machine noise
hits all alike. Per backend it prints the median ms per token:

- ``host``: outputs read back every step and the cache fed back as arrays (what a plain ``run`` loop does);
- ``device``: ``run(..., on_device=True)``, the cache fed back as device tensors, only the logits read, on a Worker
  of its own, so that every step is a cache length its plans have not seen (a new size), each prepared while the
  step before ran on the GPU (``Worker(prepare_ahead=True)``, the default; backends/gpu/lookahead.py);
- ``new``: as ``device`` with ``prepare_ahead=False``: each new size traced before its step's GPU work, what a size
  nothing foresaw costs;
- ``argmax``: as ``device``, and the token picked on the device by a second worker (one ArgMax over the logits
  left there, fed the logits device tensor): only the token crosses, not the vocabulary's logits;
- ``replay``: one step's feeds run again and again (the same shape: the plan is replayed, nothing re-derived),
  the floor a new size is measured against;

their ratios to ORT and of ``device`` and ``new`` to ``replay``, and the bytes that crossed host<->device per token
(the run's uploads and downloads, plus the logits read on demand in ``device`` mode). Tokens must equal ORT's.

    python tools/bench.py --generate [--backends cpu,gpu-compute,gpu-pixel] [--steps 48] [--rounds 3]
                                     [--vocab 50257] [--markdown BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import decoders

import wgsentis as ws

PROMPT = [1, 2, 3]
REPLAY_RUNS = 10


def _ort_session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(None, feeds), strict=True))


def _generate(run: Any, config: decoders.DecoderConfig, steps: int) -> decoders.Generation:
    return decoders.generate(run, layers=config.layers, heads=config.heads, head_size=config.head_size, steps=steps,
                             prompt=PROMPT)


def _per_token(generation: decoders.Generation) -> float:
    return statistics.median(generation.seconds[1:])  # the prompt step apart


def _token_picker(vocab: int) -> Any:
    """A model of one ArgMax over the last position's logits (1, S, vocab) -> token (1, 1) int64: run on the logits
    a decode step left on the device, it reads 8 bytes to the host instead of the whole vocabulary's logits (201 KB
    a token for GPT-2's 50257)."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Slice", ["logits", "minus_one", "big", "one"], ["last"]),
             helper.make_node("ArgMax", ["last"], ["token"], axis=-1, keepdims=0)]
    graph = helper.make_graph(
        nodes, "token_picker", [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "s", vocab])],
        [helper.make_tensor_value_info("token", TensorProto.INT64, [1, 1])],
        [helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1]),
         helper.make_tensor("big", TensorProto.INT64, [1], [1 << 62]),
         helper.make_tensor("one", TensorProto.INT64, [1], [1])])
    return ws.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _replay_seconds(worker: ws.Worker, config: decoders.DecoderConfig, past_len: int) -> float:
    """Median seconds of one decode step at a fixed cache length, replayed."""
    rng = np.random.default_rng(0)
    feeds: dict[str, Any] = {"input_ids": np.array([[7]], np.int64),
                             "attention_mask": np.ones((1, past_len + 1), np.int64)}
    for name in decoders.past_names(config.layers):
        feeds[name] = rng.standard_normal((1, config.heads, past_len, config.head_size), dtype=np.float32)
    worker.run(feeds)
    times = []
    for _ in range(REPLAY_RUNS):
        started = time.perf_counter()
        worker.run(feeds)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _device_generate(model: ws.Model, backend: str, threads: int, config: decoders.DecoderConfig, steps: int,
                     prepare_ahead: bool, sink: list[int]) -> tuple[decoders.Generation, dict[str, Any]]:
    """Generation on a fresh Worker with the cache kept on the device and the logits read on demand (their bytes
    and each run's transfers into ``sink``); the generation and the worker's last stats."""
    worker = ws.Worker(model, backend, threads=threads, prepare_ahead=prepare_ahead)

    def device_run(feeds: dict[str, Any]) -> Any:
        outputs = worker.run(feeds, on_device=True)
        stats = worker.stats()
        logits = outputs["logits"]
        read = logits.dtype.itemsize * int(np.prod(logits.shape)) if logits.on_device else 0  # read on demand
        sink.append(stats["upload_bytes"] + stats["download_bytes"] + read)
        return outputs

    try:
        return _generate(device_run, config, steps), worker.stats()
    finally:
        worker.close()


def bench(backends: list[str], steps: int, rounds: int, config: decoders.DecoderConfig, threads: int) -> list[dict]:
    path = decoders.export_gpt2(config=config)
    ort_run = _ort_session(path, threads)
    model = ws.load_model(str(path))
    workers = {b: ws.Worker(model, b, threads=threads) for b in backends}
    picker_model = _token_picker(config.vocab)
    pickers = {b: ws.Worker(picker_model, b, threads=threads) for b in backends}
    results: dict[str, dict[str, list[float]]] = {b: {"host": [], "device": [], "new": [], "argmax": [], "replay": [],
                                                      "ort": []} for b in backends}
    crossed: dict[str, dict[str, float]] = {}
    same: dict[str, bool] = {}
    new_sizes: dict[str, int] = {}  # plans device mode's fresh worker recorded for a size-only change
    resized: dict[str, int] = {}  # of those, the plans made from the structure's base trace (backends/gpu/resize.py)
    prepared: dict[str, int] = {}  # steps that replayed a plan prepared ahead (backends/gpu/lookahead.py)
    try:
        for _ in range(rounds):
            for backend, worker in workers.items():
                reference = _generate(ort_run, config, steps)
                results[backend]["ort"].append(_per_token(reference))
                host_bytes: list[int] = []

                def host_run(feeds: dict[str, Any], worker: ws.Worker = worker, sink: list[int] = host_bytes) -> Any:
                    outputs = worker.run(feeds)
                    stats = worker.stats()
                    sink.append(stats["upload_bytes"] + stats["download_bytes"])
                    return outputs

                host = _generate(host_run, config, steps)
                results[backend]["host"].append(_per_token(host))
                device_bytes: list[int] = []
                # A Worker of its own, so that every step's cache length is a size its program has not seen: the
                # host mode's worker has recorded plans for these lengths already, and device mode would replay
                # them instead of paying for a new size, which is what it is measured against the replay for.
                # ``device`` prepares each next size while the GPU runs a step (Worker prepare_ahead, the default);
                # ``new`` does not: each step's new size is traced before its GPU work, what an unforeseen size
                # costs.
                device, stats = _device_generate(model, backend, threads, config, steps, True, device_bytes)
                new_sizes[backend] = stats.get("plans_recorded_for_new_sizes", 0)
                resized[backend] = stats.get("plans_resized", 0)
                prepared[backend] = stats.get("prepared_plans_replayed", 0)
                results[backend]["device"].append(_per_token(device))
                new, _ = _device_generate(model, backend, threads, config, steps, False, [])
                results[backend]["new"].append(_per_token(new))
                argmax_bytes: list[int] = []

                def argmax_run(feeds: dict[str, Any], worker: ws.Worker = worker, picker: ws.Worker = pickers[backend],
                               sink: list[int] = argmax_bytes) -> Any:
                    # The token picked on the device from the logits left there; the loop gets a one-hot row
                    # (made on the host, nothing read) whose argmax is that token.
                    outputs = worker.run(feeds, on_device=True)
                    stats = worker.stats()
                    token = int(np.asarray(picker.run({"logits": outputs["logits"]})["token"]).reshape(-1)[0])
                    picked = picker.stats()
                    sink.append(stats["upload_bytes"] + stats["download_bytes"] + picked["upload_bytes"]
                                + picked["download_bytes"])
                    one_hot = np.zeros((1, 1, config.vocab), np.float32)
                    one_hot[0, 0, token] = 1.0
                    return {**outputs, "logits": one_hot}

                argmax = _generate(argmax_run, config, steps)
                results[backend]["argmax"].append(_per_token(argmax))
                results[backend]["replay"].append(_replay_seconds(worker, config, len(PROMPT) + steps // 2))
                same[backend] = (same.get(backend, True)
                                 and host.tokens == reference.tokens == device.tokens == argmax.tokens == new.tokens)
                crossed[backend] = {"host": statistics.median(host_bytes[1:]),
                                    "device": statistics.median(device_bytes[1:]),
                                    "argmax": statistics.median(argmax_bytes[1:])}
    finally:
        for worker in [*workers.values(), *pickers.values()]:
            worker.close()
    rows = []
    for backend in backends:
        r = {k: min(v) * 1e3 for k, v in results[backend].items()}  # the quietest round of each
        rows.append({"backend": backend, "ort_ms": r["ort"], "host_ms": r["host"], "device_ms": r["device"],
                     "replay_ms": r["replay"], "host_ratio": r["host"] / r["ort"],
                     "device_ratio": r["device"] / r["ort"],
                     "device_vs_replay": r["device"] / r["replay"], "new_ms": r["new"],
                     "new_vs_replay": r["new"] / r["replay"], "host_bytes": crossed[backend]["host"],
                     "device_bytes": crossed[backend]["device"], "argmax_ms": r["argmax"],
                     "argmax_ratio": r["argmax"] / r["ort"], "argmax_bytes": crossed[backend]["argmax"],
                     "same_tokens": same[backend], "new_size_plans": new_sizes.get(backend, 0),
                     "resized_plans": resized.get(backend, 0), "prepared_plans": prepared.get(backend, 0)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="cpu,gpu-compute,gpu-pixel")
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=50257, help="GPT-2's own by default")
    parser.add_argument("--markdown", help="append the table to this Markdown file")
    args = parser.parse_args(argv)
    config = decoders.DecoderConfig(vocab=args.vocab)
    backends = args.backends.split(",")
    print(f"GPT-2-style decoder {config.layers}x{config.width}, vocab {config.vocab}, {args.steps} tokens after a "
          f"{len(PROMPT)}-token prompt, {args.rounds} rounds (the quietest), threads {args.threads}")
    rows = bench(backends, args.steps, args.rounds, config, args.threads)
    header = (f"{'backend':<12} {'ORT ms':>7} {'host ms':>8} {'x ORT':>6} {'device ms':>9} {'x ORT':>6} "
              f"{'replay ms':>9} {'dev/replay':>10} {'new ms':>7} {'new/replay':>10} {'argmax ms':>9} {'x ORT':>6} "
              f"{'B/token host':>12} "
              f"{'B/token dev':>11} {'B/token argmax':>14} {'tokens':>7}")
    print(header)
    for r in rows:
        print(f"{r['backend']:<12} {r['ort_ms']:>7.2f} {r['host_ms']:>8.2f} {r['host_ratio']:>6.2f} "
              f"{r['device_ms']:>9.2f} {r['device_ratio']:>6.2f} {r['replay_ms']:>9.2f} "
              f"{r['device_vs_replay']:>10.2f} {r['new_ms']:>7.2f} {r['new_vs_replay']:>10.2f} "
              f"{r['argmax_ms']:>9.2f} {r['argmax_ratio']:>6.2f} "
              f"{r['host_bytes']:>12,.0f} {r['device_bytes']:>11,.0f} {r['argmax_bytes']:>14,.0f} "
              f"{'same' if r['same_tokens'] else 'DIFFER':>7}")
    for r in rows:
        if r["new_size_plans"]:
            print(f"{r['backend']}: device mode recorded {r['new_size_plans']} plans for new sizes (every step a new "
                  f"cache length; {r['resized_plans']} of them planned from a base trace; {r['prepared_plans']} steps "
                  "replayed a plan prepared ahead while the step before ran): dev/replay is a step's cost with the "
                  "next size prepared ahead, new/replay a new size's traced before its GPU work, against a replay")
    if args.markdown:
        lines = [f"\n## Generation per token, GPT-2-style {config.layers}x{config.width}, vocab {config.vocab} "
                 f"({time.strftime('%Y-%m-%d')})\n",
                 f"Command: `python tools/bench.py --generate --backends {args.backends} --steps {args.steps} "
                 f"--rounds {args.rounds} --vocab {args.vocab}`\n",
                 "| backend | ORT ms | host ms | x ORT | device ms | x ORT | replay ms | device / replay "
                 "| new ms | new / replay | argmax ms | x ORT | bytes/token host | bytes/token device "
                 "| bytes/token argmax | tokens |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        lines += [f"| {r['backend']} | {r['ort_ms']:.2f} | {r['host_ms']:.2f} | {r['host_ratio']:.2f} "
                  f"| {r['device_ms']:.2f} | {r['device_ratio']:.2f} | {r['replay_ms']:.2f} "
                  f"| {r['device_vs_replay']:.2f} | {r['new_ms']:.2f} | {r['new_vs_replay']:.2f} "
                  f"| {r['argmax_ms']:.2f} | {r['argmax_ratio']:.2f} "
                  f"| {r['host_bytes']:,.0f} | {r['device_bytes']:,.0f} | {r['argmax_bytes']:,.0f} "
                  f"| {'same as ORT' if r['same_tokens'] else 'DIFFER'} |" for r in rows]
        with open(args.markdown, "a") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0 if all(r["same_tokens"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
