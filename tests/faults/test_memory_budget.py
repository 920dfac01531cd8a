"""Resource bombs are refused before memory is used: ``Worker(memory_limit=...)``.

Each bomb is a tiny model (a few hundred bytes) whose one amplifying layer, named 'bomb', would allocate
gigabytes to petabytes: Resize by 2**27, Tile/Expand/ConstantOfShape/Range to petabytes, broadcasting
arithmetic and products of two vectors, a DFT of 2**33 points, a Loop or Scan whose outputs grow every
iteration... The run must raise ResourceLimitError naming the layer, its op, the shape and the bytes,
with the process's peak memory (VmHWM) grown by less than 200 MB. The bombs run in a child process
per backend with a hard address-space cap (RLIMIT_AS), so a regression fails these tests instead of
exhausting the machine. The same models at a small size run under the limit, and there the budget's
predicted bytes equal what the kernel returned.
"""

from __future__ import annotations

import contextlib
import json
import math
import resource
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from helpers import BACKENDS, child_results, requires_gpu
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import wgsentis as ws
from wgsentis import budget
from wgsentis.dtypes import NUMPY_TO_ONNX
from wgsentis.errors import LayerError, ResourceLimitError
from wgsentis.model import Layer
from wgsentis.run_control import RunControl, default_memory_limit


LIMIT = 128 << 20  # also bounds what a Loop holds before it is stopped: well under MAX_GROWTH
MAX_GROWTH = 200 << 20  # what the process's peak memory may grow by while a bomb is refused
# The child's address-space cap: above what a gpu-compute worker maps on lavapipe (~1.5 GiB measured, most
# of it reserved, not resident) and far below what any bomb asks for.
ADDRESS_SPACE_CAP = 4 << 30

# -- the bombs ----------------------------------------------------------------------------------------
# A case builds a model at size ``n`` (small: runs under the limit; big: a bomb) and returns the model,
# its feeds, and the shape and bytes per element of the 'bomb' layer's output.
Case = tuple[onnx.ModelProto, dict[str, np.ndarray], tuple[int, ...] | None, int]


