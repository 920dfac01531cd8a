"""Loading never lets ONNX's shape inference expand a huge value, and the shapes it resolves stay resolved.

ONNX's data propagation (``infer_shapes(data_prop=True)``) builds a list of dimensions for every rank-1
value of known length that Add, Cast, Concat, Gather, Slice, Size... read. Each bomb here is a tiny model
that would make it build 2**40 of them (a declared input, a length only propagation resolves, a Loop or
Scan body, an If branch), or 4M through one bounded vector read 64 times: loading it must succeed with the
process's peak memory (VmHWM) grown by less than 200 MB. The loads run in a child process under a hard
address-space cap, so a regression fails these tests instead of exhausting the machine. Beside them, models
whose types come from propagation (a Reshape target computed from Shape, a length only propagation learns,
symbols shared along a chain) keep them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from helpers import child_results
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import wgsentis as ws
from wgsentis import onnx_shapes

BIG = 2**40
MAX_GROWTH = 200 << 20
ADDRESS_SPACE_CAP = 4 << 30
vi = h.make_tensor_value_info


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           inits: dict[str, np.ndarray] | None = None, opset: int = 18) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "g", inputs, outputs,
                         [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


ONES = numpy_helper.from_array(np.array([1.5]), "value")


def _subgraph_bomb(op: str) -> onnx.ModelProto:
    """A Loop whose state, or a Scan whose slices, are declared [2**40] vectors that the body adds up."""
    if op == "Loop":
        body = h.make_graph([h.make_node("Add", ["v", "v"], ["v2"]), h.make_node("Identity", ["c"], ["c2"])], "body",
                            [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("v", T.DOUBLE, [BIG])],
                            [vi("c2", T.BOOL, []), vi("v2", T.DOUBLE, [BIG])])
        return _model([h.make_node("Loop", ["", "cond", "x"], ["y"], body=body)],
                      [vi("cond", T.BOOL, []), vi("x", T.DOUBLE, [BIG])], [vi("y", T.DOUBLE, None)])
    body = h.make_graph([h.make_node("Add", ["s", "s"], ["o"])], "body", [vi("s", T.DOUBLE, None)],
                        [vi("o", T.DOUBLE, None)])
    return _model([h.make_node("Scan", ["x"], ["y"], body=body, num_scan_inputs=1)],
                  [vi("x", T.DOUBLE, [1, BIG])], [vi("y", T.DOUBLE, None)], opset=16)


def _many_readers(op: str) -> onnx.ModelProto:
    """A [65536] vector that Concat reads 64 times, or that 64 Casts read: 4M dimensions in all."""
    nodes = ([h.make_node("Concat", ["x"] * 64, ["y0"], axis=0)] if op == "Concat"
             else [h.make_node("Cast", ["x"], [f"y{i}"], to=T.INT64) for i in range(64)])
    return _model(nodes, [vi("x", T.INT64, [1 << 16])], [vi(n.output[0], T.INT64, None) for n in nodes])


BOMBS = {
    "declared-input": lambda: _model([h.make_node("Add", ["x", "x"], ["y"])], [vi("x", T.DOUBLE, [BIG])],
                                     [vi("y", T.DOUBLE, None)]),
    "Size-of-declared": lambda: _model([h.make_node("Size", ["x"], ["y"])], [vi("x", T.DOUBLE, [BIG])],
                                       [vi("y", T.INT64, None)]),
    "ConstantOfShape-propagated": lambda: _model(  # its length is known only once propagation multiplies
        [h.make_node("Mul", ["a", "b"], ["s"]), h.make_node("ConstantOfShape", ["s"], ["c"], value=ONES),
         h.make_node("Sub", ["c", "x"], ["y"])],
        [vi("x", T.DOUBLE, [1])], [vi("y", T.DOUBLE, None)], {"a": _i64(2**20), "b": _i64(2**20)}),
    "Reshape-propagated": lambda: _model(
        [h.make_node("Mul", ["a", "b"], ["s"]), h.make_node("Reshape", ["x", "s"], ["r"]),
         h.make_node("Slice", ["r", "start", "end"], ["y"])],
        [vi("x", T.INT64, None)], [vi("y", T.INT64, None)],
        {"a": _i64(2**20), "b": _i64(2**20), "start": _i64(0), "end": _i64(1)}),
    "Range": lambda: _model([h.make_node("Range", ["zero", "limit", "one"], ["r"]),
                             h.make_node("Mul", ["r", "x"], ["y"])],
                            [vi("x", T.INT64, [1])], [vi("y", T.INT64, None)],
                            {"zero": np.int64(0), "limit": np.int64(BIG), "one": np.int64(1)}),
    "Expand": lambda: _model([h.make_node("Expand", ["one", "shape"], ["e"]),
                              h.make_node("Concat", ["e", "x"], ["y"], axis=0)],
                             [vi("x", T.INT64, [1])], [vi("y", T.INT64, None)], {"one": _i64(1), "shape": _i64(BIG)}),
    "Tile": lambda: _model([h.make_node("Tile", ["one", "repeats"], ["t"]), h.make_node("Gather", ["t", "x"], ["y"])],
                           [vi("x", T.INT64, [1])], [vi("y", T.INT64, None)], {"one": _i64(1), "repeats": _i64(BIG)}),
    "If-branch": lambda: _model(
        [h.make_node("ConstantOfShape", ["shape"], ["c"], value=ONES),
         h.make_node("If", ["cond"], ["y"], then_branch=(branch := h.make_graph(
             [h.make_node("Add", ["c", "c"], ["t"])], "branch", [], [vi("t", T.DOUBLE, None)])),
             else_branch=branch)],
        [vi("cond", T.BOOL, [])], [vi("y", T.DOUBLE, None)], {"shape": _i64(BIG)}),
    "Loop-body": lambda: _subgraph_bomb("Loop"),
    "Scan-body": lambda: _subgraph_bomb("Scan"),
    "Concat-64-times": lambda: _many_readers("Concat"),
    "Cast-64-times": lambda: _many_readers("Cast"),
}


@pytest.fixture(scope="module")
def growth(tmp_path_factory) -> dict[str, dict]:
    """Each bomb loaded in a capped child process of its own: the peak-memory growth, or the error loading
    raised."""
    folder = tmp_path_factory.mktemp("bombs")
    for name, build in BOMBS.items():
        (folder / f"{name}.onnx").write_bytes(build().SerializeToString())
    code = textwrap.dedent(f"""
        import json, os, resource, sys
        import wgsentis as ws
        def vm_hwm():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE_CAP}, {ADDRESS_SPACE_CAP}))
        for name in {list(BOMBS)!r}:
            sys.stdout.flush()
            if os.fork():  # a fresh heap per bomb: memory an earlier one freed would hide this one's growth
                os.wait()
                continue
            before = vm_hwm()
            try:
                ws.load_model({str(folder)!r} + "/" + name + ".onnx")
                error = None
            except Exception as exc:
                error = f"{{type(exc).__name__}}: {{exc}}"
            print("RESULT " + json.dumps({{"name": name, "growth": vm_hwm() - before, "error": error}}), flush=True)
            os._exit(0)
    """)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False)
    results = child_results(child.stdout)
    for name in BOMBS:
        results.setdefault(name, {"name": name, "growth": None, "error": f"child exited {child.returncode}: "
                                  + child.stderr[-2000:]})
    return results


@pytest.mark.parametrize("name", list(BOMBS))
def test_loading_does_not_expand_a_huge_value(growth, name):
    result = growth[name]
    assert result["error"] is None, result
    assert result["growth"] < MAX_GROWTH, f"peak memory grew {result['growth']:,} bytes loading {name}"


def _shape_chain() -> list[onnx.NodeProto]:
    """y = Reshape(x, [x.shape[0], -1]), the target computed from Shape as exporters write it."""
    return [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "zero"], ["n"], axis=0),
            h.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
            h.make_node("Concat", ["n1", "minus1"], ["target"], axis=0), h.make_node("Reshape", ["x", "target"], ["y"])]


SHAPE_INITS = {"zero": np.int64(0), "axes": _i64(0), "minus1": _i64(-1)}


def _shapes(model: onnx.ModelProto) -> dict[str, tuple]:
    return {name: info.shape for name, info in ws.load_model(model, optimize=False).imported.value_info.items()}


def test_a_reshape_target_computed_from_shape_still_resolves():
    shapes = _shapes(_model(_shape_chain(), [vi("x", T.FLOAT, [2, 3, 4])], [vi("y", T.FLOAT, None)], SHAPE_INITS))
    assert shapes["target"] == (2,) and shapes["y"] == (2, 12)


def test_beside_a_long_value_the_rest_of_the_model_still_propagates():
    # c is longer than propagation may expand (2**17: harmless here even if it were expanded, in-process)
    long = 2 * onnx_shapes.MAX_PROPAGATED_LENGTH
    nodes = [*_shape_chain(), h.make_node("ConstantOfShape", ["long"], ["c"], value=ONES),
             h.make_node("Add", ["c", "d"], ["z"])]
    shapes = _shapes(_model(nodes, [vi("x", T.FLOAT, [2, 3, 4]), vi("d", T.DOUBLE, [1])],
                            [vi("y", T.FLOAT, None), vi("z", T.DOUBLE, None)], {**SHAPE_INITS, "long": _i64(long)}))
    assert shapes["y"] == (2, 12)
    assert shapes["c"] == (long,) and shapes["z"] == (long,)  # z from c's stand-in, its length restored


def test_a_length_only_propagation_learns_is_released():
    # ones = ConstantOfShape([x.shape[0]]): inference without propagation cannot say how long it is, so it is
    # held back at first; propagation says 2, it is released, and the target it joins resolves.
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             h.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             h.make_node("ConstantOfShape", ["n1"], ["ones"], value=numpy_helper.from_array(_i64(1), "v")),
             h.make_node("Concat", ["ones", "minus1"], ["target"], axis=0),
             h.make_node("Reshape", ["x", "target"], ["y"])]
    shapes = _shapes(_model(nodes, [vi("x", T.FLOAT, [2, 3, 4])], [vi("y", T.FLOAT, None)], SHAPE_INITS))
    assert shapes["ones"] == (2,) and shapes["target"] == (3,)
    assert shapes["y"] is not None and len(shapes["y"]) == 3


def test_a_value_of_unknown_length_shares_its_symbol_with_what_reads_it():
    # r's length is unknown and Mul propagates: r stays held back, and m, c, y still share r's symbol.
    nodes = [h.make_node("Range", ["zero", "n", "one"], ["r"]), h.make_node("Mul", ["r", "two"], ["m"]),
             h.make_node("Cos", ["r"], ["c"]), h.make_node("Add", ["m", "c"], ["y"])]
    shapes = _shapes(_model(nodes, [vi("n", T.FLOAT, [])], [vi("y", T.FLOAT, None)],
                            {"zero": np.float32(0), "one": np.float32(1), "two": np.float32(2)}))
    (symbol,) = shapes["r"]
    assert isinstance(symbol, str) and shapes["m"] == shapes["c"] == shapes["y"] == (symbol,)
