"""The gpu-pixel program on the shared GPU runtime (issue 20, in progress): texture tensors, draws of fragment
programs, fallbacks between them, textures laid out by lifetime; the numpy backend is the oracle."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import requires_gpu
from onnx import TensorProto, helper

import wgsentis as ws
from wgsentis.backends.gpu_pixel import PixelProgram
from wgsentis.ops.activations import ACTIVATIONS

pytestmark = requires_gpu
F = TensorProto.FLOAT
PIXEL_ACTIVATIONS = sorted(a.name for a in ACTIVATIONS.values() if a.versions and a.wgsl is not None
                           and not a.inputs_from)


def _model(nodes, shape, inits=None, opset=17) -> ws.Model:
    graph = helper.make_graph(nodes, "pixel", [helper.make_tensor_value_info("x", F, list(shape))],
                              [helper.make_tensor_value_info("y", F, None)],
                              [onnx.numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return ws.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def _runs(model: ws.Model, x: np.ndarray, runs: int = 3, **options) -> tuple[list[np.ndarray], dict]:
    program = PixelProgram(model.graph, **options)
    try:
        outs = [program.execute({"x": x}).wait()["y"] for _ in range(runs)]
        return outs, program.stats()
    finally:
        program.close()


@pytest.mark.parametrize("op", PIXEL_ACTIVATIONS)
def test_every_activation_draws_the_numpy_answer(op):
    act = ACTIVATIONS[op]
    model = _model([helper.make_node(op, ["x"], ["y"])], (2, 3, 5), opset=max(act.versions))
    x = (np.random.default_rng(0).standard_normal((2, 3, 5)) * 3).astype(np.float32)
    want = ws.Worker(model, "cpu").run({"x": x})["y"]
    outs, stats = _runs(model, x)
    assert stats["fallback_layers"] == [] and stats["gpu_layers"] == [model.layers[0].name]
    for out in outs:
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6, err_msg=op)


def test_a_chain_with_a_fallback_between_draws_gives_the_numpy_answer_on_every_run():
    w = np.random.default_rng(1).random((3, 517)).astype(np.float32) + 0.5
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["b"]),
             helper.make_node("Add", ["b", "x"], ["c"]), helper.make_node("Div", ["c", "w"], ["d"]),
             helper.make_node("Shrink", ["d"], ["e"], lambd=0.5), helper.make_node("Tanh", ["e"], ["y"])]
    model = _model(nodes, (3, 517), {"w": w})
    x = np.random.default_rng(0).standard_normal((3, 517)).astype(np.float32)
    want = ws.Worker(model, "cpu").run({"x": x})["y"]
    outs, stats = _runs(model, x, debug_groups=True)
    for out in outs:
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    (shrink,) = [p for p in stats["placements"] if p["op"] == "Shrink"]
    assert shrink["device"] == "fallback" and "no gpu-pixel program" in shrink["reason"]
    assert len(stats["gpu_layers"]) == 5


def test_a_traced_plan_shares_textures_between_tensors_whose_lifetimes_are_apart():
    """Eight layers in a chain, no fallback: the plan is traced before any GPU work, and its tensors share
    textures by lifetime (a draw never reads the texture it renders: producer and consumer alternate)."""
    nodes = [helper.make_node("Relu" if k % 2 else "Sigmoid", [f"t{k}" if k else "x"], [f"t{k + 1}" if k < 7 else "y"])
             for k in range(8)]
    model = _model(nodes, (64, 64))
    x = np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32)
    want = ws.Worker(model, "cpu").run({"x": x})["y"]
    outs, stats = _runs(model, x)
    for out in outs:
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    assert stats["fallback_layers"] == []
    texture = 64 * 64 * 4  # bytes of one tensor's texture (32 x 32 texels of 16 bytes)
    assert stats["intermediate_bytes"] <= 3 * texture < 9 * texture  # the input and two textures, not nine


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shape,other", [((4, 6), (1, 6)), ((2, 3, 5), (5,)), ((3, 1, 7), (1, 4, 1)),
                                         ((1,), (9,)), ((2, 3, 4, 5), (3, 1, 1)), ((2, 1, 1, 1, 3, 5), (5,))])
def test_broadcasting_binary_ops_are_drawn_with_element_addressing(op, shape, other):
    """Each output lane finds its coordinates and each input's element at them (wgsl/pixel/addressing.wgsl):
    numpy's broadcasting, on odd sizes, size-1 dims and ranks up to six, with no fallback."""
    rng = np.random.default_rng(4)
    s = (rng.standard_normal(other) + 3).astype(np.float32)  # away from zero: Div's quotients stay tame
    model = _model([helper.make_node(op, ["x", "s"], ["y"])], shape, {"s": s})
    x = rng.standard_normal(shape).astype(np.float32)
    want = ws.Worker(model, "cpu").run({"x": x})["y"]
    outs, stats = _runs(model, x, runs=2)
    assert stats["fallback_layers"] == []
    for out in outs:
        assert out.shape == want.shape
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)