def one_node(op: str, feeds: dict[str, np.ndarray], inits: dict[str, np.ndarray], inputs: list[str],
             opset: int = 18, domain: str = "", **attrs: Any) -> onnx.ModelProto:
    """A model whose layer 'bomb' applies ``op`` to ``inputs`` (graph inputs ``feeds``, initializers
    ``inits``, "" for an omitted optional input); its one output 'y' is the graph output."""
    node = h.make_node(op, inputs, ["y"], name="bomb", domain=domain, **attrs)
    graph = h.make_graph(
        [node], "bomb_graph",
        [h.make_tensor_value_info(k, NUMPY_TO_ONNX[v.dtype], v.shape) for k, v in feeds.items()],
        [h.make_tensor_value_info("y", T.UNDEFINED, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    opsets = [h.make_opsetid("", opset)] + ([h.make_opsetid(domain, 1)] if domain else [])
    model = h.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).random(shape, dtype=np.float32)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _resize(n: int, opset: int, by: str) -> Case:
    x = f32(1, 1, 4, 4)
    if by == "sizes":
        model = one_node("Resize", {"X": x}, {"sizes": i64(1, 1, n, n)}, ["X", "", "", "sizes"], opset=opset)
        return model, {"X": x}, (1, 1, n, n), 4
    scales = {"scales": np.array([1, 1, n, n], np.float32)}
    names = ["X", "scales"] if opset == 10 else ["X", "", "scales"]
    return one_node("Resize", {"X": x}, scales, names, opset=opset), {"X": x}, (1, 1, 4 * n, 4 * n), 4


def _upsample(n: int, opset: int) -> Case:
    x = f32(1, 1, 4, 4)
    if opset == 7:
        model = one_node("Upsample", {"X": x}, {}, ["X"], opset=7, scales=[1.0, 1.0, float(n), float(n)])
    else:
        model = one_node("Upsample", {"X": x}, {"s": np.array([1, 1, n, n], np.float32)}, ["X", "s"], opset=9)
    return model, {"X": x}, (1, 1, 4 * n, 4 * n), 4


def _constant_of_shape_fed(n: int) -> Case:
    shape = i64(n, n)
    return one_node("ConstantOfShape", {"shape": shape}, {}, ["shape"]), {"shape": shape}, (n, n), 4


def _folded(op: str, inits: dict[str, np.ndarray], inputs: list[str], follow: str = "Neg",
            **attrs: Any) -> onnx.ModelProto:
    """``op`` on initializers only (what constant folding evaluates at load), then y = ``follow``(bomb)."""
    binary = follow == "Add"  # y = bomb + x, x a graph input
    graph = h.make_graph(
        [h.make_node(op, inputs, ["b"], name="bomb", **attrs),
         h.make_node(follow, ["b", "x"] if binary else ["b"], ["y"], name="follow")],
        "folded", [h.make_tensor_value_info("x", T.DOUBLE, [1])] if binary else [],
        [h.make_tensor_value_info("y", T.DOUBLE, None)], [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def _constant_of_shape_initializer(n: int) -> Case:
    value = numpy_helper.from_array(np.array([1.5], np.float64), "value")
    return _folded("ConstantOfShape", {"shape": i64(n)}, ["shape"], value=value), {}, (n,), 8


def _range_float(n: int) -> Case:
    inits = {"start": np.array(0.0), "limit": np.array(float(n)), "delta": np.array(1.0)}
    return _folded("Range", inits, ["start", "limit", "delta"]), {}, (n,), 8


def _range_int(n: int) -> Case:
    feeds = {"start": np.array(0, np.int64), "limit": np.array(n, np.int64), "delta": np.array(1, np.int64)}
    return one_node("Range", feeds, {}, list(feeds)), feeds, (n,), 8


def _tile(n: int) -> Case:
    x = f32(2, 2)
    return one_node("Tile", {"x": x}, {"r": i64(n, n)}, ["x", "r"]), {"x": x}, (2 * n, 2 * n), 4


def _expand(n: int) -> Case:
    x = f32(1)
    return one_node("Expand", {"x": x}, {"s": i64(n, n)}, ["x", "s"]), {"x": x}, (n, n), 4


def _pad(n: int) -> Case:
    x = f32(2, 2)
    return one_node("Pad", {"x": x}, {"p": i64(n, n, n, n)}, ["x", "p"]), {"x": x}, (2 + 2 * n, 2 + 2 * n), 4


def _center_crop_pad(n: int) -> Case:
    x = f32(2, 2)
    return one_node("CenterCropPad", {"x": x}, {"s": i64(n, n)}, ["x", "s"]), {"x": x}, (n, n), 4


def _broadcast(op: str) -> Callable[[int], Case]:
    def case(n: int) -> Case:
        a, b = f32(n, 1), f32(1, n)
        if op == "Where":
            feeds = {"c": np.random.default_rng(1).random((n, 1)) < 0.5, "a": b, "b": f32(1)}
        else:
            feeds = {"a": a, "b": b}
        itemsize = 1 if op in ("Equal", "Greater") else 4
        return one_node(op, feeds, {}, list(feeds)), feeds, (n, n), itemsize
    return case


def _matmul(op: str) -> Callable[[int], Case]:
    def case(n: int) -> Case:
        if op == "MatMulInteger":
            feeds = {"a": np.ones((n, 1), np.uint8), "b": np.ones((1, n), np.uint8)}
            return one_node(op, feeds, {}, list(feeds)), feeds, (n, n), 4
        if op == "Einsum":  # a repeated label (k): the Einsum is kept, not lowered to Unsqueeze/Mul layers
            feeds = {"a": f32(n), "b": f32(n, 1, 1)}
            return one_node(op, feeds, {}, list(feeds), equation="i,jkk->ij"), feeds, (n, n), 4
        feeds = {"a": f32(n, 1), "b": f32(1, n)}
        return one_node(op, feeds, {}, list(feeds)), feeds, (n, n), 4
    return case


def _gather(n: int) -> Case:
    feeds = {"data": f32(10, n), "idx": np.zeros(n, np.int64)}
    return one_node("Gather", feeds, {}, ["data", "idx"]), feeds, (n, n), 4


def _gather_nd(n: int) -> Case:
    feeds = {"data": f32(1, n), "idx": np.zeros((n, 1), np.int64)}
    return one_node("GatherND", feeds, {}, ["data", "idx"]), feeds, (n, n), 4


def _one_hot(n: int) -> Case:
    feeds = {"idx": np.arange(64, dtype=np.int64) % 3}
    inits = {"depth": i64(n), "values": np.array([0, 1], np.float32)}
    return one_node("OneHot", feeds, inits, ["idx", "depth", "values"]), feeds, (64, n), 4


def _conv_transpose(n: int) -> Case:
    x = f32(1, 1, 4, 4)
    model = one_node("ConvTranspose", {"x": x}, {"w": f32(1, 1, 1, 1)}, ["x", "w"], strides=[n, n])
    return model, {"x": x}, (1, 1, 3 * n + 1, 3 * n + 1), 4


def _conv_pads(n: int) -> Case:
    x = f32(1, 1, 1, 1)
    model = one_node("Conv", {"x": x}, {"w": f32(1, 1, 1, 1)}, ["x", "w"], pads=[n, n, n, n])
    return model, {"x": x}, (1, 1, 2 * n + 1, 2 * n + 1), 4


def _max_pool_pads(n: int) -> Case:
    x = f32(1, 1, 1, 1)
    model = one_node("AveragePool", {"x": x}, {}, ["x"], kernel_shape=[1, 1], pads=[n, n, n, n])
    return model, {"x": x}, (1, 1, 2 * n + 1, 2 * n + 1), 4


def _random_normal(n: int) -> Case:
    return one_node("RandomNormal", {}, {}, [], shape=[n, n], seed=1.0), {}, (n, n), 4


def _multinomial(n: int) -> Case:
    x = f32(4, 3)
    return one_node("Multinomial", {"x": x}, {}, ["x"], sample_size=n, seed=1.0), {"x": x}, (4, n), 4


def _hann_window(n: int) -> Case:
    size = np.array(n, np.int64)
    return one_node("HannWindow", {"size": size}, {}, ["size"], opset=17), {"size": size}, (n,), 4


def _mel_weight_matrix(n: int) -> Case:
    inits = {"bins": np.array(n, np.int64), "dft": np.array(n, np.int64), "rate": np.array(16000, np.int64),
             "lo": np.array(0.0, np.float32), "hi": np.array(8000.0, np.float32)}
    feeds = {"bins": inits.pop("bins")}
    model = one_node("MelWeightMatrix", feeds, inits, ["bins", "dft", "rate", "lo", "hi"], opset=17)
    return model, feeds, (n // 2 + 1, n), 4


def _dft(n: int) -> Case:
    x = f32(1, 8, 1)
    return one_node("DFT", {"x": x}, {"n": np.array(n, np.int64)}, ["x", "n"], opset=20), {"x": x}, (1, n, 2), 4


def _stft(n: int) -> Case:
    x = f32(1, 16 * n, 1)
    model = one_node("STFT", {"x": x}, {"step": np.array(1, np.int64), "len": np.array(n, np.int64)},
                     ["x", "step", "", "len"], opset=17)
    return model, {"x": x}, (1, 15 * n + 1, n // 2 + 1, 2), 4


def _col2im(n: int) -> Case:
    x = f32(1, 4, (n - 1) ** 2 if n < 100 else 1)  # the bomb is refused before its block count is checked
    model = one_node("Col2Im", {"x": x}, {"image": i64(n, n), "block": i64(2, 2)}, ["x", "image", "block"])
    return model, {"x": x}, (1, 1, n, n), 4


def _max_unpool(n: int) -> Case:
    feeds = {"x": f32(1, 1, 2, 2), "i": np.arange(4, dtype=np.int64).reshape(1, 1, 2, 2)}
    model = one_node("MaxUnpool", feeds, {"shape": i64(1, 1, n, n)}, ["x", "i", "shape"], kernel_shape=[2, 2],
                     strides=[2, 2])
    return model, feeds, (1, 1, n, n), 4


def _affine_grid(n: int) -> Case:
    theta = np.array([[[1, 0, 0], [0, 1, 0]]], np.float32)
    model = one_node("AffineGrid", {"theta": theta}, {"size": i64(1, 1, n, n)}, ["theta", "size"], opset=20)
    return model, {"theta": theta}, (1, n, n, 2), 4


def _loop_scan_output(n: int) -> Case:
    """A Loop whose scan output is a fresh n-float vector each iteration: 4 iterations (trip count M) at a
    small size; as a bomb, no trip count and a condition that stays true."""
    body = h.make_graph(
        [h.make_node("Identity", ["c_in"], ["c_out"]),
         h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
         h.make_node("Expand", ["fi", "width"], ["row"], name="row")],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, [])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("row", T.FLOAT, [n])],
        [numpy_helper.from_array(i64(n), "width")])
    bounded = n < 4096
    graph = h.make_graph(
        [h.make_node("Loop", ["M" if bounded else "", "cond"], ["y"], body=body, name="bomb")], "loop",
        [h.make_tensor_value_info("M", T.INT64, [])] if bounded else [],
        [h.make_tensor_value_info("y", T.FLOAT, None)], [numpy_helper.from_array(np.array(True), "cond")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"M": np.array(4, np.int64)} if bounded else {}, None, 4


def _scan_outputs(n: int) -> Case:
    """A Scan over n scalars whose body expands each to an n-float vector: n * n floats collected."""
    body = h.make_graph(
        [h.make_node("Expand", ["x_t", "width"], ["row"], name="row")], "body",
        [h.make_tensor_value_info("x_t", T.FLOAT, [])], [h.make_tensor_value_info("row", T.FLOAT, [n])],
        [numpy_helper.from_array(i64(n), "width")])
    x = f32(n)
    graph = h.make_graph(
        [h.make_node("Scan", ["x"], ["y"], body=body, num_scan_inputs=1, name="bomb")], "scan",
        [h.make_tensor_value_info("x", T.FLOAT, [n])], [h.make_tensor_value_info("y", T.FLOAT, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": x}, None, 4


def _sequence_map(n: int) -> Case:
    """SequenceMap over the n scalars of x, its body expanding each to an n-float vector."""
    body = h.make_graph(
        [h.make_node("Expand", ["x_t", "width"], ["row"], name="row")], "body",
        [h.make_tensor_value_info("x_t", T.FLOAT, [])], [h.make_tensor_value_info("row", T.FLOAT, [n])],
        [numpy_helper.from_array(i64(n), "width")])
    graph = h.make_graph(
        [h.make_node("SplitToSequence", ["x"], ["items"], keepdims=0, name="split"),
         h.make_node("SequenceMap", ["items"], ["rows"], body=body, name="bomb"),
         h.make_node("ConcatFromSequence", ["rows"], ["y"], axis=0, name="concat")], "sequence_map",
        [h.make_tensor_value_info("x", T.FLOAT, [n])], [h.make_tensor_value_info("y", T.FLOAT, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": f32(n)}, None, 4


def _loop_sequence(n: int) -> Case:
    """A Loop carrying a sequence that gains a fresh n-float vector each iteration (SequenceInsert 'bomb')."""
    body = h.make_graph(
        [h.make_node("Identity", ["c_in"], ["c_out"]),
         h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
         h.make_node("Expand", ["fi", "width"], ["row"], name="row"),
         h.make_node("SequenceInsert", ["seq_in", "row"], ["seq_out"], name="bomb")],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
                 h.make_tensor_sequence_value_info("seq_in", T.FLOAT, None)],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_sequence_value_info("seq_out", T.FLOAT, None)],
        [numpy_helper.from_array(i64(n), "width")])
    graph = h.make_graph(
        [h.make_node("SequenceEmpty", [], ["empty"], dtype=T.FLOAT, name="empty"),
         h.make_node("Loop", ["M", "cond", "empty"], ["seq"], body=body, name="loop"),
         h.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0, name="concat")], "loop",
        [h.make_tensor_value_info("M", T.INT64, [])], [h.make_tensor_value_info("y", T.FLOAT, None)],
        [numpy_helper.from_array(np.array(True), "cond")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"M": np.array(4 if n < 4096 else 10**9, np.int64)}, None, 4


# name -> (case builder, op type of the 'bomb' layer, small size, bomb size)
BOMBS: dict[str, tuple[Callable[[int], Case], str, int, int]] = {
    "Resize-13-scales": (lambda n: _resize(n, 13, "scales"), "Resize", 2, 2**27),
    "Resize-19-sizes": (lambda n: _resize(n, 19, "sizes"), "Resize", 7, 2**20),
    "Resize-10": (lambda n: _resize(n, 10, "scales"), "Resize", 3, 2**27),
    "Upsample-7": (lambda n: _upsample(n, 7), "Upsample", 2, 2**20),
    "Upsample-9": (lambda n: _upsample(n, 9), "Upsample", 2, 2**20),
    "ConstantOfShape-fed": (_constant_of_shape_fed, "ConstantOfShape", 5, 2**20),
    "ConstantOfShape-initializer": (_constant_of_shape_initializer, "ConstantOfShape", 5, 2**40),
    "Range-float-initializers": (_range_float, "Range", 9, 10**15),
    "Range-int-fed": (_range_int, "Range", 9, 2**60),
    "Tile": (_tile, "Tile", 3, 2**20),
    "Expand": (_expand, "Expand", 3, 2**25),
    "Pad": (_pad, "Pad", 2, 2**16),
    "CenterCropPad": (_center_crop_pad, "CenterCropPad", 5, 2**16),
    "Add": (_broadcast("Add"), "Add", 5, 2**16),
    "Pow": (_broadcast("Pow"), "Pow", 5, 2**16),
    "Max": (_broadcast("Max"), "Max", 5, 2**16),
    "Equal": (_broadcast("Equal"), "Equal", 5, 2**16),
    "Where": (_broadcast("Where"), "Where", 5, 2**16),
    "MatMul": (_matmul("MatMul"), "MatMul", 5, 2**16),
    "Gemm": (_matmul("Gemm"), "Gemm", 5, 2**16),
    "MatMulInteger": (_matmul("MatMulInteger"), "MatMulInteger", 5, 2**16),
    "Einsum": (_matmul("Einsum"), "Einsum", 5, 2**16),
    "Gather": (_gather, "Gather", 5, 2**15),
    "GatherND": (_gather_nd, "GatherND", 5, 2**15),
    "OneHot": (_one_hot, "OneHot", 5, 2**30),
    "ConvTranspose-strides": (_conv_transpose, "ConvTranspose", 2, 2**15),
    "Conv-pads": (_conv_pads, "Conv", 2, 2**15),
    "AveragePool-pads": (_max_pool_pads, "AveragePool", 2, 2**15),
    "RandomNormal": (_random_normal, "RandomNormal", 5, 2**20),
    "Multinomial": (_multinomial, "Multinomial", 5, 2**30),
    "HannWindow": (_hann_window, "HannWindow", 8, 2**40),
    "MelWeightMatrix": (_mel_weight_matrix, "MelWeightMatrix", 16, 2**20),
    "DFT": (_dft, "DFT", 16, 2**33),
    "STFT": (_stft, "STFT", 8, 2**12),
    "Col2Im": (_col2im, "Col2Im", 5, 2**16),
    "MaxUnpool": (_max_unpool, "MaxUnpool", 4, 2**16),
    "AffineGrid": (_affine_grid, "AffineGrid", 4, 2**15),
    "Loop-scan-output": (_loop_scan_output, "Loop", 8, 2**18),
    "Scan-outputs": (_scan_outputs, "Scan", 8, 2**16),
    "Loop-carried-sequence": (_loop_sequence, "SequenceInsert", 8, 2**18),
    "SequenceMap-outputs": (_sequence_map, "SequenceMap", 8, 2**16),
}


# -- the child process: refuse every bomb under an address-space cap ------------------------------------


def vm_hwm() -> int:
    """The process's peak resident memory in bytes (VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_bomb(backend: str, name: str, memory_limit: Any = LIMIT) -> dict[str, Any]:
    """Run the bomb ``name`` (big size) on ``backend``; what it raised and how much the peak memory grew."""
    build, _, _, big = BOMBS[name]
    before = vm_hwm()
    result: dict[str, Any] = {"name": name}
    try:
        model, feeds, _, _ = build(big)
        kwargs = {} if memory_limit == "omitted" else {"memory_limit": memory_limit}
        with ws.Worker(ws.load_model(model.SerializeToString()), backend, **kwargs) as worker:
            worker.run(feeds)
        result["error"] = None
    except ResourceLimitError as exc:
        result.update(error="ResourceLimitError", message=str(exc), layer=exc.layer, op_type=exc.op_type,
                      shape=None if exc.shape is None else list(exc.shape), nbytes=exc.nbytes, limit=exc.limit)
    except BaseException as exc:  # reported to the parent, which fails the test
        result.update(error=type(exc).__name__, message=str(exc)[:2000])
    result["growth"] = vm_hwm() - before
    return result


def child_main(backend: str, names: list[str], memory_limit: Any) -> None:
    """In the child: cap the address space, warm the backend up, then report each bomb as a JSON line."""
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))
    model, feeds, _, _ = _broadcast("Add")(4)
    with ws.Worker(ws.load_model(model.SerializeToString()), backend) as worker:
        worker.run(feeds)  # device start-up and first pipelines count before the bombs, not in them
    for name in names:
        print("RESULT " + json.dumps(run_bomb(backend, name, memory_limit)), flush=True)


CHILD = textwrap.dedent("""
    import json, os, sys
    sys.path[:0] = [sys.argv[1], os.path.dirname(sys.argv[1])]  # this folder, and tests/ for helpers
    from test_memory_budget import child_main
    child_main(sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4]))
""")


def run_child(backend: str, names: list[str], memory_limit: Any = LIMIT, timeout: float = 600) -> dict[str, dict]:
    """Run bombs in a capped child process; their results by name (a missing name: the child died)."""
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(Path(__file__).parent), backend, json.dumps(names), json.dumps(memory_limit)],
        capture_output=True, text=True, timeout=timeout, check=False)
    results = child_results(child.stdout)
    for name in names:
        results.setdefault(name, {"name": name, "error": f"child exited {child.returncode}",
                                  "message": child.stderr[-3000:]})
    return results


@pytest.fixture(scope="module")
def bomb_results() -> Callable[[str], dict[str, dict]]:
    """Every bomb's result on a backend, from one child process per backend (started on first use)."""
    cache: dict[str, dict[str, dict]] = {}

    def of(backend: str) -> dict[str, dict]:
        if backend not in cache:
            cache[backend] = run_child(backend, list(BOMBS))
        return cache[backend]
    return of


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(BOMBS))
def test_a_bomb_is_refused_before_memory_is_used(bomb_results, backend, name):
    build, op_type, _, big = BOMBS[name]
    result = bomb_results(backend)[name]
    assert result["error"] == "ResourceLimitError", result
    assert result["layer"] == "bomb" and result["op_type"] == op_type, result
    assert result["limit"] == LIMIT and result["nbytes"] > LIMIT
    assert "'bomb'" in result["message"] and f"({op_type})" in result["message"]
    assert f"{result['nbytes']:,} bytes" in result["message"]
    _, _, shape, itemsize = build(big)
    if shape is not None:
        assert tuple(result["shape"]) == shape, result
        assert result["nbytes"] == math.prod(shape) * itemsize
        assert str(list(shape)) in result["message"]
    assert result["growth"] < MAX_GROWTH, f"peak memory grew {result['growth']:,} bytes: {result}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_with_growing_scan_output_stops_once_past_the_limit(bomb_results, backend):
    result = bomb_results(backend)["Loop-scan-output"]
    assert result["error"] == "ResourceLimitError", result
    # One 1 MiB row per iteration, held and then stacked: stopped within a row of the limit (the loop has no
    # trip count and its condition stays true), not after a million iterations.
    assert LIMIT < result["nbytes"] <= LIMIT + 2 * (2**18 * 4) + 2 * 4, result
    assert "iterations" in result["message"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_default_limit_refuses_a_petabyte_expand_and_none_lets_300_mb_through(backend):
    results = run_child(backend, ["Expand"], memory_limit="omitted")
    default = results["Expand"]
    assert default["error"] == "ResourceLimitError", default
    assert default["limit"] == default_memory_limit() and default["growth"] < MAX_GROWTH

    # 300 MB, over a 256 MiB limit but allowed with None: refused with the limit, computed without it.
    limited = run_child(backend, ["ConstantOfShape-fed"], memory_limit=LIMIT)
    assert limited["ConstantOfShape-fed"]["error"] == "ResourceLimitError"
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE_CAP}, {ADDRESS_SPACE_CAP}))
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parent.parent)!r}]
        import numpy as np, wgsentis as ws
        from test_memory_budget import one_node
        shape = np.array([75_000_000], np.int64)
        model = ws.load_model(one_node("ConstantOfShape", {{"shape": shape}}, {{}}, ["shape"]).SerializeToString())
        with ws.Worker(model, {backend!r}, memory_limit=None) as worker:
            y = worker.run({{"shape": shape}})["y"]
        print("OK", y.shape, y.dtype, float(y.sum()))
    """)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False)
    assert "OK (75000000,) float32 0.0" in child.stdout, child.stderr[-3000:]


def test_loading_a_bomb_does_not_materialize_it():
    """ConstantOfShape([2**40]) + x: nothing may allocate it at load, before any worker's budget exists."""
    value = numpy_helper.from_array(np.array([1.5], np.float64), "value")
    model = _folded("ConstantOfShape", {"shape": i64(2**40)}, ["shape"], follow="Add", value=value)
    code = textwrap.dedent(f"""
        import resource, sys
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parent.parent)!r}]
        import onnx, wgsentis as ws
        from test_memory_budget import vm_hwm
        model = onnx.load_model_from_string(sys.stdin.buffer.read())
        resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE_CAP}, {ADDRESS_SPACE_CAP}))
        before = vm_hwm()
        ws.load_model(model)
        print("GROWTH", vm_hwm() - before)
    """)
    child = subprocess.run([sys.executable, "-c", code], input=model.SerializeToString(), capture_output=True,
                           timeout=600, check=False)
    out = child.stdout.decode()
    assert "GROWTH" in out, child.stderr.decode()[-3000:]
    assert int(out.split("GROWTH")[1].split()[0]) < MAX_GROWTH


# -- under the limit: the same models run, and the budget predicts their sizes exactly ------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(BOMBS))
def test_the_same_model_under_the_limit_runs_and_matches(backend, name):
    build, _, small, _ = BOMBS[name]
    model, feeds, shape, itemsize = build(small)
    loaded = ws.load_model(model.SerializeToString())
    with ws.Worker(loaded, "cpu", memory_limit=None) as free:
        expected = free.run(feeds)["y"]
    with ws.Worker(loaded, backend, memory_limit=LIMIT) as limited:
        got = limited.run(feeds)["y"]
    if shape is not None:
        assert expected.shape == shape and expected.dtype.itemsize == itemsize
    assert got.shape == expected.shape
    if name not in ("RandomNormal", "Multinomial"):  # random draws: only their shapes must agree
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", [n for n, (_, op, _, _) in BOMBS.items()
                                  if op not in ("Loop", "Scan", "SequenceMap", "SequenceInsert")])
