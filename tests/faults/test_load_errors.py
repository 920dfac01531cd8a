"""Bad models get a typed error naming the model, node, op or tensor at fault."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from helpers import F, make_model
from onnx import TensorProto, helper, numpy_helper

import wgsentis as ws
from wgsentis.errors import ExternalDataError, ModelLoadError, UnsupportedOperatorError, WgSentisError


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        ws.load_model(tmp_path / "nope.onnx")


def test_not_a_protobuf(tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\xff\xff\xff not a model")
    with pytest.raises(ModelLoadError, match=r"junk\.onnx"):
        ws.load_model(path)


def test_wrong_source_type():
    with pytest.raises(ModelLoadError, match=r"expects a path, bytes or onnx\.ModelProto"):
        ws.load_model(42)


def test_unsupported_operator_names_op_domain_opset_node():
    model = make_model([helper.make_node("FancyOp", ["x"], ["y"], name="fancy1", domain="com.example")],
                       [("x", F, [1])], [("y", F, [1])], domains=[("com.example", 3)])
    with pytest.raises(UnsupportedOperatorError) as info:
        ws.load_model(model)
    err = info.value
    assert (err.op_type, err.domain, err.opset, err.node) == ("FancyOp", "com.example", 3, "fancy1")
    assert "FancyOp" in str(err) and "fancy1" in str(err) and "opset 3" in str(err)
    assert isinstance(err, WgSentisError)


def test_opset_newer_than_known():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [1])], [("y", F, [1])], opset=99)
    with pytest.raises(ModelLoadError, match="opset 99"):
        ws.load_model(model)


def test_unknown_attribute_is_named():
    node = helper.make_node("Relu", ["x"], ["y"], name="r", bogus=3)
    model = make_model([node], [("x", F, [1])], [("y", F, [1])])
    with pytest.raises(UnsupportedOperatorError, match=r"attribute.*bogus"):
        ws.load_model(model)


def test_wrong_input_count_is_named():
    model = make_model([helper.make_node("Relu", ["x", "x"], ["y"], name="r2")], [("x", F, [1])], [("y", F, [1])])
    with pytest.raises(ModelLoadError, match="node 'r2' \\(Relu\\) has 2 inputs"):
        ws.load_model(model)


def _external_model(tmp_path, location: str, offset: int = 0, length: int | None = None) -> str:
    weights = np.arange(6, dtype=np.float32)
    tensor = numpy_helper.from_array(weights, "w")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)),
                       ("length", str(weights.nbytes if length is None else length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "ext",
                              [helper.make_tensor_value_info("x", F, [6])],
                              [helper.make_tensor_value_info("y", F, [6])], [tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "model" / "m.onnx"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return str(path)


def test_external_data_inside_folder_loads(tmp_path):
    path = _external_model(tmp_path, "w.bin")
    (tmp_path / "model" / "w.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    out = ws.Worker(ws.load_model(path), "cpu").run({"x": np.ones(6, np.float32)})["y"]
    np.testing.assert_array_equal(out, np.arange(6) + 1)


@pytest.mark.parametrize("location", ["../w.bin", "/etc/passwd", "sub/../../w.bin"])
def test_external_data_outside_folder_rejected(tmp_path, location):
    (tmp_path / "w.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    with pytest.raises(ExternalDataError, match="inside the model's folder"):
        ws.load_model(_external_model(tmp_path, location))


def test_external_data_symlink_out_rejected(tmp_path):
    (tmp_path / "secret.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    path = _external_model(tmp_path, "w.bin")
    os.symlink(tmp_path / "secret.bin", tmp_path / "model" / "w.bin")
    with pytest.raises(ExternalDataError, match="resolves outside"):
        ws.load_model(path)


def test_external_data_offsets_checked(tmp_path):
    path = _external_model(tmp_path, "w.bin", offset=8)
    (tmp_path / "model" / "w.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    with pytest.raises(ExternalDataError, match=r"asks for bytes 8\.\.32 of 'w\.bin', which has 24"):
        ws.load_model(path)
    path = _external_model(tmp_path, "w.bin", length=8)
    with pytest.raises(ExternalDataError, match="has 8 bytes of external data"):
        ws.load_model(path)


def test_external_data_missing_file(tmp_path):
    with pytest.raises(ExternalDataError, match="missing"):
        ws.load_model(_external_model(tmp_path, "absent.bin"))


def test_external_data_from_bytes_needs_base_dir(tmp_path):
    path = _external_model(tmp_path, "w.bin")
    with pytest.raises(ExternalDataError, match="base_dir"):
        ws.load_model(onnx.load(path, load_external_data=False))


def test_unbounded_loop_that_never_ends_is_stopped_not_hung():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", F, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, [1])],
        [numpy_helper.from_array(np.ones(1, np.float32), "one")])
    model = make_model([helper.make_node("Loop", ["", "cond", "v0"], ["v"], name="forever", body=body)],
                       [("cond", TensorProto.BOOL, []), ("v0", F, [1])], [("v", F, [1])], opset=16)
    with ws.Worker(ws.load_model(model), "cpu", max_loop_iterations=500) as worker:
        with pytest.raises(ws.errors.LayerError, match=r"'forever' \(Loop\).*500 iterations.*never turned false"):
            worker.run({"cond": np.array(True), "v0": np.zeros(1, np.float32)})
        # a loop that ends by itself is untouched
        model_ok = make_model([helper.make_node("Loop", ["trip", "cond", "v0"], ["v"], name="bounded", body=body)],
                              [("trip", TensorProto.INT64, []), ("cond", TensorProto.BOOL, []), ("v0", F, [1])],
                              [("v", F, [1])], opset=16)
    with ws.Worker(ws.load_model(model_ok), "cpu", max_loop_iterations=500) as worker:
        out = worker.run({"trip": np.array(700), "cond": np.array(True), "v0": np.zeros(1, np.float32)})["v"]
    np.testing.assert_array_equal(out, [700])
