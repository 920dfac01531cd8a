"""The cpu backend's shape arithmetic kept from run to run (backends/cpu.py ShapeValues) and the Reshape targets
parsed once (ops/tensor.py): what a new size re-runs, and that nothing kept outlives the values it came from."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h

import wgsentis as ws


def _model(nodes, inputs, outputs, initializers=()):
    graph = h.make_graph(nodes, "shape_values", inputs, outputs, list(initializers))
    return ws.load_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString())


def _dims_model() -> ws.Model:
    """y = x reshaped to (batch, heads, -1) with batch = Shape(x)[0] and heads = Shape(x)[1] * 1: the chain a
    decoder writes around every reshape, on a tensor whose last dim changes every run."""
    nodes = [
        h.make_node("Shape", ["x"], ["shape"], name="shape"),
        h.make_node("Gather", ["shape", "zero"], ["batch"], axis=0, name="batch"),
        h.make_node("Gather", ["shape", "one"], ["heads_raw"], axis=0, name="heads_raw"),
        h.make_node("Mul", ["heads_raw", "one_value"], ["heads"], name="heads"),
        h.make_node("Unsqueeze", ["batch", "axes"], ["batch_1"], name="batch_1"),
        h.make_node("Unsqueeze", ["heads", "axes"], ["heads_1"], name="heads_1"),
        h.make_node("Concat", ["batch_1", "heads_1", "minus_one"], ["target"], axis=0, name="target"),
        h.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
    ]
    initializers = [h.make_tensor("zero", T.INT64, [], [0]), h.make_tensor("one", T.INT64, [], [1]),
                    h.make_tensor("one_value", T.INT64, [], [1]), h.make_tensor("axes", T.INT64, [1], [0]),
                    h.make_tensor("minus_one", T.INT64, [1], [-1])]
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["b", "h", "n", 2])],
                  [h.make_tensor_value_info("y", T.FLOAT, None)], initializers)


def test_a_changed_shape_whose_read_dims_did_not_change_keeps_its_readers():
    """A new last dim changes Shape(x), but the Gathers of dims 0 and 1 read what they read before: their values
    are the kept ones, so Mul, the Unsqueezes and Concat keep theirs and run no kernel."""
    worker = ws.Worker(_dims_model(), "cpu")
    # (last dim, shape layers kept): the first run computes all 7; a new size re-runs Shape and the two Gathers,
    # and the four layers after them keep their values; the same size again keeps all 7.
    for n, kept in ((4, 0), (5, 4), (6, 4), (6, 7), (9, 4)):
        x = np.arange(2 * 3 * n * 2, dtype=np.float32).reshape(2, 3, n, 2)
        np.testing.assert_array_equal(worker.run({"x": x})["y"], x.reshape(2, 3, -1))
        stats = worker.stats()
        assert (stats["shape_layers"], stats["shape_layers_kept"]) == (7, kept), n
    worker.close()


def test_a_changed_value_still_reaches_every_reader():
    """A dim that is read changes: its chain runs again and the reshape follows it."""
    with ws.Worker(_dims_model(), "cpu") as worker:
        for batch, heads in ((2, 3), (3, 3), (3, 2), (3, 2), (1, 5)):
            x = np.random.default_rng(batch * 10 + heads).standard_normal((batch, heads, 4, 2)).astype(np.float32)
            np.testing.assert_array_equal(worker.run({"x": x})["y"], x.reshape(batch, heads, 8))


def test_a_reshape_target_fed_by_the_caller_is_read_again_every_run():
    """The parsed target is kept only for a shape input the engine owns read-only or a graph constant: an array
    the caller feeds, even the same object changed in place, is parsed again on every run."""
    model = _model([h.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
                   [h.make_tensor_value_info("x", T.FLOAT, [4, 6]), h.make_tensor_value_info("shape", T.INT64, [2])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)])
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    shape = np.array([3, 8], np.int64)
    with ws.Worker(model, "cpu") as worker:
        assert worker.run({"x": x, "shape": shape})["y"].shape == (3, 8)
        shape[:] = [8, 3]  # the same array, new values
        assert worker.run({"x": x, "shape": shape})["y"].shape == (8, 3)
        shape[:] = [2, -1]
        assert worker.run({"x": x, "shape": shape})["y"].shape == (2, 12)
        frozen = np.array([6, 4], np.int64)
        frozen.setflags(write=False)
        assert worker.run({"x": x, "shape": frozen})["y"].shape == (6, 4)
        assert worker.run({"x": x, "shape": np.array([0, -1], np.int64)})["y"].shape == (4, 6)


def test_a_kept_reshape_target_resolves_its_zero_and_minus_one_for_each_input_shape():
    """A constant target with 0 and -1 stays the same object from run to run while the data's shape changes: the
    kept parse is keyed by the data's shape too."""
    model = _model([h.make_node("Reshape", ["x", "target"], ["y"], name="reshape")],
                   [h.make_tensor_value_info("x", T.FLOAT, ["a", "b", 4])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)], [h.make_tensor("target", T.INT64, [2], [0, -1])])
    with ws.Worker(model, "cpu") as worker:
        for a, b in ((2, 3), (2, 3), (5, 1), (1, 7), (2, 3)):
            x = np.random.default_rng(a * 10 + b).standard_normal((a, b, 4)).astype(np.float32)
            np.testing.assert_array_equal(worker.run({"x": x})["y"], x.reshape(a, -1))


