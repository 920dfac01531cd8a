"""Helpers for op tests on the GPU backends: build a one-node model, run it on cpu and a GPU backend, compare."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from helpers import requires_gpu
from onnx import helper, numpy_helper

import wgsentis as ws
from wgsentis.dtypes import NUMPY_TO_ONNX

GPU_BACKENDS = ("gpu-compute", "gpu-pixel")
# requires_gpu: helpers', the one GPU skip policy
__all__ = ["GPU_BACKENDS", "compare", "node_model", "requires_gpu", "second_size_builds_no_pipeline"]


def node_model(op: str, inputs: dict[str, np.ndarray], n_outputs: int = 1,
               constants: dict[str, np.ndarray] | None = None, opset: int = 17, input_order: list[str] | None = None,
               **attrs: Any) -> onnx.ModelProto:
    """A model with one ``op`` node; ``inputs`` become graph inputs, ``constants`` initializers.
    ``input_order`` lists the node's input names in order ("" for an omitted optional input)."""
    constants = constants or {}
    order = input_order if input_order is not None else [*inputs, *constants]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, order, outs, name=f"{op.lower()}_node", **attrs)
    graph = helper.make_graph(
        [node], "op_test",
        [helper.make_tensor_value_info(k, NUMPY_TO_ONNX[v.dtype], v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def compare(model: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-5,
            allow_fallback: bool = False, backend: str | None = None,
            options: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """Run on cpu and ``backend`` (default: every GPU backend, gpu-compute and gpu-pixel: the same model gives
    the same answer on each); assert equal within tolerance, the same on a replay, and (by default) no fallback
    layer. ``options``: keyword arguments of the GPU backends' Workers. Returns the last GPU backend's outputs."""
    wg = ws.load_model(model)
    ref = ws.Worker(wg, "cpu", threads=1).run(feeds)
    got: dict[str, np.ndarray] = {}
    for name in (backend,) if backend else GPU_BACKENDS:
        with ws.Worker(wg, name, **(options or {})) as worker:
            got = worker.run(feeds)
            stats = worker.stats()
            again = worker.run(feeds)  # the replayed plan gives the same answer
        if not allow_fallback:
            assert stats["fallback_layers"] == [], f"{name} fell back: {stats['fallback_layers']}"
        for out, value in ref.items():
            assert got[out].shape == value.shape, f"{name} {out}: {got[out].shape} vs {value.shape}"
            assert got[out].dtype == value.dtype, f"{name} {out}: {got[out].dtype} vs {value.dtype}"
            np.testing.assert_allclose(got[out], value, rtol=rtol, atol=atol, err_msg=f"{name} {out}")
            np.testing.assert_array_equal(again[out], got[out])
    return got


def second_size_builds_no_pipeline(op: str, backend: str,
                                   make: Callable[[int], tuple[onnx.ModelProto, dict[str, np.ndarray]]], first: int,
                                   second: int, *, exact: bool = False, rtol: float = 1e-4, atol: float = 1e-4,
                                   options: dict[str, Any] | None = None, shaders: list[str] | None = None) -> None:
    """``op``'s model ``make(size)`` run on ``backend`` at ``first``, then at ``second`` in a new Worker: no fallback,
    no new pipeline (sizes live in uniforms), and the cpu's answer (within ``rtol``/``atol``, or ``exact``ly).
    ``options``: the GPU Workers' keyword arguments; ``shaders`` (the conftest fixture's list) is cleared before the
    second GPU run, so that it then holds that run's dispatches."""
    model_a, feeds_a = make(first)
    model_b, feeds_b = make(second)
    with ws.Worker(ws.load_model(model_a), backend, **(options or {})) as worker:
        worker.run(feeds_a)
        assert worker.stats()["fallback_layers"] == []
    with ws.Worker(ws.load_model(model_b), "cpu") as worker:
        want = worker.run(feeds_b)
    if shaders is not None:
        shaders.clear()
    with ws.Worker(ws.load_model(model_b), backend, **(options or {})) as worker:
        got = worker.run(feeds_b)
        stats = worker.stats()
    assert stats["fallback_layers"] == []
    assert stats["pipelines_created"] == 0, f"{op} at {second} built {stats['pipelines_created']} new pipelines"
    for name, value in want.items():
        if exact:
            np.testing.assert_array_equal(got[name], value, err_msg=f"{op} {name}")
        else:
            np.testing.assert_allclose(got[name], value, rtol=rtol, atol=atol, err_msg=f"{op} {name}")