def test_the_predicted_output_is_the_kernels_output(name):
    build, _, small, _ = BOMBS[name]
    model, feeds, _, _ = build(small)
    loaded = ws.load_model(model.SerializeToString())
    layer = next(layer for layer in loaded.imported.layers if layer.name == "bomb")
    known = {**loaded.imported.constants, **feeds}
    args = [known[n] if n else None for n in layer.inputs]
    if layer.outputs[0] in loaded.graph.constants:  # folded at load: the kernel ran then
        value = loaded.graph.constants[layer.outputs[0]]
    else:
        with ws.Worker(loaded, "cpu", memory_limit=None) as worker:
            value = worker.run(feeds)[layer.outputs[0]]
    predicted = budget.predict(layer, args)  # the first entry is the first output, then working copies
    assert predicted and predicted[0][0] == value.shape and predicted[0][1] == value.nbytes, (predicted, value.shape)
    assert budget.output_bytes(layer, args) == sum(nbytes for _, nbytes, _ in predicted)


WINDOWS = [
    ("Conv", {"strides": [2, 3], "pads": [1, 0, 2, 1]}),
    ("Conv", {"dilations": [2, 1], "pads": [0, 3, 0, 3]}),
    ("Conv", {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("Conv", {"auto_pad": "VALID", "strides": [3, 1]}),
    ("MaxPool", {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2], "auto_pad": "SAME_LOWER"}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [3, 3], "pads": [2, 2, 2, 2], "ceil_mode": 1}),
    ("LpPool", {"kernel_shape": [2, 3], "strides": [1, 2]}),
    ("ConvTranspose", {"strides": [2, 3], "pads": [1, 0, 0, 1], "output_padding": [1, 2]}),
    ("ConvTranspose", {"strides": [2, 2], "output_shape": [15, 16]}),
    ("ConvTranspose", {"strides": [2, 2], "auto_pad": "SAME_UPPER", "dilations": [2, 1]}),
]


