"""Where a GPU run's fixed cost goes, on whatever adapter is present: one command for a lent GPU.

For a one-layer model, the built-in sample and ResNet-50 it prints the median of each phase of a replayed run
on gpu-compute, as ``Worker.stats()["run"]`` reports them: host encoding, the submission, the GPU's own span
(two timestamps around the run, where the adapter has timestamp queries), the wait for the outputs' map, and
copying the mapped bytes out; with the run's wall time and what the phases leave unexplained. Then it times
the waiting strategies wgpu-py offers for one small readback, side by side:

- ``poll-thread``: ``map_async("READ")`` and wait on the promise, which wgpu-py's poll thread resolves; wgpu-py
  submits an empty command buffer before such a map (a second submission per run);
- ``poll-thread, no extra submit``: the same without that submission (the engine's, ``map_read_async``);
- ``poll-loop``: ``map_async``, then poll the device without blocking until the promise resolves;
- ``poll-block``: ``map_async``, then one blocking ``wgpuDevicePoll`` (wait=True) before the promise;
- ``work-done``: ``queue.on_submitted_work_done_async`` waited for first, then the map.

    python tools/gpu_diagnose.py [--runs 30] [--models one-layer,sample,resnet50] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import wgsentis as ws
from wgsentis.backends.gpu.device import get_context, map_read_async
from wgsentis.cli import sample_model_path

PHASES = ("upload_ms", "encode_ms", "submit_ms", "map_request_ms", "gpu_ms", "wait_ms", "copy_out_ms")
HOST_PHASES = ("upload_ms", "encode_ms", "submit_ms", "map_request_ms", "wait_ms", "copy_out_ms")


def one_layer() -> tuple[ws.Model, dict[str, np.ndarray]]:
    """A single Relu over 1x3x224x224: the smallest run that still moves an image's worth of data."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "one_layer",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 224, 224])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    return ws.load_model(model, name="one_layer"), {"x": x}


def load(name: str) -> tuple[ws.Model, dict[str, np.ndarray]]:
    if name == "one-layer":
        return one_layer()
    if name == "sample":
        model = ws.load_model(sample_model_path(), name="sample")
        info = model.graph.inputs[0]
        shape = [d if isinstance(d, int) else 1 for d in info.shape]
        return model, {info.name: np.random.default_rng(0).random(shape, dtype=np.float32)}
    import zoo

    proto: onnx.ModelProto = zoo.load_proto(name)
    return ws.load_model(proto, name=name), zoo.input_feeds(name, proto)


def phases(name: str, runs: int) -> dict[str, float | None]:
    """Median of each phase over ``runs`` replays (GPU span from a separate run with two timestamps)."""
    model, feeds = load(name)
    samples: dict[str, list[float]] = {p: [] for p in (*PHASES, "wall_ms")}
    with ws.Worker(model, "gpu-compute") as worker:
        program = worker.program
        worker.run(feeds)  # records the plan
        worker.run(feeds)
        stamps = program.ctx.has_timestamps
        for _ in range(runs):
            program.set_timestamps(False)
            started = time.perf_counter()
            program.execute(feeds).wait()
            wall = (time.perf_counter() - started) * 1e3
            run = program.stats()["run"]
            for phase in HOST_PHASES:
                samples[phase].append(run[phase] or 0.0)
            samples["wall_ms"].append(wall)
            if stamps:
                program.set_timestamps("whole")
                program.execute(feeds).wait()
                gpu = program.stats()["run"]["gpu_ms"]
                if gpu is not None:
                    samples["gpu_ms"].append(gpu)
        program.set_timestamps(False)
    out: dict[str, float | None] = {p: statistics.median(v) if v else None for p, v in samples.items()}
    known = sum(out[p] or 0.0 for p in HOST_PHASES)
    out["unexplained_ms"] = max(0.0, (out["wall_ms"] or 0.0) - known)
    return out


