"""Opset adapters (ops/spec.py ``OpsetAdapter``): the GPU backends register only the canonical forms of the ops
whose later opsets made attributes inputs, and run older layers through the spec's adapter, with the cpu
oracle's results and no fallback; an older layer the canonical form cannot express declines to the CPU kernel,
which names the fault."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import wgsentis as ws
from wgsentis.errors import LayerError
from wgsentis.ops import registry, spec

GPU_BACKENDS = ("gpu-compute", "gpu-pixel")
RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
XI = RNG.integers(-50, 50, (2, 3, 4, 5)).astype(np.int64)


def _model(op: str, opset: int, attrs: dict, x: np.ndarray, inits=(), outputs: int = 1) -> bytes:
    names = ["x", *[n for n, _ in inits]]
    node = helper.make_node(op, names, [f"y{k}" for k in range(outputs)], **attrs)
    elem = TensorProto.FLOAT if x.dtype == np.float32 else TensorProto.INT64
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info("x", elem, x.shape)],
                              [helper.make_tensor_value_info(f"y{k}", elem, None) for k in range(outputs)],
                              initializer=[numpy_helper.from_array(v, n) for n, v in inits])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    proto.ir_version = 7
    return proto.SerializeToString()


# (case, op, opset, attributes, input, initializers, outputs)
CASES = [
    ("reshape_1", "Reshape", 4, {"shape": [2, -1]}, X, (), 1),
    ("squeeze_1_axes", "Squeeze", 11, {"axes": [0]}, X[:1], (), 1),
    ("squeeze_1_all", "Squeeze", 11, {}, X[:1, :, :1], (), 1),
    ("unsqueeze_1", "Unsqueeze", 11, {"axes": [0, 5]}, X, (), 1),
    ("split_2_sizes", "Split", 11, {"axis": 1, "split": [1, 2]}, X, (), 2),
    ("split_2_equal", "Split", 11, {"axis": 1}, X, (), 3),
    ("split_1_attr", "Split", 1, {"axis": 2, "split": [3, 1]}, X, (), 2),
    ("split_1_input", "Split", 1, {"axis": 2}, X, [("s", np.array([1, 3], np.int64))], 2),
    ("slice_1", "Slice", 9, {"starts": [1, 0], "ends": [3, -1], "axes": [2, 3]}, X, (), 1),
    ("slice_1_no_axes", "Slice", 9, {"starts": [1], "ends": [2]}, X, (), 1),
    ("tile_1", "Tile", 5, {}, X, [("t", np.array(3, np.int64)), ("a", np.array(1, np.int64))], 1),
    ("pad_2_constant", "Pad", 10, {"pads": [0, 1, 1, 2, 0, 0, 2, 1], "value": 1.5}, X, (), 1),
    ("pad_2_reflect", "Pad", 10, {"pads": [0, 0, 1, 2, 0, 0, 2, 1], "mode": "reflect"}, X, (), 1),
    ("pad_2_edge_int64", "Pad", 10, {"pads": [0, 0, 1, 2, 0, 0, 2, 1], "mode": "edge"}, XI, (), 1),
    ("pad_1", "Pad", 1, {"paddings": [0, 0, 1, 1, 0, 0, 1, 1], "value": -2.0}, X, (), 1),
    ("upsample_7", "Upsample", 8, {"scales": [1.0, 1.0, 2.0, 3.0], "mode": "nearest"}, X, (), 1),
    ("reduce_mean_11", "ReduceMean", 11, {"axes": [1], "keepdims": 0}, X, (), 1),
    ("reduce_mean_13_all", "ReduceMean", 13, {}, X, (), 1),
    ("reduce_sum_11", "ReduceSum", 11, {"axes": [-1, 2]}, X, (), 1),
    ("reduce_max_11_int64", "ReduceMax", 11, {"axes": [3]}, XI, (), 1),
    ("reduce_l2_11", "ReduceL2", 11, {"axes": [0, 1]}, X, (), 1),
    ("top_k_1", "TopK", 9, {"k": 2, "axis": 1}, X, (), 2),
    ("top_k_10", "TopK", 10, {"axis": -1}, X, [("k", np.array([3], np.int64))], 2),
    ("dropout_10_mask", "Dropout", 11, {"ratio": 0.3}, X, (), 2),
    ("dropout_6", "Dropout", 6, {"is_test": 1}, X, (), 1),
]


@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize(("case", "op", "opset", "attrs", "x", "inits", "outputs"), CASES, ids=[c[0] for c in CASES])
def test_older_opset_runs_through_the_adapter(backend, case, op, opset, attrs, x, inits, outputs):
    model = ws.load_model(_model(op, opset, attrs, x, inits, outputs), name=case)
    with ws.Worker(model, "cpu") as cpu:
        expected = cpu.run({"x": x})
    with ws.Worker(model, backend) as worker:
        got = worker.run({"x": x})
        assert not worker.stats()["fallback_layers"], worker.stats()["fallback_layers"]
    for name, want in expected.items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_backends_register_only_the_canonical_forms(backend):
    """Every adapter's older form reaches the canonical builder: no GPU backend keeps a builder of its own for an
    opset an adapter serves (that would be the per-backend copy the adapters replace)."""
    ops = registry.supported_ops(backend)
    checked = 0
    for (domain, op), versions in ops.items():
        for adapter in spec.spec_of(op, domain).opset_adapters:
            assert adapter.canonical in versions, (op, adapter.canonical)
            assert not [v for v in versions if adapter.since <= v < adapter.canonical], (op, versions)
            impl = registry.lookup(op, domain, adapter.since, backend)
            assert impl is not None and impl.since == adapter.since, (op, adapter.since)
            checked += 1
    assert checked >= 20


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_an_older_form_the_canonical_cannot_express_names_its_fault(backend):
    """Unsqueeze-1 without axes: the adapter declines, the layer runs its CPU kernel, whose error names the layer,
    the same error as on the cpu backend."""
    model = ws.load_model(_model("Unsqueeze", 11, {}, X), name="unsqueeze_no_axes")
    errors = []
    for name in ("cpu", backend):
        with ws.Worker(model, name) as worker, pytest.raises(LayerError) as info:
            worker.run({"x": X})
        errors.append(str(info.value))
    assert "Unsqueeze" in errors[1]
    assert errors[0].split("(inputs")[0].strip() == errors[1].split("(inputs")[0].strip()


class _Layer:
    def __init__(self, op_type: str, opset: int, attrs: dict) -> None:
        self.op_type, self.domain, self.opset, self.attrs, self.name = op_type, "", opset, attrs, op_type


@pytest.mark.parametrize(("op", "opset", "attrs", "args", "want"), [
    ("Tile", 5, {}, [X, np.array(3), np.array(1)], (2, 9, 4, 5)),
    ("Tile", 6, {}, [X, np.array([1, 2, 1, 3])], (2, 6, 4, 15)),
    ("Pad", 2, {"pads": [0, 1, 1, 2, 0, 0, 2, 1]}, [X], (2, 4, 7, 8)),
    ("Pad", 1, {"paddings": [0, 0, 1, 1, 0, 0, 1, 1]}, [X], (2, 3, 6, 7)),
    ("Pad", 11, {}, [X, np.array([0, 0, 1, 1, 0, 0, 1, 1])], (2, 3, 6, 7)),
    ("Upsample", 7, {"scales": [1.0, 1.0, 2.0, 3.0]}, [X], (2, 3, 8, 15)),
    ("Upsample", 9, {}, [X, np.array([1.0, 1.0, 2.0, 3.0], np.float32)], (2, 3, 8, 15)),
], ids=lambda v: v if isinstance(v, str | int) else None)
def test_size_rules_see_older_opsets_through_the_adapters(op, opset, attrs, args, want):
    """The memory budget's size rules are written once, for the canonical form: an older layer's outputs are sized
    through its adapter (the same shapes the kernels give)."""
    from wgsentis import budget

    predicted = budget.predict(_Layer(op, opset, attrs), args)
    assert predicted and predicted[0][0] == want


def test_a_size_rule_on_an_inexpressible_older_layer_predicts_nothing():
    from wgsentis import budget

    assert budget.predict(_Layer("Pad", 2, {}), [X]) == []  # Pad-2 without pads: the kernel's error to report
