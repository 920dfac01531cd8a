"""Device ceilings: peak GFLOP/s and GB/s measured once per device with a matmul and a copy kernel.

Both are measured with the engine's own kernels on one-layer models (a square MatMul, and a Relu
over a large tensor, which reads and writes each element once), so a ceiling is what this engine
attains on that device, not a datasheet figure. Results are cached in-process and in
``~/.cache/wgsentis/ceilings.json`` keyed by backend, device and threads.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

CACHE_FILE = Path.home() / ".cache" / "wgsentis" / "ceilings.json"
MATMUL_N = 512  # 2 * 512^3 = 0.27 GFLOP per run
COPY_ELEMENTS = 4 * 1024 * 1024  # 16 MiB read + 16 MiB written
_memory: dict[str, dict[str, Any]] = {}


def _model(kind: str) -> onnx.ModelProto:
    if kind == "matmul":
        n = MATMUL_N
        w = np.random.default_rng(0).random((n, n), dtype=np.float32)
        node = helper.make_node("MatMul", ["x", "w"], ["y"], name="ceiling_matmul")
        graph = helper.make_graph([node], "ceiling_matmul",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
                                  [onnx.numpy_helper.from_array(w, "w")])
    else:
        node = helper.make_node("Relu", ["x"], ["y"], name="ceiling_copy")
        graph = helper.make_graph([node], "ceiling_copy",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [COPY_ELEMENTS])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [COPY_ELEMENTS])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def cache_key(backend: str, device: dict[str, Any], threads: int, spin_wait: bool = False) -> str:
    """The key a device's ceilings are cached under (on the cpu, per thread count and threading mode)."""
    if backend == "cpu":
        return f"cpu|{device.get('cpu', '')}|threads={threads}" + ("|spin" if spin_wait else "")
    return f"{backend}|{device.get('name', '')}|{device.get('driver', '')}|{device.get('backend', '')}"


def _load_cache() -> dict[str, Any]:
    try:
        return json.loads(CACHE_FILE.read_text())
    except (OSError, ValueError):
        return {}


def _save_cache(data: dict[str, Any]) -> None:
    try:
        CACHE_FILE.parent.mkdir(parents=True, exist_ok=True)
        tmp = CACHE_FILE.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(CACHE_FILE)
    except OSError:  # a read-only home: keep the in-process cache only
        pass


def _best_layer_seconds(backend: str, proto: onnx.ModelProto, threads: int, repeats: int,
                        spin_wait: bool = False) -> tuple[float, str]:
    """The fastest time of the model's only layer over ``repeats`` runs, and the timer used."""
    import wgsentis as ws
    from wgsentis.backends.cpu import GraphProgram

    model = ws.load_model(proto, name=proto.graph.name)
    info = model.inputs[0]
    feeds = {info.name: np.random.default_rng(1).random(tuple(int(d) for d in info.shape), dtype=np.float32)}
    if backend == "cpu":
        program = GraphProgram(model.graph, threads, branch_parallel=False, spin_wait=spin_wait)
        program.bind_blas()
        best = float("inf")
        for _ in range(repeats + 1):
            start = time.perf_counter()
            program.run(feeds)
            best = min(best, time.perf_counter() - start)
        program.close()
        return best, "host"
    with ws.Worker(model, backend, threads=threads) as worker:
        program = worker.program
        program.execute(feeds).wait()  # record the plan
        timer = "gpu-timestamps" if program.ctx.has_timestamps else "host"
        program.set_timestamps(program.ctx.has_timestamps)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            program.execute(feeds).wait()
            wall = time.perf_counter() - start
            gpu = sum(program.last_run.layer_gpu_ns.values()) / 1e9
            best = min(best, gpu if gpu > 0 else wall)
        return best, timer


def measure(backend: str, threads: int, repeats: int = 5, spin_wait: bool = False) -> dict[str, Any]:
    """Measure peak GFLOP/s (matmul) and GB/s (copy) on ``backend`` now, without caching."""
    n = MATMUL_N
    mm_s, timer = _best_layer_seconds(backend, _model("matmul"), threads, repeats, spin_wait)
    cp_s, _ = _best_layer_seconds(backend, _model("copy"), threads, repeats, spin_wait)
    flops = 2 * n ** 3
    moved = 2 * 4 * COPY_ELEMENTS
    return {"backend": backend, "peak_gflops_per_s": round(flops / mm_s / 1e9, 3),
            "peak_gb_per_s": round(moved / cp_s / 1e9, 3),
            "matmul": f"{n}x{n}x{n} float32 MatMul, best of {repeats}",
            "copy": f"{COPY_ELEMENTS} float32 elements read and written (Relu), best of {repeats}",
            "timer": timer, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}


def ceilings(backend: str, device: dict[str, Any], threads: int, *, refresh: bool = False,
             spin_wait: bool = False) -> dict[str, Any]:
    """The device's ceilings from the in-process cache, the file cache, or a fresh measurement."""
    key = cache_key(backend, device, threads, spin_wait)
    if not refresh and key in _memory:
        return {**_memory[key], "cached": True}
    data = _load_cache()
    if not refresh and isinstance(data.get(key), dict) and "peak_gflops_per_s" in data[key]:
        _memory[key] = data[key]
        return {**data[key], "cached": True}
    value = measure(backend, threads, spin_wait=spin_wait)
    _memory[key] = value
    data = _load_cache()
    data[key] = value
    _save_cache(data)
    return {**value, "cached": False}
