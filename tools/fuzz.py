"""Developer tool: fuzz the loader and the backends with hypothesis (issue 18).

Two campaigns, the same strategies tests/faults/test_fuzz.py runs with a small, derandomized budget:

- ``load``: real models (the built-in sample, a small graph of many attribute kinds, ONNX's light SqueezeNet)
  mutated as bytes (flips, truncations, insertions, deletions) and as ModelProtos (dims, op types, attribute
  values, dropped inputs, duplicated outputs, cycles, initializer types, opsets). ``load_model`` must succeed or
  raise ModelLoadError; a model that loads must then run on the CPU or raise a WgSentisError. Anything else
  (another exception, a crash) is a finding.
- ``graphs``: random small graphs of supported ops (elementwise, MatMul, Gemm, Conv, pools, Reshape, Transpose,
  Concat, Softmax, ReduceMean, BatchNormalization ...) with random shapes, run on ``--backend`` and compared
  with the numpy backend, and on the CPU with ONNX Runtime when it is installed.

    python tools/fuzz.py load [--examples 2000] [--seed 1]
    python tools/fuzz.py graphs [--examples 300] [--backend gpu-compute] [--seed 1]

A crash in native code ends the process: run ``load`` campaigns as their own process (the test does). Exit
status 0 when every example held, 1 with the falsifying example printed otherwise.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import wgsentis as ws  # noqa: E402
from wgsentis.errors import ModelLoadError, WgSentisError  # noqa: E402

RUN_MEMORY_LIMIT = 256 << 20  # a mutated model may ask for a lot: the worker refuses past this
RUN_TIMEOUT_S = 20.0
MAX_FEED_ELEMENTS = 1 << 20  # inputs larger than this are not made; the model counts as loaded only


# -- seed models ----------------------------------------------------------------------------------------------
def attribute_zoo() -> onnx.ModelProto:
    """A small model with many attribute kinds (ints, floats, strings, a tensor, a subgraph) and initializers
    of several dtypes: material for the structured mutations."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    then = helper.make_graph([helper.make_node("Relu", ["p"], ["t_out"])], "then", [],
                             [helper.make_tensor_value_info("t_out", f, None)])
    other = helper.make_graph([helper.make_node("Neg", ["p"], ["e_out"])], "else", [],
                              [helper.make_tensor_value_info("e_out", f, None)])
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1],
                         kernel_shape=[3, 3], auto_pad="NOTSET"),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], name="bn", epsilon=1e-5),
        helper.make_node("LeakyRelu", ["n"], ["r"], name="leaky", alpha=0.1),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Constant", [], ["k"], name="const", value=numpy_helper.from_array(np.array([2], np.int64))),
        helper.make_node("Reshape", ["p", "shape"], ["flat"], name="reshape"),
        helper.make_node("Gather", ["flat", "idx"], ["g"], name="gather", axis=1),
        helper.make_node("ReduceMax", ["g"], ["cond_f"], name="rmax", keepdims=0),
        helper.make_node("Greater", ["cond_f", "zero"], ["cond"], name="gt"),
        helper.make_node("If", ["cond"], ["branch"], name="if", then_branch=then, else_branch=other),
        helper.make_node("Softmax", ["flat"], ["sm"], name="softmax", axis=1),
        helper.make_node("Resize", ["p", "", "scales"], ["up"], name="resize", mode="nearest"),
        helper.make_node("Concat", ["up", "r"], ["y"], name="concat", axis=1),
    ]
    rng = np.random.default_rng(0)
    inits = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "b": np.zeros(4, np.float32),
             "s": np.ones(4, np.float32), "bb": np.zeros(4, np.float32), "m": np.zeros(4, np.float32),
             "v": np.ones(4, np.float32), "shape": np.array([1, -1], np.int64), "idx": np.array([0, 3], np.int64),
             "zero": np.array(0.0, np.float32), "scales": np.array([1, 1, 2, 2], np.float32)}
    graph = helper.make_graph(nodes, "zoo", [helper.make_tensor_value_info("x", f, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info(o, f, None) for o in ("y", "sm", "branch")],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    graph.value_info.append(helper.make_tensor_value_info("k", i64, [1]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@functools.cache
def seed_models() -> dict[str, bytes]:
    """name -> serialized model: the built-in sample, the attribute zoo, ONNX's light SqueezeNet (shipped in the
    onnx package, no download) when present."""
    seeds = {"sample": (ROOT / "wgsentis" / "data" / "sample.onnx").read_bytes(),
             "zoo": attribute_zoo().SerializeToString()}
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"
    if light.is_file():
        seeds["squeezenet"] = light.read_bytes()
    return seeds


# -- the loader property ---------------------------------------------------------------------------------------
def feeds_for(model: ws.Model, seed: int = 0) -> dict[str, Any] | None:
    """Random inputs for every model input (unknown dims: 1); None when one cannot be made or is too large."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, Any] = {}
    for info in model.inputs:
        if info.kind != "tensor" or info.shape is None:
            return None
        shape = tuple(d if isinstance(d, int) else 1 for d in info.shape)
        if any(d < 0 for d in shape) or math.prod(shape) > MAX_FEED_ELEMENTS:
            return None
        dtype = info.dtype if info.dtype is not None else np.dtype(np.float32)
        if dtype.kind == "f":
            feeds[info.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[info.name] = rng.integers(0, 4, shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[info.name] = rng.random(shape) < 0.5
        else:
            return None
    return feeds


def check_load(source: bytes | onnx.ModelProto, run: bool = True) -> str:
    """The loader property: load_model raises ModelLoadError or gives a model that runs on the CPU or raises a
    WgSentisError. Returns what happened ("refused", "loaded", "ran", "run-refused"); raises AssertionError on
    anything else."""
    try:
        model = ws.load_model(source, name="fuzzed")
    except ModelLoadError:
        return "refused"
    except Exception as exc:  # the finding
        raise AssertionError(f"load_model raised {type(exc).__name__}, not ModelLoadError: {exc}") from exc
    if not run:
        return "loaded"
    feeds = feeds_for(model)
    if feeds is None:
        return "loaded"
    try:
        with ws.Worker(model, "cpu", threads=1, memory_limit=RUN_MEMORY_LIMIT) as worker:
            worker.run(feeds, timeout=RUN_TIMEOUT_S)
    except WgSentisError:
        return "run-refused"
    except Exception as exc:
        raise AssertionError(f"a loaded model's cpu run raised {type(exc).__name__}, not a WgSentisError: "
                             f"{exc}") from exc
    return "ran"


# -- byte mutations --------------------------------------------------------------------------------------------
@st.composite
def mutated_bytes(draw: Callable[..., Any]) -> bytes:
    """A seed model's bytes with 1-4 edits: flipped bits, truncation, inserted or deleted or overwritten runs."""
    seeds = seed_models()
    data = bytearray(seeds[draw(st.sampled_from(sorted(seeds)))])
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "overwrite", "byte"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte" and data:
            data[at] = draw(st.sampled_from([0x00, 0x08, 0x0A, 0x12, 0x7F, 0x80, 0xFF]))
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[at: at + draw(st.integers(1, 32))]
        elif kind == "overwrite":
            run = draw(st.binary(min_size=1, max_size=8))
            data[at: at + len(run)] = run
    return bytes(data)


# -- structured mutations --------------------------------------------------------------------------------------
OP_TYPES = ["Relu", "Add", "Conv", "MatMul", "Gemm", "Reshape", "Transpose", "Concat", "Softmax", "MaxPool",
            "ReduceMean", "Gather", "Loop", "Bogus", "", "relu", "Identity", "Slice", "Expand", "Tile", "Resize"]
ELEM_TYPES = [0, TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32, TensorProto.INT64,
              TensorProto.STRING, TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16,
              TensorProto.COMPLEX64, TensorProto.FLOAT8E4M3FN, 99]
DIMS = [-1, 0, 1, 2, 3, 7, 64, 2**31, 2**40]


def _value_infos(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    return [*graph.input, *graph.output, *graph.value_info]


def _mutate(proto: onnx.ModelProto, draw: Callable[..., Any]) -> str:
    """Apply one structured mutation to ``proto`` in place; returns what it did (for the report)."""
    graph = proto.graph
    nodes = list(graph.node)
    kind = draw(st.sampled_from(["dim", "op", "attr", "drop-input", "dup-output", "dangling", "cycle", "delete",
                                 "swap", "init-type", "init-dims", "init-bytes", "opset", "elem-type", "new-attr",
                                 "rename-output", "domain"]))
    if not nodes and kind not in ("dim", "init-type", "init-dims", "init-bytes", "opset", "elem-type"):
        kind = "opset"
    node = nodes[draw(st.integers(0, len(nodes) - 1))] if nodes else None
    if kind == "dim":
        infos = [vi for vi in _value_infos(graph) if vi.type.tensor_type.shape.dim]
        if infos:
            vi = infos[draw(st.integers(0, len(infos) - 1))]
            dims = vi.type.tensor_type.shape.dim
            dim = dims[draw(st.integers(0, len(dims) - 1))]
            value = draw(st.sampled_from([*DIMS, "sym", "?"]))
            if isinstance(value, str):
                dim.dim_param = value
            else:
                dim.dim_value = value
    elif kind == "op":
        node.op_type = draw(st.sampled_from(OP_TYPES))
    elif kind == "attr" and node.attribute:
        attr = node.attribute[draw(st.integers(0, len(node.attribute) - 1))]
        if attr.type == onnx.AttributeProto.INT:
            attr.i = draw(st.sampled_from([-(2**40), -1, 0, 1, 7, 2**31, 2**62]))
        elif attr.type == onnx.AttributeProto.FLOAT:
            attr.f = draw(st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -1.0, 1e30]))
        elif attr.type == onnx.AttributeProto.INTS:
            del attr.ints[:]
            attr.ints.extend(draw(st.lists(st.integers(-3, 9), max_size=6)))
        elif attr.type == onnx.AttributeProto.STRING:
            attr.s = draw(st.sampled_from([b"", b"garbage", b"\xff\xfe", b"SAME_UPPER", b"linear"]))
        else:
            attr.type = draw(st.sampled_from([onnx.AttributeProto.INT, onnx.AttributeProto.FLOATS,
                                              onnx.AttributeProto.UNDEFINED, onnx.AttributeProto.GRAPH]))
    elif kind == "drop-input" and node.input:
        at = draw(st.integers(0, len(node.input) - 1))
        if draw(st.booleans()):
            del node.input[at]
        else:
            node.input[at] = ""
    elif kind == "dup-output":
        if draw(st.booleans()) and node.output:
            node.output.append(node.output[0])
        elif graph.output:
            graph.output.append(graph.output[0])
    elif kind == "dangling" and node.input:
        node.input[draw(st.integers(0, len(node.input) - 1))] = "no_such_tensor"
    elif kind == "cycle" and node.input and node.output:
        node.input[0] = node.output[0]
    elif kind == "delete":
        graph.node.remove(node)
    elif kind == "swap" and len(nodes) > 1:
        a, b = draw(st.integers(0, len(nodes) - 1)), draw(st.integers(0, len(nodes) - 1))
        first, second = onnx.NodeProto(), onnx.NodeProto()
        first.CopyFrom(graph.node[a])
        second.CopyFrom(graph.node[b])
        graph.node[a].CopyFrom(second)
        graph.node[b].CopyFrom(first)
    elif kind in ("init-type", "init-dims", "init-bytes") and graph.initializer:
        init = graph.initializer[draw(st.integers(0, len(graph.initializer) - 1))]
        if kind == "init-type":
            init.data_type = draw(st.sampled_from(ELEM_TYPES))
        elif kind == "init-dims":
            del init.dims[:]
            init.dims.extend(draw(st.lists(st.sampled_from(DIMS), max_size=4)))
        elif init.raw_data:
            init.raw_data = init.raw_data[: draw(st.integers(0, len(init.raw_data)))]
    elif kind == "opset":
        entry = proto.opset_import[0] if proto.opset_import else proto.opset_import.add()
        entry.version = draw(st.sampled_from([0, 1, 6, 7, 11, 13, 99, 2**40]))
    elif kind == "elem-type":
        infos = _value_infos(graph)
        if infos:
            infos[draw(st.integers(0, len(infos) - 1))].type.tensor_type.elem_type = draw(st.sampled_from(ELEM_TYPES))
    elif kind == "new-attr":
        node.attribute.append(helper.make_attribute(draw(st.sampled_from(["axis", "bogus", "perm", "alpha"])),
                                                    draw(st.sampled_from([1, -7, 0.5, [1, 0], "x"]))))
    elif kind == "rename-output" and node.output:
        node.output[0] = draw(st.sampled_from(["x", graph.output[0].name if graph.output else "y", "", "fresh"]))
    elif kind == "domain":
        node.domain = draw(st.sampled_from(["com.microsoft", "ai.onnx.ml", "ai.onnx", "bogus"]))
    return kind


@st.composite
def mutated_protos(draw: Callable[..., Any]) -> tuple[onnx.ModelProto, list[str]]:
    """A seed model parsed and given 1-3 structured mutations; also the list of mutations (for reports)."""
    seeds = seed_models()
    proto = onnx.ModelProto()
    proto.ParseFromString(seeds[draw(st.sampled_from(sorted(seeds)))])
    done = [_mutate(proto, draw) for _ in range(draw(st.integers(1, 3)))]
    return proto, done


# -- random graphs ---------------------------------------------------------------------------------------------
@dataclass
class GraphBuilder:
    """A graph grown one op at a time with its shapes known, from one float32 input."""

    shape: tuple[int, ...]
    rng: np.random.Generator
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: dict[str, np.ndarray] = field(default_factory=dict)
    current: str = "x"
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def const(self, value: np.ndarray) -> str:
        name = f"c{len(self.inits)}"
        self.inits[name] = value
        return name

    def add(self, op: str, inputs: list[str], shape: tuple[int, ...], **attrs: Any) -> None:
        out = f"t{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op.lower()}{len(self.nodes)}", **attrs))
        self.current, self.shape = out, shape
        self.shapes[out] = shape

    def weights(self, *shape: int) -> np.ndarray:
        return (self.rng.standard_normal(shape) / math.sqrt(max(1, math.prod(shape[1:])))).astype(np.float32)


UNARY = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "LeakyRelu", "Softsign", "HardSigmoid", "Elu"]
BINARY = ["Add", "Mul", "Sub", "Max", "Min"]