@pytest.mark.parametrize(("op", "attrs"), WINDOWS)
def test_the_predicted_window_geometry_is_the_kernels(op, attrs):
    x = f32(1, 2, 7, 8)
    weights = {"Conv": {"w": f32(3, 2, 3, 2)}, "ConvTranspose": {"w": f32(2, 3, 3, 2)}}.get(op, {})
    model = one_node(op, {"x": x}, weights, ["x", *weights], opset=18, **attrs)
    loaded = ws.load_model(model.SerializeToString())
    layer = next(layer for layer in loaded.imported.layers if layer.name == "bomb")
    with ws.Worker(loaded, "cpu", memory_limit=None) as worker:
        y = worker.run({"x": x})["y"]
    predicted = budget.predict(layer, [x, *weights.values()])
    assert predicted[0][0] == y.shape and predicted[0][1] == y.nbytes


# -- the check itself ---------------------------------------------------------------------------------


def _check(op: str, args: list[Any], opset: int = 18, limit: int = LIMIT, **attrs: Any) -> None:
    budget.check_layer_outputs(RunControl(memory_limit=limit), Layer("n", op, [], ["y"], attrs, "", opset), args)


class _DeviceOnly:
    """A GPU tensor whose value is only on the device: shape and dtype known, host None."""

    def __init__(self, shape: tuple[int, ...], dtype: Any = np.int64) -> None:
        self.shape, self.dtype, self.host = shape, np.dtype(dtype), None


