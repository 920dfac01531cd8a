"""Layers a new input size leaves as they were are stamped from the last trace's template instead of built again
(backends/gpu/layer_reuse.py, issue 31 point 1): the key tells apart what a builder reads, a stamped plan gives
the bits of a program that saw only that size, and what a template cannot stand for is built."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import F, make_model, requires_gpu
from onnx import helper

import wgsentis as ws
from wgsentis.backends.gpu.layer_reuse import HOST_KEY_ELEMENTS, arguments_key
from wgsentis.backends.gpu.tensors import Allocation, GTensor


def _tensor(shape, dtype=np.float32, alloc=None, persistent=False, bound=None, first=0):
    size = int(np.prod(shape)) * 4
    alloc = alloc or Allocation(None, size, persistent=persistent, reserved=max(256, size))
    t = GTensor(alloc, shape, dtype, first=first)
    t.bound = bound
    return t


def test_the_key_tells_apart_what_a_builder_reads():
    a, b = _tensor((1, 4, 8)), _tensor((1, 4, 8))
    assert arguments_key([a, b]) == arguments_key([_tensor((1, 4, 8)), _tensor((1, 4, 8))])
    assert arguments_key([a, b]) != arguments_key([_tensor((1, 5, 8)), b])  # a shape
    assert arguments_key([a, b]) != arguments_key([_tensor((1, 4, 8), np.int32), b])  # a dtype
    assert arguments_key([a, a]) != arguments_key([a, b])  # one tensor given twice (aliasing)
    assert arguments_key([_tensor((4,), np.int64, bound=9)]) != arguments_key([_tensor((4,), np.int64, bound=99)])
    shared = Allocation(None, 256, reserved=256)
    assert arguments_key([_tensor((8,), alloc=shared, first=0)]) != arguments_key([_tensor((8,), alloc=shared,
                                                                                          first=16)])
    # Constants by identity: the same allocation (or graph array) is the same key, another is not.
    weight = _tensor((8, 8), persistent=True)
    assert arguments_key([weight]) == arguments_key([weight]) != arguments_key([_tensor((8, 8), persistent=True)])
    array = np.ones((64, 64), np.float32)
    assert arguments_key([array], frozenset({id(array)})) == arguments_key([array], frozenset({id(array)}))
    # Small host values by their bytes; absent and None arguments keep their places.
    assert arguments_key([a, np.array([1, -1], np.int64)]) != arguments_key([a, np.array([2, -1], np.int64)])
    assert arguments_key([a, None]) != arguments_key([None, a])


def test_the_key_of_a_texture_tensor_holds_its_layouts():
    """gpu-pixel: a tensor's layout in its texture (which axis is blocked four to a texel, the texture's size)
    is what its draws address, so two tensors of one shape in other layouts have other keys."""
    from wgsentis.backends.gpu_pixel import TextureAllocation
    from wgsentis.backends.pixel_layout import TextureLayout

    def laid(shape, axis):
        layout = TextureLayout.of(shape, np.dtype(np.float32), axis, max_dim=8192, name="t")
        t = GTensor(TextureAllocation(layout, 0), shape, np.float32)
        t.layout = layout
        return t

    assert arguments_key([laid((2, 8, 8), -1)]) == arguments_key([laid((2, 8, 8), -1)])
    assert arguments_key([laid((2, 8, 8), -1)]) != arguments_key([laid((2, 8, 8), 1)])
    assert arguments_key([laid((2, 8, 8), -1)]) != arguments_key([laid((2, 8, 12), -1)])


def test_what_a_template_cannot_stand_for_has_no_key():
    run_input = _tensor((2, 3))
    run_input.host = np.zeros((2, 3), np.float32)  # placement may read a run input's values
    assert arguments_key([run_input]) is None
    chunked = _tensor((2, 3))
    chunked.chunks = [(0, 1, chunked.alloc), (1, 1, chunked.alloc)]
    assert arguments_key([chunked]) is None
    assert arguments_key([np.zeros(HOST_KEY_ELEMENTS + 1, np.float32)]) is None  # a large non-constant array
    assert arguments_key([["a sequence"]]) is None


def _model():
    """x (1, s, 64, 16): a branch whose shapes follow s (softmax over it, x x^T) and one whose shapes do not (the
    mean over s through MatMul, Add, Relu, MatMul, LayerNormalization): the second is what a new s leaves as it
    was."""
    rng = np.random.default_rng(3)
    weights = {"w1": rng.standard_normal((16, 16), dtype=np.float32),
               "b1": rng.standard_normal(16, dtype=np.float32),
               "w2": rng.standard_normal((16, 256), dtype=np.float32),
               "b2": rng.standard_normal(256, dtype=np.float32),
               "g": rng.standard_normal(256, dtype=np.float32),
               "beta": rng.standard_normal(256, dtype=np.float32)}
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["xw"]),
        helper.make_node("Softmax", ["xw"], ["soft"], axis=1),
        helper.make_node("Transpose", ["xw"], ["xt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["soft", "xt"], ["scores"]),
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[1], keepdims=0),
        helper.make_node("MatMul", ["mean", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["m2"]),
        helper.make_node("Relu", ["m2"], ["m3"]),
        helper.make_node("MatMul", ["m3", "w2"], ["m4"]),
        helper.make_node("Sub", ["m4", "b2"], ["m5"]),
        helper.make_node("LayerNormalization", ["m5", "g", "beta"], ["fixed"], axis=-1),
    ]
    proto = make_model(nodes, [("x", F, [1, "s", 64, 16])], [("scores", F, None), ("fixed", F, None)], weights)
    return ws.load_model(proto)


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_stamped_layers_give_the_bits_of_a_program_that_saw_only_that_size(backend):
    model = _model()
    rng = np.random.default_rng(4)
    inputs = [rng.standard_normal((1, s, 64, 16), dtype=np.float32) for s in (5, 9, 3, 17)]
    with ws.Worker(model, backend) as worker:
        seen, counts = [], []
        for x in inputs:
            seen.append(worker.run({"x": x}))
            stats = worker.stats()
            # (a later size is planned from the first trace: its clean layers kept as they were, resize.py)
            counts.append((stats["gpu_layers_reused"] + stats["gpu_layers_kept"], stats["gpu_layers_built"]))
        again = [worker.run({"x": x}) for x in inputs]  # the plans replayed
    # The first trace builds every GPU layer; later sizes keep or stamp those of the fixed branch past the mean (MatMul
    # with its Add, Relu, MatMul, Sub, LayerNormalization) and build the layers over s and the mean (it reads
    # the run's input). gpu-pixel's draws are templated as gpu-compute's dispatches are: three layers here (Add with
    # its Relu, Sub, LayerNormalization), since its mean keeps a host copy, so the MatMul after it is built again.
    first = counts[0][1]
    assert counts[0][0] == 0 and first >= 9, counts
    least = 4 if backend == "gpu-compute" else 3
    assert all(reused >= least and reused + built == first for reused, built in counts[1:]), counts
    for x, first, replayed in zip(inputs, seen, again, strict=True):
        with ws.Worker(model, backend) as alone:
            expected = alone.run({"x": x})
        for name in ("scores", "fixed"):
            assert np.array_equal(first[name], expected[name]), name
            assert np.array_equal(replayed[name], expected[name]), name


@requires_gpu
def test_a_layer_whose_host_argument_changes_is_built_again():
    """A Reshape whose target is computed on the host from the input's shape has a new key at each size: it is
    built again, never stamped with the old target (its output shape follows the input's)."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["s"], axis=0),
             helper.make_node("Concat", ["s", "minus"], ["target"], axis=0),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Reshape", ["r", "target"], ["y"])]
    proto = make_model(nodes, [("x", F, [2, "s", 4])], [("y", F, None)],
                       {"one": np.array([1], np.int64), "minus": np.array([-1], np.int64)})
    model = ws.load_model(proto)
    rng = np.random.default_rng(5)
    with ws.Worker(model, "gpu-compute") as worker:
        for s in (3, 6, 3, 2):
            x = rng.standard_normal((2, s, 4), dtype=np.float32)
            y = worker.run({"x": x})["y"]
            assert y.shape == (s, 8) and np.array_equal(y, np.maximum(x, 0).reshape(s, 8))


def test_the_key_by_weight_shapes_tells_apart_only_shapes_and_dtypes():
    one, other = np.ones((64, 64), np.float32), np.zeros((64, 64), np.float32)
    constants = frozenset({id(one), id(other), id(wide := np.ones((64, 65), np.float32))})
    a = _tensor((1, 4, 64))
    assert arguments_key([a, one], constants) != arguments_key([a, other], constants)
    by_shape = [arguments_key([a, w], constants, weights_by_shape=True) for w in (one, other, wide)]
    assert by_shape[0] == by_shape[1] != by_shape[2]
    # One weight given twice is not two weights: the template's constants would come from the first alone.
    assert arguments_key([one, one], constants, weights_by_shape=True) != \
        arguments_key([one, other], constants, weights_by_shape=True)


def _projections_model(dtype=np.float32):
    """x (1, s, 32), its Relu (a device tensor: a run input's host copy keeps a layer from templates) through four
    MatMuls with weights of their own, three (32, 32) and one (32, 48), then a Softmax over s (the blocks of an
    encoder, a new sequence length each run)."""
    rng = np.random.default_rng(6)
    weights = {f"w{k}": (0.2 * rng.standard_normal((32, 32))).astype(dtype) for k in range(3)}
    weights["w3"] = (0.2 * rng.standard_normal((32, 48))).astype(dtype)
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("MatMul", ["r", "w0"], ["h0"]),
             helper.make_node("MatMul", ["h0", "w1"], ["h1"]),
             helper.make_node("MatMul", ["h1", "w2"], ["h2"]),
             helper.make_node("MatMul", ["h2", "w3"], ["h3"]),
             helper.make_node("Softmax", ["h3"], ["y"], axis=1)]
    return ws.load_model(make_model(nodes, [("x", F, [1, "s", 32])], [("y", F, None)], weights))


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_projections_with_other_weights_of_one_shape_are_stamped_from_one_template(backend):
    """layer_reuse.WEIGHT_SHAPED_OPS: at a new length the first (32, 32) projection is built and the other two
    stamped from its template, each binding its own weights, found again from its arguments (ConstantStore.trail);
    the (32, 48) one is built. The outputs are the bits of a program that saw only that length."""
    model = _projections_model()
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal((1, s, 32), dtype=np.float32) for s in (5, 9, 3)]
    with ws.Worker(model, backend, prepare_ahead=False) as worker:
        outputs, counts = [], []
        for x in inputs:
            outputs.append(worker.run({"x": x})["y"])
            stats = worker.stats()
            counts.append((stats["gpu_layers_reused"], stats["gpu_layers_built"]))
    # The first trace builds all six (no weights of the others were uploaded yet); each later length stamps the
    # two projections whose weights are like the first's, and builds the Relu, the first projection, the (32, 48)
    # one and the Softmax.
    assert counts[0] == (0, 6), counts
    assert all(reused == 2 and built == 4 for reused, built in counts[1:]), counts
    for x, y in zip(inputs, outputs, strict=True):
        with ws.Worker(model, backend) as alone:
            assert np.array_equal(y, alone.run({"x": x})["y"])
        with ws.Worker(model, "cpu") as cpu:
            np.testing.assert_allclose(y, cpu.run({"x": x})["y"], rtol=1e-4, atol=1e-5)


