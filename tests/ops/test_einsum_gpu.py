"""Einsum on every backend: the LowerEinsum pass (passes/einsum.py) rewrites it into Transpose, Unsqueeze, Squeeze,
Reshape, ReduceSum, Mul and MatMul layers named after it, so the GPU backends run it with no fallback layer and
every backend runs the same graph; answers match ONNX Runtime's. A diagonal (``ii->i``) and an Einsum whose operand
ranks are unknown stay Einsums and fall back with a reason that says so; dims that vary between runs keep working."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import BACKENDS, ort_outputs
from onnx import helper as h

import wgsentis as ws

F = onnx.TensorProto.FLOAT
RNG = np.random.default_rng(29)


def _model(equation: str, shapes: list[tuple], declared: list[tuple | None] | None = None) -> onnx.ModelProto:
    """One Einsum over graph inputs x0, x1, ...; ``declared``: the shapes the graph declares (symbolic names, or
    None for an unknown rank), by default ``shapes``."""
    names = [f"x{i}" for i in range(len(shapes))]
    declared = declared or list(shapes)
    graph = h.make_graph([h.make_node("Einsum", names, ["y"], name="mix", equation=equation)], "einsum",
                         [h.make_tensor_value_info(n, F, s) for n, s in zip(names, declared, strict=True)],
                         [h.make_tensor_value_info("y", F, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _feeds(shapes: list[tuple]) -> dict[str, np.ndarray]:
    return {f"x{i}": RNG.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}


CASES = [
    ("btgi,gih->btgh", [(2, 3, 4, 5), (4, 5, 6)]),  # a grouped linear (a speech-enhancement model's)
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("...ij,...jk->...ik", [(1, 3, 3, 4), (2, 3, 4, 5)]),  # broadcast ellipsis (a size-1 dim)
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output
    ("ijk,jl->il", [(2, 3, 4), (3, 5)]),  # k in one operand only: summed first
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),  # three operands, chained
    ("abcd,cdf->abf", [(2, 3, 4, 5), (4, 5, 6)]),  # two contracted labels: merged by a Reshape
    ("ij,ij->ij", [(2, 3), (2, 3)]),  # elementwise: Mul
    ("i,j->ij", [(3,), (4,)]),  # an outer product: Mul
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("equation", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_einsum_matches_ort_with_no_fallback(backend: str, equation: str, shapes: list[tuple]) -> None:
    model = _model(equation, shapes)
    feeds = _feeds(shapes)
    expected = ort_outputs(model, feeds)[0]
    with ws.Worker(ws.load_model(model), backend) as worker:
        got = worker.run(feeds)["y"]
        stats = worker.stats()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert stats.get("fallback_layers", []) == []


def test_lowered_layers_carry_the_einsums_name() -> None:
    model = ws.load_model(_model("btgi,gih->btgh", [(2, 3, 4, 5), (4, 5, 6)]))
    assert "Einsum" not in [layer.op_type for layer in model.layers]
    assert all(layer.name.startswith("mix/") for layer in model.layers)
    assert model.layers[-1].outputs == ["y"]
    assert model.add_output("mix") == "y"


@pytest.mark.parametrize("backend", BACKENDS)
def test_symbolic_dims_vary_between_runs(backend: str) -> None:
    equations = [("btgi,gih->btgh", [("b", "t", 4, 5), (4, 5, 6)]), ("abcd,cdf->abf", [(2, 3, 4, 5), (4, 5, "f")])]
    for equation, declared in equations:
        model = _model(equation, [tuple(1 for _ in s) for s in declared], declared)
        with ws.Worker(ws.load_model(model), backend) as worker:
            for scale in (2, 3):
                shapes = [tuple(scale * 2 if isinstance(d, str) else d for d in s) for s in declared]
                feeds = _feeds(shapes)
                np.testing.assert_allclose(worker.run(feeds)["y"], ort_outputs(model, feeds)[0], rtol=1e-4, atol=1e-5)
            assert worker.stats().get("fallback_layers", []) == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("equation", "declared", "why"), [
    ("ii->i", [(3, 3)], "repeats label 'i' (a diagonal)"),
    ("...j,jk->...k", [None, (4, 5)], "rank was unknown"),
])
def test_kept_einsum_falls_back_with_its_reason(backend: str, equation: str, declared: list, why: str) -> None:
    shapes = [(3, 3)] if equation == "ii->i" else [(3, 4), (4, 5)]
    model = _model(equation, shapes, declared)
    feeds = _feeds(shapes)
    with ws.Worker(ws.load_model(model), backend) as worker:
        np.testing.assert_allclose(worker.run(feeds)["y"], ort_outputs(model, feeds)[0], rtol=1e-4, atol=1e-5)
        stats = worker.stats()
    if backend != "cpu":
        assert stats["fallback_layers"] == ["mix"]
        assert why in stats["placements"][0]["reason"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_operand_of_unknown_shape_takes_its_rank_from_the_equation(backend: str) -> None:
    # DeepFilterNet3's grouped linears read a Reshape to a target computed at run time: shape inference gives no
    # shape, but "btgi" (no ellipsis) fixes the rank at 4, so the Einsum is lowered all the same.
    shapes = [(2, 3, 4, 5), (4, 5, 6)]
    model = _model("btgi,gih->btgh", shapes, [None, (4, 5, 6)])
    feeds = _feeds(shapes)
    with ws.Worker(ws.load_model(model), backend) as worker:
        np.testing.assert_allclose(worker.run(feeds)["y"], ort_outputs(model, feeds)[0], rtol=1e-4, atol=1e-5)
        assert worker.stats().get("fallback_layers", []) == []