def test_malformed_or_unknown_inputs_are_left_to_the_kernel():
    _check("Range", [np.array(0.0), np.array(np.inf), np.array(1.0)])  # the kernel raises its own error
    _check("Range", [np.array(0.0), np.array(np.nan), np.array(1.0)])
    _check("Range", [np.array(0), np.array(5), np.array(0)])
    _check("Resize", [f32(1, 1, 2, 2), None, np.array([1, 1, np.inf, 1], np.float32), None])
    _check("Tile", [f32(2, 2), i64(2**40)])  # repeats of the wrong length
    _check("Tile", [f32(2, 2), _DeviceOnly((2,))])  # repeats only on the device
    _check("Pad", [f32(2, 2), i64(-(2**40), 2**40, 0, 2**40)])  # a negative dim: the kernel's error
    _check("Conv", [f32(1, 1, 4, 4), f32(1, 1, 3, 3)], pads="bad")
    _check("Einsum", [f32(3), f32(4)], equation="i,i->")
    _check("Gather", [f32(4), [f32(1)]])  # a sequence where a tensor belongs
    with pytest.raises(LayerError, match="delta cannot be 0"):
        with ws.Worker(ws.load_model(_range_int(4)[0].SerializeToString()), "cpu", memory_limit=LIMIT) as worker:
            worker.run({"start": np.array(0), "limit": np.array(4), "delta": np.array(0)})


