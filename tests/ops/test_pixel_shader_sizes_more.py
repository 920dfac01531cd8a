"""More of issue 30 on gpu-pixel: a second size (or, for the contrib quantized ops, other scale and zero-point
values) of a model already drawn builds no pipeline of its own, and answers as the CPU does. Each case failed this
before its fix: Conv's W bounds check (CHECK_W) followed the input width where only end pads or SAME padding pad
W; the recurrent ops' Y joins bound as many parts as the sequence had steps (and their ranks changed past one
join); the com.microsoft QLinear ops pasted their scales and zero points, and QLinearGlobalAveragePool its window
count, into the shader as literals.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import gpu_check

pytestmark = gpu_check.requires_gpu
PIXEL = "gpu-pixel"
RNG = np.random.default_rng(3030)
Case = tuple[onnx.ModelProto, dict[str, np.ndarray]]


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _codes(*shape: int) -> np.ndarray:
    return RNG.integers(0, 256, shape).astype(np.uint8)


# -- Conv: widths whose last column does and does not reach the end pad (output widths >= 8: the same columns per
# fragment at both sizes)
def _conv_end_pad(n: int) -> Case:
    feeds = {"x": _x(1, 4, 5, n)}
    constants = {"w": _x(8, 4, 3, 3), "b": _x(8)}
    return gpu_check.node_model("Conv", feeds, constants=constants, strides=[1, 2], pads=[1, 0, 1, 1]), feeds


def _conv_same_strided(n: int) -> Case:
    feeds = {"x": _x(1, 4, 6, n)}  # SAME_UPPER, stride 2: an odd width pads nothing, an even one the end
    return gpu_check.node_model("Conv", feeds, constants={"w": _x(6, 4, 3, 3)}, strides=[2, 2],
                                auto_pad="SAME_UPPER"), feeds


def _depthwise_end_pad(n: int) -> Case:
    feeds = {"x": _x(1, 8, 4, n)}
    return gpu_check.node_model("Conv", feeds, constants={"w": _x(8, 1, 3, 3)}, group=8, strides=[2, 2],
                                pads=[0, 0, 1, 1]), feeds


def _grouped_end_pad(n: int) -> Case:
    feeds = {"x": _x(1, 8, 4, n)}
    return gpu_check.node_model("Conv", feeds, constants={"w": _x(8, 4, 3, 3)}, group=2, strides=[1, 2],
                                pads=[0, 0, 0, 1]), feeds


# -- RNN, GRU, LSTM: sequence lengths under and over one Y join's parts (MAX_PARTS, 12); seq * batch >= 8, so the
# input projection draws as many rows per fragment at both (matmul_pixel.rows_per_fragment)
def _recurrent(op: str, gates: int) -> Callable[[int], Case]:
    def make(seq: int) -> Case:
        feeds = {"x": _x(seq, 2, 5)}
        constants = {"W": _x(2, gates * 8, 5), "R": _x(2, gates * 8, 8), "B": _x(2, 2 * gates * 8)}
        return gpu_check.node_model(op, feeds, n_outputs=2, constants=constants, hidden_size=8,
                                    direction="bidirectional"), feeds
    return make


SIZE_CASES: dict[str, tuple[Callable[[int], Case], int, int]] = {
    "Conv end pad": (_conv_end_pad, 17, 20), "Conv SAME stride 2": (_conv_same_strided, 17, 20),
    "depthwise Conv end pad": (_depthwise_end_pad, 17, 20), "grouped Conv end pad": (_grouped_end_pad, 17, 20),
    "RNN": (_recurrent("RNN", 1), 5, 14), "GRU": (_recurrent("GRU", 3), 5, 14),
    "LSTM": (_recurrent("LSTM", 4), 14, 30),
}


@pytest.mark.parametrize("case", list(SIZE_CASES))
def test_a_second_size_builds_no_pipeline(case):
    gpu_check.second_size_builds_no_pipeline(case, PIXEL, *SIZE_CASES[case], rtol=1e-4, atol=1e-5)


# -- the com.microsoft quantized ops: size and quantization parameters both change (k = 0, 1)
def _contrib(op: str, feeds: dict[str, np.ndarray], constants: dict[str, np.ndarray],
             order: list[str] | None = None, **attrs) -> Case:
    """One com.microsoft node over uint8 ``feeds`` and initializer ``constants``, its inputs in ``order``."""
    node = helper.make_node(op, order or [*feeds, *constants], ["y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph(
        [node], "contrib_quant",
        [helper.make_tensor_value_info(k, onnx.TensorProto.UINT8, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model, feeds


def _params(k: int) -> dict[str, np.ndarray]:
    """Per-tensor scales and zero points, other values for k = 1."""
    return {"xs": np.array(0.05 + 0.0213 * k, np.float32), "xz": np.uint8(128 - 9 * k)}


def _out_params(k: int) -> dict[str, np.ndarray]:
    return {"ys": np.array(0.09 - 0.0171 * k, np.float32), "yz": np.uint8(120 + 5 * k)}


def _binary(op: str) -> Callable[[int], Case]:
    def make(k: int) -> Case:
        n = 7 + 6 * k
        feeds = {"a": _codes(3, n), "b": _codes(3, n)}
        constants = {"as": _params(k)["xs"], "az": _params(k)["xz"], "bs": np.array(0.03 + 0.007 * k, np.float32),
                     "bz": np.uint8(100 + 3 * k), **_out_params(k)}
        return _contrib(op, feeds, constants, order=["a", "as", "az", "b", "bs", "bz", "ys", "yz"])
    return make


def _softmax(k: int) -> Case:
    consts = {**_params(k), "ys": np.array(1 / 256, np.float32), "yz": np.uint8(0)}
    return _contrib("QLinearSoftmax", {"x": _codes(3, 9 + 4 * k)}, consts, opset=13)


def _average_pool(k: int) -> Case:
    return _contrib("QLinearAveragePool", {"x": _codes(1, 3, 6 + 3 * k, 6 + 3 * k)}, {**_params(k), **_out_params(k)},
                    kernel_shape=[2, 2])


def _global_average_pool(k: int) -> Case:
    return _contrib("QLinearGlobalAveragePool", {"x": _codes(1, 5, 4 + 3 * k, 4 + 3 * k)},
                    {**_params(k), **_out_params(k)})


def _concat(k: int) -> Case:
    feeds = {"p": _codes(2, 3 + 4 * k), "q": _codes(2, 4)}  # q off a texel boundary at both sizes
    constants = {**_out_params(k), "ps": _params(k)["xs"], "pz": _params(k)["xz"],
                 "qs": np.array(0.02 + 0.01 * k, np.float32), "qz": np.uint8(7 + k)}
    return _contrib("QLinearConcat", feeds, constants, order=["ys", "yz", "p", "ps", "pz", "q", "qs", "qz"], axis=1)


QUANT_CASES: dict[str, Callable[[int], Case]] = {
    "QLinearAdd": _binary("QLinearAdd"), "QLinearMul": _binary("QLinearMul"), "QLinearSoftmax": _softmax,
    "QLinearAveragePool": _average_pool, "QLinearGlobalAveragePool": _global_average_pool,
    "QLinearConcat": _concat,
}


@pytest.mark.parametrize("op", list(QUANT_CASES))
def test_other_scales_and_a_second_size_of_a_contrib_quantized_op_build_no_pipeline(op):
    # bit for bit but QLinearSoftmax's and QLinearAveragePool's float sums (a code apart at most)
    exact = op not in ("QLinearSoftmax", "QLinearAveragePool")
    gpu_check.second_size_builds_no_pipeline(op, PIXEL, QUANT_CASES[op], 0, 1, exact=exact, rtol=0, atol=1)