def test_a_program_that_declines_its_inputs_falls_back_with_the_reason():
    """An int64 sum may leave the int32 range texels hold: ReduceSum declines it, and the CPU kernel runs."""
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=1)], "int64 sum",
                              [helper.make_tensor_value_info("x", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    model = ws.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    x = np.array([2**30, 2**30, 2**30, 7], dtype=np.int64)
    program = PixelProgram(model.graph)
    try:
        np.testing.assert_array_equal(program.execute({"x": x}).wait()["y"], [3 * 2**30 + 7])
        stats = program.stats()
    finally:
        program.close()
    assert stats["fallback_layers"] == ["ReduceSum_0"] and "declined" in stats["placements"][0]["reason"]


def test_workers_offer_the_backend():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], (2, 3))
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    with ws.Worker(model, "gpu-pixel") as worker:
        np.testing.assert_array_equal(worker.run({"x": x})["y"], np.maximum(x, 0))
        assert worker.stats()["fallback_layers"] == []


@pytest.mark.parametrize("shape", [(7,), (5, 6), (3, 1, 9), (2, 5, 3, 6), (1, 2, 3, 5, 4), (2, 1, 3, 2, 5, 3)],
                         ids=lambda s: "x".join(map(str, s)))
def test_every_layout_switch_moves_every_element_exactly(shape):
    """From each blocked axis to each other one, in ranks 1 to 6 with odd and size-1 dims (pixel/relayout.wgsl),
    and back: the values are the input's bit for bit."""
    from helpers import read_texture

    from wgsentis.backends.pixel_layout import TextureLayout

    model = _model([helper.make_node("Relu", ["x"], ["y"])], shape)
    value = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    program = PixelProgram(model.graph)
    try:
        for src in range(len(shape)):
            rec = program.make_recorder()
            layout = TextureLayout.of(shape, np.float32, src)
            x = rec.alloc(shape, np.float32, src)
            program.ctx.queue.write_texture({"texture": x.alloc.texture.texture}, layout.pack(value),
                                            {"bytes_per_row": layout.width * 16, "rows_per_image": layout.height},
                                            (layout.width, layout.height, 1))
            for dst in range(len(shape)):
                y = rec.relayout(x, dst)
                back = rec.relayout(y, src)
                assert y.layout.axis == dst and (dst != src or y is x)
                stream = program.make_stream(False)
                for step in rec.steps:
                    stream.step(step)
                rec.steps = []
                encoder = stream.take()
                got = read_texture(program.ctx, y.layout, y.alloc.texture.texture, encoder)
                np.testing.assert_array_equal(got, value, err_msg=f"{src} -> {dst}")
                again = read_texture(program.ctx, back.layout, back.alloc.texture.texture)
                np.testing.assert_array_equal(again, value, err_msg=f"{src} -> {dst} -> {src}")
    finally:
        program.close()
