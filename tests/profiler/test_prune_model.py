"""ws.prune: unstructured and structured pruning of ONNX models from a plan, the written models' validity
(ONNX checker, ONNX Runtime), the structured speedup on the cpu backend, and the compare view's
estimated-against-measured speedups."""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import wgsentis as ws
from wgsentis.cli import main
from wgsentis.errors import InputError
from wgsentis.profiler import compare
from wgsentis.profiler.prune_model import PruneResult

ROOT = Path(__file__).resolve().parents[2]


class _Builder:
    """A small ONNX graph builder with seeded weights."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def name(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def const(self, value: np.ndarray, prefix: str = "w") -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs: Any) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{out}", **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, group: int = 1) -> str:
        w = self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / (cin // group * k * k))
        b = self.rng.standard_normal(cout) * 0.01
        return self.node("Conv", [x, self.const(w), self.const(b, "b")], kernel_shape=[k, k],
                         pads=[k // 2] * 4, group=group)

    def bn(self, x: str, c: int) -> str:
        scale = 1 + 0.1 * self.rng.standard_normal(c)
        bias = 0.1 * self.rng.standard_normal(c)
        mean = 0.1 * self.rng.standard_normal(c)
        var = 1 + 0.1 * np.abs(self.rng.standard_normal(c))
        return self.node("BatchNormalization", [x, *(self.const(v, "bn") for v in (scale, bias, mean, var))])

    def model(self, x: str, out: str, in_shape: list[int], out_shape: list[int]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "net", [helper.make_tensor_value_info(x, TensorProto.FLOAT, in_shape)],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], self.inits)
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        proto.ir_version = 8
        return proto


def resnet_like(channels: int = 64, size: int = 56, classes: int = 10, bn: bool = True) -> onnx.ModelProto:
    """Stem conv + BN + Relu, two residual blocks (1x1 then 3x3 conv, residual Add), a concat branch,
    a depthwise conv, an SE-style channel scale, global average pool, Flatten, Gemm. ``bn=False``: no
    BatchNormalization (a removed channel is then exactly a zeroed one)."""
    b = _Builder()
    if not bn:
        b.bn = lambda x, c: x  # type: ignore[method-assign]
    c = channels
    x = b.node("Relu", [b.bn(b.conv("input", 3, c, 3), c)])
    for _ in range(2):
        y = b.node("Relu", [b.bn(b.conv(x, c, c, 1), c)])
        y = b.bn(b.conv(y, c, c, 3), c)
        x = b.node("Relu", [b.node("Add", [x, y])])
    branch = b.node("Relu", [b.conv(x, c, c, 1)])
    x = b.node("Concat", [x, branch], axis=1)  # 2c channels: offsets of the two producers' channels
    x = b.node("Clip", [b.conv(x, 2 * c, 2 * c, 3, group=2 * c)],)  # depthwise: follows its input channels
    x = b.node("Relu", [b.bn(b.conv(x, 2 * c, 2 * c, 3), 2 * c)])
    # SE scale: x * sigmoid(conv(gap(x))) -- the scale's producer joins x's group
    se = b.node("Sigmoid", [b.conv(b.node("GlobalAveragePool", [x]), 2 * c, 2 * c, 1)])
    x = b.node("Mul", [x, se])
    x = b.node("Mul", [x, b.const(1 + 0.01 * b.rng.standard_normal((2 * c, 1, 1)), "s")])  # per-channel constant
    flat = b.node("Flatten", [b.node("MaxPool", [x], kernel_shape=[size, size])], axis=1)
    gemm = b.rng.standard_normal((classes, 2 * c)) * 0.1
    out = b.node("Gemm", [flat, b.const(gemm), b.const(np.zeros(classes), "b")], transB=1)
    return b.model("input", out, [1, 3, size, size], [1, classes])


def flatten_gemm() -> onnx.ModelProto:
    """Conv -> Relu -> Flatten over a 4x4 map -> Gemm -> Relu -> MatMul: the channel's block of columns."""
    b = _Builder(1)
    x = b.node("Relu", [b.conv("input", 3, 8, 3)])
    x = b.node("Flatten", [x], axis=1)
    x = b.node("Relu", [b.node("Gemm", [x, b.const(b.rng.standard_normal((8 * 16, 12)) * 0.1),
                                        b.const(np.zeros(12), "b")])])
    out = b.node("MatMul", [x, b.const(b.rng.standard_normal((12, 5)))])
    return b.model("input", out, [2, 3, 4, 4], [2, 5])