def test_sizes_are_python_ints_and_never_overflow():
    # int64 products of these would wrap to small or negative numbers and let the bomb through.
    with pytest.raises(ResourceLimitError) as info:
        _check("Tile", [f32(2**4, 2**4), i64(2**62, 2**62)])
    assert info.value.nbytes == 2**4 * 2**62 * 2**4 * 2**62 * 4
    with pytest.raises(ResourceLimitError):
        _check("ConstantOfShape", [i64(2**32, 2**32, 2**32, 2**32)])
    with pytest.raises(ResourceLimitError):
        _check("Range", [np.array(0.0), np.array(1e300), np.array(1e-5)])


def test_a_device_only_shape_argument_on_a_shape_known_op_is_still_checked():
    with pytest.raises(ResourceLimitError):  # MatMul needs shapes only: device tensors are checked too
        _check("MatMul", [_DeviceOnly((2**16, 1), np.float32), _DeviceOnly((1, 2**16), np.float32)])


@pytest.mark.parametrize("op", ["Resize", "Upsample", "Tile", "Expand", "ConstantOfShape", "Range", "Pad", "Add",
                                "Sub", "Mul", "Div", "Pow", "Where", "Max", "Min", "Sum", "Mean", "And", "Or",
                                "Equal", "MatMul", "Gemm", "MatMulInteger", "Gather", "GatherElements",
                                "GatherND", "OneHot", "ConvTranspose", "Conv", "MaxPool", "AveragePool", "EyeLike",
                                "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                "Multinomial", "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix",
                                "DFT", "STFT", "Col2Im", "MaxUnpool", "CenterCropPad", "Einsum", "Concat",
                                "SequenceConstruct", "SequenceInsert", "ConcatFromSequence", "NonZero"])
def test_every_amplifying_op_has_a_size_rule(op):
    assert budget.has_rule(op)


class _Weird:
    """An input no rule expects: attribute access raises something other than AttributeError."""

    @property
    def shape(self) -> tuple[int, ...]:
        raise RuntimeError("no shape")

    dtype = host = shape


@pytest.mark.parametrize(("domain", "op"), budget.ruled_ops())
def test_a_size_rule_never_raises_anything_but_resource_limit_error(domain, op):
    layer = Layer("n", op, [], ["y", "z"], {"axis": "x", "pads": [1], "scales": None, "equation": "->"}, domain, 18)
    for args in ([], [None], [None] * 9, [[f32(2)]] * 3, [_Weird()] * 5, [f32(2)] * 9, [np.array("x")] * 5,
                 [i64(-1)] * 5, [_DeviceOnly((3,))] * 5, [np.array(np.nan)] * 5, [np.array(2.0**1000)] * 5):
        with contextlib.suppress(ResourceLimitError):  # anything else fails the test
            budget.check_layer_outputs(RunControl(memory_limit=1), layer, args)
        budget.check_layer_outputs(RunControl(memory_limit=None), layer, args)


