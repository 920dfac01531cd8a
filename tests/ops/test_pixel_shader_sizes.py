"""Sizes live in uniforms, not in shader source (issue 30): on gpu-pixel, a model whose ops only change size builds
no pipeline of its own once the first size has run (every draw's pipeline key, which holds its shader's
substitutions and constants and so determines its source, is one the first size made), and answers as the CPU
does. Before the shaders moved to files, TopK (its row length) and FeatureVectorizer (its column offsets) failed
this. Also the counter that shows it: ``stats()["pipelines_created"]``, the pipelines a program's recordings built.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import helper

import gpu_check
import wgsentis as ws
from wgsentis.backends.gpu.device import get_context, wgsl_source

pytestmark = gpu_check.requires_gpu
PIXEL = "gpu-pixel"
RNG = np.random.default_rng(30)


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _top_k(n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = _x(2, n)
    return gpu_check.node_model("TopK", {"x": x}, 2, constants={"k": np.array([3], np.int64)}, axis=-1), {"x": x}


def _arg_max(n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = _x(3, n)
    return gpu_check.node_model("ArgMax", {"x": x}, axis=-1), {"x": x}


def _reduce_mean(n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = _x(3, n)
    return gpu_check.node_model("ReduceMean", {"x": x}, axes=[-1]), {"x": x}


def _softmax(n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = _x(3, n)
    return gpu_check.node_model("Softmax", {"x": x}, axis=-1), {"x": x}


def _layer_norm(n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = _x(3, n)
    constants = {"scale": _x(n), "bias": _x(n)}
    return gpu_check.node_model("LayerNormalization", {"x": x}, constants=constants, axis=-1), {"x": x}


def _instance_norm(n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = _x(1, 3, n)
    constants = {"scale": _x(3), "bias": _x(3)}
    return gpu_check.node_model("InstanceNormalization", {"x": x}, constants=constants), {"x": x}


def _max_pool(n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = _x(1, 5, n, n)
    return gpu_check.node_model("MaxPool", {"x": x}, kernel_shape=[2, 2]), {"x": x}


def _global_average_pool(n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = _x(2, 3, n, n)
    return gpu_check.node_model("GlobalAveragePool", {"x": x}), {"x": x}


def _feature_vectorizer(n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"a": _x(4, n), "b": _x(4, 3)}  # b padded to 4 columns: the spans move with n
    node = helper.make_node("FeatureVectorizer", ["a", "b"], ["y"], domain="ai.onnx.ml", inputdimensions=[n, 4])
    inputs = [helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, v.shape) for k, v in feeds.items()]
    graph = helper.make_graph([node], "vectorizer", inputs,
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    return model, feeds


CASES: dict[str, tuple[Callable[[int], tuple[onnx.ModelProto, dict[str, np.ndarray]]], int, int]] = {
    "TopK": (_top_k, 10, 23), "ArgMax": (_arg_max, 10, 23), "ReduceMean": (_reduce_mean, 10, 23),
    "Softmax": (_softmax, 10, 23), "LayerNormalization": (_layer_norm, 10, 23),
    "InstanceNormalization": (_instance_norm, 12, 37), "MaxPool": (_max_pool, 6, 9),
    "GlobalAveragePool": (_global_average_pool, 3, 5), "FeatureVectorizer": (_feature_vectorizer, 2, 5),
}


@pytest.mark.parametrize("op", list(CASES))
def test_a_second_size_builds_no_pipeline(op):
    gpu_check.second_size_builds_no_pipeline(op, PIXEL, *CASES[op], rtol=1e-5, atol=1e-6)


def test_the_context_counts_the_pipelines_it_builds_per_owner():
    ctx = get_context()

    class Owner:
        """Stands for a program."""

    owner, other = Owner(), Owner()
    key = ("test_pixel_shader_sizes", id(owner))  # a key no other test asks for
    source = wgsl_source("compute/probe_division.wgsl")
    before = ctx.pipelines_created
    ctx.pipeline(key, source, {}, "counter test", owner=owner)
    ctx.pipeline(key, source, {}, "counter test", owner=owner)  # cached: not built again
    ctx.pipeline(key, source, {}, "counter test", owner=other)  # cached for another owner: not built either
    assert ctx.pipelines_created == before + 1
    assert ctx.pipelines_created_by(owner) == 1
    assert ctx.pipelines_created_by(other) == 0


def test_stats_report_the_pipelines_a_program_built():
    model, feeds = _top_k(17)
    with ws.Worker(ws.load_model(model), PIXEL) as worker:
        worker.run(feeds)
        created = worker.stats()["pipelines_created"]
        worker.run(feeds)  # the replay builds nothing
        assert worker.stats()["pipelines_created"] == created
        assert 0 <= created <= worker.stats()["pipelines"]


# -- the indexing and tensor ops (ops/indexing_pixel.py, tensor_pixel.py): their lengths, axes and coordinate moves
# are words too
def _gather(n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"x": _x(n, 5), "i": RNG.integers(-n, n, (2, 3)).astype(np.int64)}
    return gpu_check.node_model("Gather", feeds, axis=0), feeds


def _pad(n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = _x(2, n)
    return gpu_check.node_model("Pad", {"x": x}, constants={"pads": np.array([0, 1, 1, 3], np.int64)},
                                mode="reflect"), {"x": x}


def _scatter_elements(n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"x": _x(n, 4), "i": RNG.integers(0, n, (3, 4)).astype(np.int64), "u": _x(3, 4)}
    return gpu_check.node_model("ScatterElements", feeds, opset=18, axis=0, reduction="add"), feeds


def _cum_sum(n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = _x(3, n)
    return gpu_check.node_model("CumSum", {"x": x}, constants={"axis": np.array(1, np.int64)}, reverse=1), {"x": x}


def _concat(n: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    feeds = {"a": _x(2, n), "b": _x(2, 3), "c": _x(2, n + 1)}  # parts of unaligned widths: drawn lane by lane
    return gpu_check.node_model("Concat", feeds, axis=1), feeds


TENSOR_CASES: dict[str, tuple[Callable[[int], tuple[onnx.ModelProto, dict[str, np.ndarray]]], int, int]] = {
    "Gather": (_gather, 6, 11), "Pad": (_pad, 5, 13), "ScatterElements": (_scatter_elements, 5, 9),
    "CumSum": (_cum_sum, 6, 17), "Concat": (_concat, 5, 10),
}


@pytest.mark.parametrize("op", list(TENSOR_CASES))
def test_a_second_size_of_an_indexing_or_tensor_op_builds_no_pipeline(op):
    gpu_check.second_size_builds_no_pipeline(op, PIXEL, *TENSOR_CASES[op], rtol=1e-5, atol=1e-6)