@requires_gpu
def test_weights_widened_on_the_way_to_the_builder_are_never_shared():
    """float16 weights reach the MatMul builder widened to float32 (a new array each trace): what it uploads comes
    from an array that is not its argument, so its template keeps the identity of its own weights, and every
    projection is built with its own."""
    model = _projections_model(np.float16)
    rng = np.random.default_rng(8)
    with ws.Worker(model, "gpu-compute", prepare_ahead=False) as worker, ws.Worker(model, "cpu") as cpu:
        for s in (4, 7):
            x = rng.standard_normal((1, s, 32), dtype=np.float32)
            np.testing.assert_allclose(worker.run({"x": x})["y"], cpu.run({"x": x})["y"], rtol=2e-3, atol=1e-4)


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_gemms_with_other_weights_and_biases_of_one_shape_are_stamped_from_one_template(backend):
    """Gemm (transB, a bias) is weight-shaped too: of three with (80, 80) weights and (80,) biases of their own (past
    HOST_KEY_ELEMENTS: smaller ones key by their values), at a new batch the first is built and the other two
    stamped, each binding its own weight and bias."""
    rng = np.random.default_rng(9)
    weights = {}
    for k in range(3):
        weights[f"w{k}"] = (0.1 * rng.standard_normal((80, 80))).astype(np.float32)
        weights[f"b{k}"] = rng.standard_normal(80).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["h"])]
    for k in range(3):
        nodes.append(helper.make_node("Gemm", [nodes[-1].output[0], f"w{k}", f"b{k}"], [f"g{k}"], transB=1))
    model = ws.load_model(make_model(nodes, [("x", F, ["n", 80])], [("g2", F, None)], weights))
    with ws.Worker(model, backend, prepare_ahead=False) as worker, ws.Worker(model, "cpu") as cpu:
        counts = []
        for n in (3, 6, 10):
            x = rng.standard_normal((n, 80), dtype=np.float32)
            y = worker.run({"x": x})["g2"]
            stats = worker.stats()
            counts.append((stats["gpu_layers_reused"], stats["gpu_layers_built"]))
            np.testing.assert_allclose(y, cpu.run({"x": x})["g2"], rtol=1e-4, atol=1e-5)
            with ws.Worker(model, backend) as alone:
                assert np.array_equal(y, alone.run({"x": x})["g2"])
    assert counts[0] == (0, 4) and counts[1:] == [(2, 2), (2, 2)], counts