def _staging_pair(ctx: Any, nbytes: int) -> tuple[Any, Any]:
    usage = ctx.wgpu.BufferUsage
    src = ctx.device.create_buffer_with_data(data=np.arange(nbytes // 4, dtype=np.float32),
                                             usage=usage.STORAGE | usage.COPY_SRC)
    dst = ctx.device.create_buffer(size=nbytes, usage=usage.MAP_READ | usage.COPY_DST)
    return src, dst


def _submit_copy(ctx: Any, src: Any, dst: Any) -> None:
    encoder = ctx.device.create_command_encoder()
    encoder.copy_buffer_to_buffer(src, 0, dst, 0, src.size)
    ctx.queue.submit([encoder.finish()])


def strategies(runs: int, nbytes: int = 4096) -> dict[str, float | str]:
    """Median milliseconds from submitting a copy of ``nbytes`` to holding its bytes, per waiting strategy."""
    ctx = get_context()
    device = ctx.device
    src, dst = _staging_pair(ctx, nbytes)

    def poll_thread() -> None:
        dst.map_async("READ").sync_wait()  # wgpu-py submits an empty command buffer before the map

    def poll_thread_nosync() -> None:
        map_read_async(dst).sync_wait()  # the engine's: no extra submission

    def poll_loop() -> None:
        promise = map_read_async(dst)
        while getattr(promise, "_state", "pending") == "pending":
            device._poll(False)  # wgpu-py's own non-blocking poll
        promise.sync_wait()

    def poll_block() -> None:
        promise = map_read_async(dst)
        device._poll_wait()  # one blocking wgpuDevicePoll
        promise.sync_wait()

    def work_done() -> None:
        ctx.queue.on_submitted_work_done_async().sync_wait()
        map_read_async(dst).sync_wait()

    ways: dict[str, Callable[[], None]] = {
        "poll-thread": poll_thread, "poll-thread, no extra submit": poll_thread_nosync, "poll-loop": poll_loop,
        "poll-block": poll_block, "work-done": work_done}
    times: dict[str, list[float]] = {k: [] for k in ways}
    failed: dict[str, str] = {}
    for _ in range(runs):
        for key, wait in ways.items():  # interleaved: machine drift hits every strategy alike
            if key in failed:
                continue
            _submit_copy(ctx, src, dst)
            started = time.perf_counter()
            try:
                wait()
            except Exception as exc:  # a strategy this wgpu-py lacks: say so, go on with the others
                failed[key] = f"{type(exc).__name__}: {exc}"[:120]
                ctx.wait_idle("the diagnostic copy")
                continue
            dst.read_mapped(copy=True)
            dst.unmap()
            times[key].append((time.perf_counter() - started) * 1e3)
    out: dict[str, float | str] = {k: statistics.median(v) for k, v in times.items() if v}
    out.update((key, f"not available in this wgpu-py: {why}") for key, why in failed.items())
    return out


def report(models: list[str], runs: int) -> str:
    ctx = get_context()
    info = ctx.info
    lines = [f"adapter: {info.name} ({info.backend}, {info.adapter_type}; driver {info.driver})",
             f"host: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
             f"timestamps: {'yes' if ctx.has_timestamps else 'no'}; medians of {runs} runs", "",
             "| model | wall ms | upload | encode | submit | map request | GPU span | map wait | copy out | rest |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in models:
        row = phases(name, runs)
        cells = [f"{row[k]:.3f}" if row[k] is not None else "n/a" for k in
                 ("wall_ms", *PHASES, "unexplained_ms")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    lines += ["", "| waiting strategy (4 KiB readback) | ms from submit to bytes |", "|---|---|"]
    for key, ms in strategies(runs * 2).items():
        lines.append(f"| {key} | {ms:.3f} |" if isinstance(ms, float) else f"| {key} | {ms} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--models", default="one-layer,sample,resnet50")
    parser.add_argument("--markdown", help="append the tables to this file")
    args = parser.parse_args(argv)
    text = report(args.models.split(","), args.runs)
    print()
    print(text)
    if args.markdown:
        with open(args.markdown, "a") as fh:
            fh.write("\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