def _grow(g: GraphBuilder, op: str, draw: Callable[..., Any]) -> None:
    """Append ``op`` to ``g`` when it applies to the current shape (else a Relu)."""
    shape, rank = g.shape, len(g.shape)
    if op in UNARY:
        g.add(op, [g.current], shape)
    elif op in BINARY:
        if draw(st.booleans()) and len(g.shapes) > 1:
            same = [n for n, s in g.shapes.items() if s == shape and n != g.current]
            if same:
                g.add(op, [g.current, draw(st.sampled_from(same))], shape)
                return
        # a constant broadcast along some axes
        bshape = tuple(d if draw(st.booleans()) else 1 for d in shape)[draw(st.integers(0, rank - 1)):]
        g.add(op, [g.current, g.const(g.rng.standard_normal(bshape).astype(np.float32))], shape)
    elif op == "MatMul":
        k = draw(st.integers(1, 9))
        g.add("MatMul", [g.current, g.const(g.weights(shape[-1], k))], (*shape[:-1], k))
    elif op == "Gemm" and rank == 2:
        k = draw(st.integers(1, 9))
        g.add("Gemm", [g.current, g.const(g.weights(k, shape[1])), g.const(g.weights(k))], (shape[0], k), transB=1)
    elif op == "Conv" and rank == 4:
        n, c, h, w = shape
        m, kh, kw = draw(st.integers(1, 6)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
        pad, stride = draw(st.integers(0, 1)), draw(st.integers(1, 2))
        group = c if draw(st.booleans()) and m % c == 0 else 1
        oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
        if oh < 1 or ow < 1:
            g.add("Relu", [g.current], shape)
            return
        weight = g.weights(m, c // group, kh, kw)
        g.add("Conv", [g.current, g.const(weight), g.const(g.weights(m))], (n, m, oh, ow), pads=[pad] * 4,
              strides=[stride, stride], group=group)
    elif op in ("MaxPool", "AveragePool") and rank == 4 and min(shape[2:]) >= 2:
        n, c, h, w = shape
        g.add(op, [g.current], (n, c, h // 2, w // 2), kernel_shape=[2, 2], strides=[2, 2])
    elif op == "BatchNormalization" and rank == 4:
        c = shape[1]
        params = [g.const(g.rng.standard_normal(c).astype(np.float32)) for _ in range(3)]
        var = g.const((np.abs(g.rng.standard_normal(c)) + 0.5).astype(np.float32))
        g.add(op, [g.current, *params, var], shape)
    elif op == "Reshape":
        target = (shape[0], -1) if rank > 1 else (-1,)
        g.add("Reshape", [g.current, g.const(np.array(target, np.int64))],
              (shape[0], math.prod(shape[1:])) if rank > 1 else shape)
    elif op == "Transpose":
        perm = draw(st.permutations(list(range(rank))))
        g.add("Transpose", [g.current], tuple(shape[p] for p in perm), perm=list(perm))
    elif op == "Concat":
        axis = draw(st.integers(0, rank - 1))
        out = list(shape)
        out[axis] *= 2
        g.add("Concat", [g.current, g.current], tuple(out), axis=axis)
    elif op == "Softmax":
        g.add("Softmax", [g.current], shape, axis=draw(st.integers(-rank, rank - 1)))
    elif op == "ReduceMean":
        axes = sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1, max_size=rank)))
        keep = draw(st.integers(0, 1))
        out = tuple(1 if a in axes else d for a, d in enumerate(shape)) if keep else \
            tuple(d for a, d in enumerate(shape) if a not in axes)
        if not out:
            keep, out = 1, tuple(1 for _ in shape)
        g.add("ReduceMean", [g.current], out, axes=axes, keepdims=keep)
    elif op == "Flatten" and rank > 1:
        axis = draw(st.integers(0, rank))
        g.add("Flatten", [g.current], (math.prod(shape[:axis]), math.prod(shape[axis:])), axis=axis)
    else:
        g.add("Relu", [g.current], shape)


GRAPH_OPS = [*UNARY, *BINARY, "MatMul", "Gemm", "Conv", "MaxPool", "AveragePool", "BatchNormalization", "Reshape",
             "Transpose", "Concat", "Softmax", "ReduceMean", "Flatten"]


@st.composite
def random_graphs(draw: Callable[..., Any]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A valid ONNX model of 1-6 supported ops on one float32 input of rank 2-4, and its seeded input."""
    rank = draw(st.integers(2, 4))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(rank))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    g = GraphBuilder(shape, rng, shapes={"x": shape})
    for _ in range(draw(st.integers(1, 6))):
        _grow(g, draw(st.sampled_from(GRAPH_OPS)), draw)
    graph = helper.make_graph(g.nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info(g.current, TensorProto.FLOAT, list(g.shape))],
                              [numpy_helper.from_array(v, k) for k, v in g.inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": rng.standard_normal(shape).astype(np.float32)}


def check_graph(model: onnx.ModelProto, feeds: dict[str, np.ndarray], backend: str, with_ort: bool = True) -> None:
    """``backend`` agrees with the numpy backend (and the numpy backend with ONNX Runtime, when installed)."""
    onnx.checker.check_model(model, full_check=True)  # the generator makes only valid models
    loaded = ws.load_model(model, name="fuzz")
    with ws.Worker(loaded, "cpu", threads=1) as worker:
        want = worker.run(feeds)
    out = model.graph.output[0].name
    if backend != "cpu":
        with ws.Worker(loaded, backend) as worker:
            got = worker.run(feeds)
            again = worker.run(feeds)  # the replayed plan
        np.testing.assert_allclose(got[out], want[out], rtol=1e-3, atol=1e-4, err_msg=f"{backend} vs numpy")
        np.testing.assert_array_equal(again[out], got[out], err_msg="the replay differs from the recorded run")
    if with_ort:
        try:
            import onnxruntime as ort
        except ImportError:
            return
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        (reference,) = session.run(None, feeds)
        np.testing.assert_allclose(want[out], reference, rtol=1e-4, atol=1e-5, err_msg="numpy vs onnxruntime")


# -- campaigns -------------------------------------------------------------------------------------------------
def campaign_settings(examples: int, seed: int | None) -> settings:
    """Hypothesis settings: ``examples`` examples, derandomized when ``seed`` is None (reproducible CI runs)."""
    return settings(max_examples=examples, derandomize=seed is None, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=True)


def run_load(examples: int, seed: int | None) -> dict[str, int]:
    """The loader campaign: byte mutations and structured mutations, half the examples each."""
    outcomes: dict[str, int] = {}

    def note(what: str) -> None:
        outcomes[what] = outcomes.get(what, 0) + 1

    @campaign_settings(max(1, examples // 2), seed)
    @given(mutated_bytes())
    def bytes_hold(data: bytes) -> None:
        note(check_load(data))

    @campaign_settings(max(1, examples - examples // 2), seed)
    @given(mutated_protos())
    def protos_hold(mutated: tuple[onnx.ModelProto, list[str]]) -> None:
        proto, _ = mutated
        note(check_load(proto))
        note(check_load(proto.SerializeToString(), run=False))

    for test in (bytes_hold, protos_hold):
        _seeded(test, seed)()
    return outcomes


def run_graphs(examples: int, seed: int | None, backend: str) -> int:
    """The graph campaign; returns the number of examples run."""
    count = 0

    @campaign_settings(examples, seed)
    @given(random_graphs())
    def graphs_agree(case: tuple[onnx.ModelProto, dict[str, np.ndarray]]) -> None:
        nonlocal count
        count += 1
        check_graph(*case, backend=backend)

    _seeded(graphs_agree, seed)()
    return count


def _seeded(test: Callable[[], None], seed: int | None) -> Callable[[], None]:
    from hypothesis import seed as hypothesis_seed

    return test if seed is None else hypothesis_seed(seed)(test)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("campaign", choices=["load", "graphs"])
    parser.add_argument("--examples", type=int, default=None, help="examples to try (load: 2000, graphs: 300)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: derandomized, as in CI)")
    parser.add_argument("--backend", default="gpu-compute", help="graphs: the backend compared with numpy")
    args = parser.parse_args(argv)
    try:
        if args.campaign == "load":
            outcomes = run_load(args.examples or 2000, args.seed)
            print("load campaign held:", ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
        else:
            count = run_graphs(args.examples or 300, args.seed, args.backend)
            print(f"graphs campaign held: {count} graphs agree on {args.backend}")
    except Exception as exc:  # the falsifying examples ride in the exceptions' notes
        for finding in getattr(exc, "exceptions", [exc]):
            print(f"FINDING: {type(finding).__name__}: {finding}", file=sys.stderr)
            for note in getattr(finding, "__notes__", []):
                print(f"    {note[:2000]}", file=sys.stderr)
            if finding.__cause__ is not None:
                traceback.print_exception(finding.__cause__, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