def test_non_amplifying_ops_have_no_rule():
    for op in ("Relu", "Reshape", "Unsqueeze", "Transpose", "Softmax", "ReduceSum", "Identity", "Shape"):
        assert not budget.has_rule(op)


@requires_gpu
def test_the_device_memory_a_plan_holds_is_bounded_too():
    """Five 16 MiB intermediates alive at once: each layer's output is within a 64 MiB limit, together
    they are not. The CPU runs it (each output is checked, not their sum); gpu-compute refuses it while
    recording, naming the layer whose buffer would pass the limit."""
    ops = ["Relu", "Neg", "Abs", "Exp", "Sigmoid"]
    nodes = [h.make_node(op, ["x"], [f"t{k}"], name=f"u{k}") for k, op in enumerate(ops)]
    nodes.append(h.make_node("Sum", [f"t{k}" for k in range(len(ops))], ["y"], name="sum"))
    graph = h.make_graph(nodes, "held", [h.make_tensor_value_info("x", T.FLOAT, [4 << 20])],
                         [h.make_tensor_value_info("y", T.FLOAT, None)])
    model = ws.load_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    x = f32(4 << 20)
    with ws.Worker(model, "cpu", memory_limit=64 << 20) as worker:
        expected = worker.run({"x": x})["y"]
    with ws.Worker(model, "gpu-compute", memory_limit=64 << 20) as worker, \
            pytest.raises(ResourceLimitError, match="device memory") as info:
        worker.run({"x": x})
    assert info.value.layer in {f"u{k}" for k in range(len(ops))} | {"sum"}
    assert info.value.total > 64 << 20 and info.value.nbytes <= 64 << 20  # the plan's total; the layer's own
    with ws.Worker(model, "gpu-compute", memory_limit=None) as worker:
        np.testing.assert_allclose(worker.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-6)