def ort_run(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.log_severity_level = 3  # IR 3 zoo models list their weights as inputs: ORT warns about each
    sess = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def weights(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def masked(proto: onnx.ModelProto, result: PruneResult) -> onnx.ModelProto:
    """``proto`` with the output channels structured pruning removed zeroed (weights and biases) instead."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    inits = {t.name: t for t in out.graph.initializer}
    by_name = {n.name: n for n in out.graph.node}
    for entry in result.layers.values():
        if entry.kept_indices is None or entry.kept_channels == entry.channels:
            continue
        node = by_name[entry.name]  # a depthwise conv reports the channels it follows: zeroed the same way
        gone = sorted(set(range(entry.channels)) - set(entry.kept_indices))
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        dim = 0 if node.op_type == "Conv" or (node.op_type == "Gemm" and trans_b) else 1
        for k, d in ((1, dim), (2, 0)):
            if len(node.input) > k and node.input[k] in inits:
                value = numpy_helper.to_array(inits[node.input[k]]).copy()
                np.moveaxis(value, d if value.ndim > 1 else 0, 0)[gone] = 0
                inits[node.input[k]].CopyFrom(numpy_helper.from_array(value, node.input[k]))
    return out


@pytest.fixture(scope="module")
def resnet() -> onnx.ModelProto:
    return resnet_like()


def test_level_zero_changes_nothing(resnet: onnx.ModelProto) -> None:
    for structured in (False, True):
        result = ws.prune(resnet, 0.0, structured=structured)
        assert isinstance(result, PruneResult)
        before, after = weights(resnet), weights(result.proto)
        assert before.keys() == after.keys()
        for name, value in before.items():
            assert after[name].tobytes() == value.tobytes(), name
        assert all(e.sparsity == 0.0 for e in result.layers.values())


def test_unstructured_keeps_shapes_and_reaches_level(resnet: onnx.ModelProto, tmp_path: Path) -> None:
    result = ws.prune(resnet, 0.7, output=tmp_path / "u.onnx")
    assert result.path == tmp_path / "u.onnx" and result.path.is_file()
    written = onnx.load(str(result.path))
    onnx.checker.check_model(written, full_check=True)
    before, after = weights(resnet), weights(written)
    assert {n: v.shape for n, v in before.items()} == {n: v.shape for n, v in after.items()}
    assert len(result.layers) == 10  # every Conv (depthwise too) and the Gemm
    for entry in result.layers.values():
        w = after[entry.weight]
        assert entry.sparsity == pytest.approx(0.7, abs=1 / w.size + 1e-9)
        assert np.count_nonzero(w == 0) == round(0.7 * w.size)
        # the zeros are the smallest magnitudes
        assert np.abs(before[entry.weight][w == 0]).max() <= np.abs(w[w != 0]).min()
    feeds = {"input": np.random.default_rng(0).random((1, 3, 56, 56), dtype=np.float32)}
    assert ort_run(written, feeds)[0].shape == (1, 10)


def test_dict_plan_and_model_forms(resnet: onnx.ModelProto, tmp_path: Path) -> None:
    names = list(ws.prune(resnet, 0.0).layers)
    first, last = names[0], names[-1]
    plan = {first: 0.5, resnet.graph.node[-1].output[0]: 0.9}  # a layer name, and a node by its output
    for source in (resnet, resnet.SerializeToString(), ws.load_model(resnet)):
        result = ws.prune(source, plan)
        assert result.layers[first].sparsity == pytest.approx(0.5, abs=1e-3)
        assert result.layers[last].sparsity == pytest.approx(0.9, abs=1e-3)
        assert all(e.sparsity == 0 for n, e in result.layers.items() if n not in (first, last))
    path = tmp_path / "m.onnx"
    onnx.save(resnet, str(path))
    assert ws.prune(str(path), plan).layers[first].sparsity == pytest.approx(0.5, abs=1e-3)


def test_loss_profile_budget(resnet: onnx.ModelProto) -> None:
    names = list(ws.prune(resnet, 0.0).layers)
    # a fake loss profile: sensitivity rises with depth, so the last layers are the most sensitive
    loss = {"format": "wgsentis-loss-profile/1", "layers": [
        {"name": n, "op_type": "Conv", "weight_names": [], "params": 1, "flops": 1, "sensitivity": float(i),
         "levels": [{"level": 0.8, "loss": float(i)}]} for i, n in enumerate(names)]}
    result = ws.prune(resnet, {"level": 0.8, "loss_profile": loss, "keep_dense": 0.2})
    dense = [n for n, e in result.layers.items() if e.sparsity == 0]
    assert sorted(dense) == sorted(names[-round(0.2 * len(names)):])  # the two most sensitive stay dense
    assert all(e.sparsity == pytest.approx(0.8, abs=1e-3) for n, e in result.layers.items() if n not in dense)
    # matched by weight names when the names differ; unscored layers are pruned at the level
    by_weight = {"layers": [{"name": "renamed", "weight_names": [result.layers[names[0]].weight],
                             "sensitivity": 5.0}]}
    result = ws.prune(resnet, {"level": 0.5, "loss_profile": by_weight, "keep_dense": 0.1})
    assert result.layers[names[0]].sparsity == 0
    assert all(e.sparsity > 0.49 for n, e in result.layers.items() if n != names[0])


def test_bad_plans_name_the_argument(resnet: onnx.ModelProto) -> None:
    relu = next(n.name for n in resnet.graph.node if n.op_type == "Relu")
    cases = [(1.0, "level"), (-0.1, "level"), (float("nan"), "level"), ("half", "level"), (True, "level"),
             ({"no_such_layer": 0.5}, "no_such_layer"), ({relu: 0.5}, "no prunable weight"),
             ({resnet.graph.node[0].name: 1.5}, "level of layer"),
             ({"level": 0.5, "loss_profile": {"nope": 1}}, "loss_profile"),
             ({"level": 0.5, "loss_profile": {"layers": []}, "keep_dense": 2}, "keep_dense")]
    for plan, word in cases:
        with pytest.raises(InputError, match="plan") as info:
            ws.prune(resnet, plan)
        assert word in str(info.value), (plan, str(info.value))
    with pytest.raises(InputError, match="structured"):
        ws.prune(resnet, 0.5, structured="yes")
    with pytest.raises(InputError, match="model_or_path"):
        ws.prune(42, 0.5)
    with pytest.raises(ws.errors.ModelLoadError, match="does not exist"):
        ws.prune("/nonexistent/model.onnx", 0.5)


def test_structured_flatten_gemm_matmul_matches_ort() -> None:
    proto = flatten_gemm()
    result = ws.prune(proto, 0.5, structured=True)
    onnx.checker.check_model(result.proto, full_check=True)
    kept = {e.op_type: e.kept_channels for e in result.layers.values()}
    assert kept == {"Conv": 4, "Gemm": 6, "MatMul": 5}  # the MatMul feeds the graph output: its width stays
    feeds = {"input": np.random.default_rng(0).random((2, 3, 4, 4), dtype=np.float32)}
    out = ort_run(result.proto, feeds)[0]
    assert out.shape == (2, 5)
    # the dense model with the removed channels' filters and biases zeroed computes the same outputs
    np.testing.assert_allclose(ort_run(masked(proto, result), feeds)[0], out, rtol=1e-4, atol=1e-5)
    worker = ws.Worker(ws.load_model(result.proto), "cpu", threads=1)
    try:
        np.testing.assert_allclose(next(iter(worker.run(feeds).values())), out, rtol=1e-4, atol=1e-5)
    finally:
        worker.close()


def test_structured_removal_equals_zeroing_without_bn() -> None:
    """Residual Adds, Concat offsets, a depthwise conv, an SE scale, a per-channel constant, MaxPool, Flatten
    and Gemm columns: removing the channels computes what zeroing their filters and biases computes."""
    proto = resnet_like(channels=16, size=12, bn=False)
    result = ws.prune(proto, 0.5, structured=True)
    onnx.checker.check_model(result.proto, full_check=True)
    assert sum(e.kept_channels is not None and e.kept_channels < e.channels for e in result.layers.values()) == 9
    feeds = {"input": np.random.default_rng(0).random((1, 3, 12, 12), dtype=np.float32)}
    np.testing.assert_allclose(ort_run(result.proto, feeds)[0], ort_run(masked(proto, result), feeds)[0],
                               rtol=1e-4, atol=1e-5)


def _sample_ms(worker: ws.Worker, feeds: dict[str, np.ndarray], repeat: int = 3) -> float:
    """The fastest of ``repeat`` back-to-back runs: other work on the shared cores only ever adds time."""
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        worker.run(feeds)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def test_structured_resnet_valid_and_faster(resnet: onnx.ModelProto, tmp_path: Path) -> None:
    result = ws.prune(resnet, 0.5, structured=True, output=tmp_path / "s.onnx")
    written = onnx.load(str(result.path))
    onnx.checker.check_model(written, full_check=True)
    feeds = {"input": np.random.default_rng(0).random((1, 3, 56, 56), dtype=np.float32)}
    dense_out, = ort_run(resnet, feeds)
    pruned_out, = ort_run(written, feeds)
    assert pruned_out.shape == dense_out.shape == (1, 10)
    pruned = [e for e in result.layers.values() if e.kept_channels is not None and e.kept_channels < e.channels]
    assert len(pruned) == 9, result.summary()  # all but the classifier (a graph output); the depthwise follows
    assert all(e.kept_channels == e.channels // 2 for e in pruned)
    # Measured latency: one thread each (two threads oversubscribe the two shared cores), alternating dense and
    # pruned samples in this process, the ratio of the medians of 7 samples.
    workers = {kind: ws.Worker(ws.load_model(m), "cpu", threads=1) for kind, m in (("dense", resnet),
                                                                                     ("pruned", written))}
    try:
        for w in workers.values():
            w.run(feeds)
        times: dict[str, list[float]] = {"dense": [], "pruned": []}
        for _ in range(7):
            for kind, w in workers.items():
                times[kind].append(_sample_ms(w, feeds))
    finally:
        for w in workers.values():
            w.close()
    speedup = statistics.median(times["dense"]) / statistics.median(times["pruned"])
    print(f"structured 50%: dense {statistics.median(times['dense']):.1f} ms, pruned "
          f"{statistics.median(times['pruned']):.1f} ms, speedup {speedup:.2f}x")
    assert speedup >= 1.3, times


@pytest.mark.parametrize("name", ["ppocr_cls", "squeezenet", "shufflenet"])
def test_structured_zoo_models_stay_valid(name: str) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    import zoo

    try:
        proto = zoo.load_proto(name, dense=name != "ppocr_cls")
    except Exception as exc:  # the reference models are fetched by tools/fetch_models.py
        pytest.skip(f"reference model {name} unavailable: {exc}")
    result = ws.prune(proto, 0.5, structured=True)
    onnx.checker.check_model(result.proto, full_check=True)
    feeds = zoo.input_feeds(name, proto)
    dense, = ort_run(proto, feeds)[:1]
    pruned, = ort_run(result.proto, feeds)[:1]
    assert pruned.shape == dense.shape
    assert any(e.kept_channels is not None and e.kept_channels < e.channels for e in result.layers.values()) \
        or name == "shufflenet", result.summary()


def test_compare_shows_estimated_and_measured_speedup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proto = resnet_like(channels=16, size=16)
    onnx.save(proto, str(tmp_path / "d.onnx"))
    result = ws.prune(proto, 0.5, structured=True, output=tmp_path / "p.onnx")
    common = {"backend": "cpu", "threads": 1, "runs": 3, "warmup": 1, "pruning_layers": 0, "measure_ceilings": False}
    dense = ws.profile(str(tmp_path / "d.onnx"), name="dense", **common)
    pruned = ws.profile(str(result.path), name="pruned", **common)
    stem = dense.layers[0]
    assert stem["op_type"] == "Conv" and stem["name"] in {e["name"] for e in pruned.layers}  # names are kept
    # Without estimates in the dense profile compare applies the rule itself: a compute-bound layer with half
    # its FLOPs gone is estimated at half its time; a memory-bound one keeps it.
    for e in dense.layers:
        e.pop("estimated_ms", None)
        e["bound"] = "compute" if e["name"] == stem["name"] else "memory"
    dense.to_json(tmp_path / "a.json")
    pruned.to_json(tmp_path / "b.json")
    assert main(["profile", "compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    text = capsys.readouterr().out
    assert "speedup of pruned vs dense" in text and "estimated" in text and "measured" in text
    rows = {line[:34].strip(): line[34:].split() for line in text.split("speedup of pruned vs dense")[1].splitlines()}
    _, _, removed, est, measured = rows[stem["name"][:33]]
    assert float(removed) == pytest.approx(50.0, abs=0.5)  # 3 -> 16 channels became 3 -> 8
    assert est == "2.00x"
    stem_after = next(e for e in pruned.layers if e["name"] == stem["name"])
    assert measured == f"{stem['time_ms'] / stem_after['time_ms']:.2f}x"
    total = rows["ms/batch (total)"]
    assert total[-1] == f"{dense.ms_per_batch / pruned.ms_per_batch:.2f}x"
    other = next(e for e in dense.layers if e["op_type"] == "Conv" and e["name"] != stem["name"])
    assert rows[other["name"][:33]][3] == "1.00x"  # memory-bound: keeps its time
    # With the dense profile's per-level estimates: read at the removed fraction (linear between levels).
    t = stem["time_ms"]
    stem["estimated_ms"] = {"0.4": t * 0.6, "0.9": t * 0.1}
    text = compare([dense.data, pruned.data])
    row = next(line for line in text.split("speedup of")[1].splitlines() if line.startswith(stem["name"][:33]))
    assert row.split()[4] == f"{t / (t * 0.5):.2f}x"
    # Profiles of other backends, or untimed ones, get no speedup section.
    assert "speedup of" not in compare([dense.data, {**pruned.data, "backend": "gpu-compute"}])