def test_a_signature_seen_before_starts_from_its_own_values():
    """A second pass over the same sizes (a second sequence of a generation loop) starts each run from the values
    its signature left: every shape layer keeps its value, and the results are those of the first pass."""
    worker = ws.Worker(_dims_model(), "cpu")
    sizes = [(2, 3, n) for n in range(3, 9)] + [(1, 5, 4), (3, 2, 4)]
    first = []
    for b, heads, n in sizes:
        x = np.random.default_rng(n).standard_normal((b, heads, n, 2)).astype(np.float32)
        first.append((x, worker.run({"x": x})["y"]))
    for x, y in first:
        np.testing.assert_array_equal(worker.run({"x": x})["y"], y)
        stats = worker.stats()
        assert stats["shape_layers_kept"] == stats["shape_layers"] == 7
    worker.close()


def test_a_signature_s_values_are_checked_against_shapes_that_depend_on_data():
    """The same input signature, another count of nonzeros: Shape(NonZero(x)) is checked against the shape its
    input has now, not trusted from the signature's last run, and the target built from it follows."""
    nodes = [
        h.make_node("NonZero", ["x"], ["where"], name="nonzero"),
        h.make_node("Shape", ["where"], ["where_shape"], name="where_shape"),
        h.make_node("Slice", ["where_shape", "one", "two"], ["count"], name="count"),
        h.make_node("Concat", ["count", "minus_one"], ["target"], axis=0, name="target"),
        h.make_node("Cast", ["where"], ["where_f"], to=T.FLOAT, name="cast"),
        h.make_node("Reshape", ["where_f", "target"], ["y"], name="reshape"),
    ]
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [6])], [h.make_tensor_value_info("y", T.FLOAT, None)],
                   [h.make_tensor("one", T.INT64, [1], [1]), h.make_tensor("two", T.INT64, [1], [2]),
                    h.make_tensor("minus_one", T.INT64, [1], [-1])])
    with ws.Worker(model, "cpu") as worker:
        for x in ([1, 0, 2, 0, 0, 3], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 5], [1, 0, 2, 0, 0, 3]):
            x = np.array(x, np.float32)
            expected = np.nonzero(x)[0].astype(np.float32).reshape(-1, 1)
            np.testing.assert_array_equal(worker.run({"x": x})["y"], expected)