def test_constant_folding_at_load_bounds_the_splats_it_makes_in_all():
    """Folding runs at load, before any worker's budget exists: past its total the splats stay layers (run
    later under memory_limit) instead of ten 1 GiB ConstantOfShape nodes costing 10 GiB in load_model."""
    from wgsentis.backends.cpu import evaluate
    from wgsentis.passes.fold_constants import FoldConstants

    nodes = [h.make_node("ConstantOfShape", [f"shape{k}"], [f"splat{k}"], name=f"splat{k}",
                              value=h.make_tensor("v", T.FLOAT, [1], [1.0])) for k in range(4)]
    nodes.append(h.make_node("Sum", [f"splat{k}" for k in range(4)], ["y"], name="sum"))
    graph = h.make_graph(nodes, "splats", [], [h.make_tensor_value_info("y", T.FLOAT, None)],
                              [numpy_helper.from_array(np.array([1024, 256], np.int64), f"shape{k}")
                               for k in range(4)])  # 1 MiB each
    model = ws.load_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), optimize=False)
    folded = model.graph
    FoldConstants(evaluate, max_folded_splat_bytes=(5 << 20) // 2).run(folded, model.opsets)  # room for two of four
    assert sorted(n for n in folded.constants if n.startswith("splat")) == ["splat0", "splat1"]
    assert [layer.name for layer in folded.layers] == ["splat2", "splat3", "sum"]
    with ws.Worker(model, "cpu") as worker:  # the unfolded two run at run time, same answer
        np.testing.assert_array_equal(worker.run({})["y"], np.full((1024, 256), 4.0, np.float32))


# -- a check skipped on the same sizes (budget.outputs_key) ----------------------------------------------


def _expand_model() -> ws.Model:
    model = h.make_model(h.make_graph(
        [h.make_node("Expand", ["x", "shape"], ["y"], name="bomb")], "expand",
        [h.make_tensor_value_info("x", T.FLOAT, [1]), h.make_tensor_value_info("shape", T.INT64, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, None)]), opset_imports=[h.make_opsetid("", 17)])
    return ws.load_model(model.SerializeToString())


def test_a_passed_check_is_skipped_only_for_the_same_values_of_shape_like_inputs():
    """The cpu backend skips a layer's check when its inputs have the sizes (and its small integer inputs the
    values) of a check that passed: an Expand target that grows between runs is checked again and refused."""
    worker = ws.Worker(_expand_model(), "cpu", memory_limit=64 * 1024)
    x = np.ones(1, np.float32)
    for _ in range(2):
        assert worker.run({"x": x, "shape": np.array([8, 8], np.int64)})["y"].shape == (8, 8)
    with pytest.raises(ResourceLimitError, match="bomb"):
        worker.run({"x": x, "shape": np.array([4096, 4096], np.int64)})
    assert worker.run({"x": x, "shape": np.array([8, 8], np.int64)})["y"].shape == (8, 8)


def test_nonzero_is_checked_on_every_run_as_its_size_is_a_count_over_its_data():
    model = h.make_model(h.make_graph(
        [h.make_node("NonZero", ["x"], ["y"], name="bomb")], "nonzero",
        [h.make_tensor_value_info("x", T.FLOAT, [20000])], [h.make_tensor_value_info("y", T.INT64, None)]),
        opset_imports=[h.make_opsetid("", 17)])
    worker = ws.Worker(ws.load_model(model.SerializeToString()), "cpu", memory_limit=16 * 1024)
    sparse = np.zeros(20000, np.float32)
    sparse[:10] = 1
    for _ in range(2):
        assert worker.run({"x": sparse})["y"].shape == (1, 10)
    with pytest.raises(ResourceLimitError, match="bomb"):
        worker.run({"x": np.ones(20000, np.float32)})  # the same shape, 160,000 bytes of indices


def test_outputs_key_keys_data_by_shape_and_shape_like_values_by_value():
    layer = Layer(name="expand", op_type="Expand", inputs=["a", "b"], outputs=["c"])  # its rule reads b's values
    data = np.zeros((4, 64), np.float32)
    assert budget.outputs_key(layer, [data, data]) == budget.outputs_key(layer, [data + 1, data])
    small = np.array([1, 2], np.int64)
    assert budget.outputs_key(layer, [data, small]) != budget.outputs_key(layer, [data, small + 1])
    assert budget.outputs_key(layer, [data, np.zeros(budget.KEYED_VALUE_ELEMENTS + 1, np.int64)]) is None
    assert budget.outputs_key(layer, [[data], data]) is None  # a sequence: no key


def test_outputs_key_of_a_rule_that_reads_shapes_alone_ignores_values():
    # Add's rule reads its inputs' shapes and dtypes (size_reads_shapes): a decoder's token and position ids change
    # every step, their shapes do not, so the check is skipped on them.
    layer = Layer(name="add", op_type="Add", inputs=["a", "b"], outputs=["c"])
    small = np.array([1, 2], np.int64)
    big = np.zeros(budget.KEYED_VALUE_ELEMENTS + 1, np.int64)
    assert budget.outputs_key(layer, [small, small]) == budget.outputs_key(layer, [small + 1, small])
    assert budget.outputs_key(layer, [small, small]) != budget.outputs_key(layer, [small.astype(np.int32), small])
    assert budget.outputs_key(layer, [small, small]) != budget.outputs_key(layer, [np.zeros(3, np.int64), small])
    assert budget.outputs_key(layer, [big, big]) is not None
    assert budget.outputs_key(layer, [[small], small]) is None  # a sequence: no key


# -- the input bound that skips a check on small inputs (budget.within_input_bound) -------------------------------


def _rule_bytes(op_spec: Any, args: list[Any]) -> int | None:
    """The bytes ``op_spec``'s size rule counts on ``args`` (every output and working copy), None where it cannot
    run on them."""
    layer = Layer(name="probe", op_type=op_spec.op_type, inputs=[f"i{k}" for k in range(len(args))],
                  outputs=["o", "o1", "o2", "o3"], domain=op_spec.domain,
                  attrs={"axis": 0, "to": int(T.DOUBLE), "transB": 0})
    try:
        outputs = budget.outputs_by_rule(op_spec.size_rule, layer, args)
    except Exception:
        return None
    return sum(nbytes for _, nbytes, _ in outputs)


def test_every_rule_that_reads_shapes_alone_stays_within_the_input_bound():
    """``within_input_bound`` skips the check of an op that reads shapes only (``size_reads_shapes``) when the
    product of (1 + each input's elements) is small: every such rule, on broadcasting, product, gather and
    concatenation shapes, counts no more than that bound, so a skip never passes what the rule would refuse."""
    f32 = np.float32
    candidates = [
        [np.zeros((5, 1), f32), np.zeros((1, 7), f32)],  # broadcasts to 35: more than either input
        [np.zeros((1, 7), f32), np.zeros((5, 1), f32), np.zeros((5, 7), f32)],
        [np.zeros((6, 4), f32), np.zeros((4, 9), f32)],  # a product
        [np.zeros((2, 6, 4), f32), np.zeros((4, 9), f32), np.zeros((9,), f32)],
        [np.zeros((4, 6), f32), np.zeros((1, 3), np.int64)],  # a gather
        [np.zeros((1,), f32), np.zeros((1,), f32), np.zeros((1,), f32)],  # concatenations of single elements
        [np.zeros((3, 8), np.float64)],
        [np.zeros((4, 8), np.int8), np.zeros((4, 8), np.int8)],
        [np.zeros((2, 3), np.complex128), np.zeros((2, 3), np.complex128)],
    ]
    verified = set()
    for op_spec in budget.described("size_reads_shapes"):
        if op_spec.size_rule is None:
            continue
        for args in candidates:
            counted = _rule_bytes(op_spec, args)
            if counted is None or counted == 0:
                continue
            bound = 8 * budget.INPUT_BOUND_SLACK * math.prod(a.size + 1 for a in args)
            bound *= math.prod(a.itemsize for a in args if a.itemsize > 8)
            assert counted <= bound, (op_spec.op_type, [a.shape for a in args], counted, bound)
            assert budget.within_input_bound(args, counted) == (bound <= counted)
            verified.add(op_spec.op_type)
    assert {"Add", "Where", "MatMul", "Gemm", "Gather", "Concat", "Cast"} <= verified, verified


def test_a_broadcast_past_the_budget_is_refused_though_its_inputs_are_small():
    # (4096, 1) + (1, 4096) float32: 64 MiB out of 32 KiB in; the input bound (64 bytes x 4097 x 4097, 1 GiB) is
    # above a 1 MiB budget, so the rule runs and refuses.
    model = h.make_model(h.make_graph(
        [h.make_node("Add", ["a", "b"], ["c"], name="outer_sum")], "outer",
        [h.make_tensor_value_info("a", T.FLOAT, ["n", 1]), h.make_tensor_value_info("b", T.FLOAT, [1, "m"])],
        [h.make_tensor_value_info("c", T.FLOAT, None)]), opset_imports=[h.make_opsetid("", 17)])
    worker = ws.Worker(ws.load_model(model.SerializeToString()), "cpu", memory_limit=1 << 20)
    with pytest.raises(ResourceLimitError, match="outer_sum"):
        worker.run({"a": np.ones((4096, 1), np.float32), "b": np.ones((1, 4096), np.float32)})
    small = worker.run({"a": np.ones((4096, 1), np.float32), "b": np.ones((1, 1), np.float32)})  # 16 KiB: runs
    assert small["c"].shape == (4096, 1)
