"""Issue 29, points 4 and 10: invalid models are refused at load (or at the input) naming the node, the
initializer or the input, and valid ones that were refused run, the same on every backend: If branches of two
element types, QLinearAdd with a zero point of two elements, int4 external data of the wrong length, a
DictVectorizer fed keys of the other type, a sparse initializer too big to densify, a model past protobuf's 2 GiB
limit, and initializers listed as graph inputs (defaults a run may override, as in ONNX Runtime)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import BACKENDS, F, I64, make_model, ort_outputs
from onnx import TensorProto, helper, numpy_helper

import wgsentis as ws
from wgsentis.errors import ExternalDataError, InputError, ModelLoadError

U8 = TensorProto.UINT8
ML = "ai.onnx.ml"


def _constant(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value))


# -- point 4: invalid models accepted -------------------------------------------------------------------
def test_if_branches_of_two_element_types_are_refused_at_load():
    then_g = helper.make_graph([_constant("a", np.array([1.0], np.float32))], "then", [],
                               [helper.make_tensor_value_info("a", F, [1])])
    else_g = helper.make_graph([_constant("b", np.array([2], np.int64))], "else", [],
                               [helper.make_tensor_value_info("b", I64, [1])])
    node = helper.make_node("If", ["c"], ["y"], name="the_if", then_branch=then_g, else_branch=else_g)
    model = make_model([node], [("c", TensorProto.BOOL, [])], [("y", F, [1])])
    with pytest.raises(ModelLoadError, match=r"node 'the_if' \(If\): output 0 \('y'\) is float32 from then_branch "
                                             r"\('a'\) but int64 from else_branch \('b'\)"):
        ws.load_model(model)


def _qlinear_add(zero_point: np.ndarray) -> onnx.ModelProto:
    node = helper.make_node("QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"],
                            domain="com.microsoft", name="qadd")
    inits = {"as": np.float32(0.1), "az": zero_point, "bs": np.float32(0.1), "bz": np.uint8(0),
             "ys": np.float32(0.2), "yz": np.uint8(0)}
    return make_model([node], [("a", U8, [4]), ("b", U8, [4])], [("y", U8, [4])], initializers=inits,
                      domains=[("com.microsoft", 1)])


def test_qlinear_add_zero_point_must_be_a_scalar():
    with pytest.raises(ModelLoadError, match=r"node 'qadd' \(QLinearAdd, com.microsoft\): input 2 \('az'\) has "
                                             r"shape \[2\].*must be scalars"):
        ws.load_model(_qlinear_add(np.array([1, 2], np.uint8)))
    ws.load_model(_qlinear_add(np.array([1], np.uint8)))  # one element is a scalar, as ORT reads it


def test_int4_external_data_of_the_wrong_length_is_refused(tmp_path: Path):
    tensor = helper.make_tensor("w", TensorProto.INT4, [6], np.zeros(6, np.int8))
    tensor.ClearField("int32_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", "5")):  # 6 int4 values are 3 bytes
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    node = helper.make_node("Cast", ["w"], ["y"], to=F)
    model = make_model([node], [], [("y", F, [6])], opset=21)
    model.graph.initializer.append(tensor)
    (tmp_path / "w.bin").write_bytes(bytes(5))
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(ExternalDataError, match=r"initializer 'w' has 5 bytes of external data, its shape \[6\] "
                                                r"needs 3"):
        ws.load_model(tmp_path / "m.onnx")
    (tmp_path / "w.bin").write_bytes(bytes([0x21, 0x43, 0x65]))
    model.graph.initializer[0].external_data[2].value = "3"  # the length
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    with ws.Worker(ws.load_model(tmp_path / "m.onnx"), "cpu") as worker:
        np.testing.assert_array_equal(worker.run({})["y"], np.arange(1, 7, dtype=np.float32))


def _dict_vectorizer(key_type: int, **vocabulary) -> onnx.ModelProto:
    mp = helper.make_map_type_proto(key_type, helper.make_tensor_type_proto(F, None))
    node = helper.make_node("DictVectorizer", ["X"], ["Y"], domain=ML, name="dv", **vocabulary)
    graph = helper.make_graph([node], "g", [helper.make_value_info("X", mp)],
                              [helper.make_tensor_value_info("Y", F, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    model.ir_version = 8
    return model


def test_dict_vectorizer_vocabulary_of_the_other_key_type_is_refused_at_load():
    with pytest.raises(ModelLoadError, match=r"node 'dv' \(DictVectorizer\): its input 'X' is a map with int64 "
                                             r"keys, but the node has a string_vocabulary"):
        ws.load_model(_dict_vectorizer(I64, string_vocabulary=["a", "1"]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_dict_vectorizer_fed_int_keys_for_a_string_keyed_map(backend):
    """ORT refuses a map(int64, float) fed for a map(string, float) input; str(1) must not match "1"."""
    with ws.Worker(ws.load_model(_dict_vectorizer(TensorProto.STRING, string_vocabulary=["a", "1"])), backend) as w:
        np.testing.assert_array_equal(w.run({"X": {"1": 2.0}})["Y"], [[0.0, 2.0]])
        with pytest.raises(InputError, match=r"input 'X' expects a map with string keys, got key 1 \(int\)"):
            w.run({"X": {1: 2.0}})


# -- point 10: refusals of valid models, and resources --------------------------------------------------
def test_sparse_initializer_too_big_to_densify_is_refused_before_allocating():
    values = numpy_helper.from_array(np.array([1.0], np.float32), "S")
    indices = numpy_helper.from_array(np.array([0], np.int64), "S_indices")
    model = make_model([helper.make_node("Identity", ["x"], ["y"])], [("x", F, [1])], [("y", F, [1])])
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [1 << 20, 1 << 20]))
    with pytest.raises(ModelLoadError, match=r"sparse initializer 'S' of dims \[1048576, 1048576\] \(float32\) "
                                             r"needs 4,398,046,511,104 bytes once dense"):
        ws.load_model(model)


def test_model_past_protobufs_2_gib_limit_says_so(tmp_path: Path):
    path = tmp_path / "huge.onnx"
    with path.open("wb") as file:  # a sparse file: nothing is written but its size
        file.truncate((2 << 30) + 10)
    with pytest.raises(ModelLoadError, match=r"past protobuf's 2 GiB limit.*save_as_external_data=True"):
        ws.load_model(path)


def _overridable(ir_version: int = 8) -> onnx.ModelProto:
    """y = (x + W) * 2 with W an initializer listed among the graph inputs (a default the caller may feed);
    W * 3 and 3 fold into a constant on runs that do not feed W."""
    nodes = [helper.make_node("Mul", ["W", "three"], ["w3"]), helper.make_node("Add", ["x", "w3"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    model = make_model(nodes, [("x", F, [2]), ("W", F, [2])], [("y", F, [2])],
                       initializers={"W": np.array([1, -2], np.float32), "three": np.float32(3)})
    model.ir_version = ir_version
    return model


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_initializer_listed_as_input_may_be_fed(backend):
    model = _overridable()
    x, w = np.array([0.5, 1.0], np.float32), np.array([5, 6], np.float32)
    (expected_fed,) = ort_outputs(model, {"x": x, "W": w})
    (expected_default,) = ort_outputs(model, {"x": x})
    loaded = ws.load_model(model)
    assert [t.name for t in loaded.overridable] == ["W"] and [t.name for t in loaded.inputs] == ["x"]
    assert "W" not in {n for layer in loaded.layers for n in layer.inputs}  # the default path keeps it folded
    with ws.Worker(loaded, backend) as worker:
        np.testing.assert_allclose(worker.run({"x": x})["y"], expected_default)
        np.testing.assert_allclose(worker.run({"x": x, "W": w})["y"], expected_fed)
        np.testing.assert_allclose(worker.run({"x": x})["y"], expected_default)  # not fed: the default again
        with pytest.raises(InputError, match=r"input 'W' expects shape \[2\]"):
            worker.run({"x": x, "W": np.ones(3, np.float32)})


def test_ir3_initializers_stay_constants_as_in_onnx_runtime():
    """IR version 3 exporters list every weight as an input; ONNX Runtime treats them as constants and refuses a
    feed of one ("Invalid input name"), so wgsentis does too (and folds them)."""
    model = _overridable(ir_version=3)
    model.opset_import[0].version = 8
    loaded = ws.load_model(model)
    assert loaded.overridable == []
    with ws.Worker(loaded, "cpu") as worker, pytest.raises(InputError, match=r"has no input\(s\) \['W'\]"):
        worker.run({"x": np.zeros(2, np.float32), "W": np.zeros(2, np.float32)})


# -- point 10: a rank-64 tensor runs on every backend ----------------------------------------------------
@pytest.mark.parametrize("op", ["Relu", "Add"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_rank_64_elementwise_gives_cpus_answer(backend, op):
    """numpy holds 64 dims; gpu-pixel's packing added one past it (a raw ValueError in a DeviceError) and the
    GPU builders' np.broadcast_shapes stops at 32: Relu runs on the device, Add falls back with its reason."""
    shape = [1] * 63 + [2]
    model = make_model([helper.make_node(op, ["x"] * (2 if op == "Add" else 1), ["y"])], [("x", F, shape)],
                       [("y", F, shape)])
    x = np.array([-1.5, 2.0], np.float32).reshape(shape)
    with ws.Worker(ws.load_model(model), backend) as worker:
        y = worker.run({"x": x})["y"]
    assert y.shape == tuple(shape)
    np.testing.assert_array_equal(y.ravel(), [-3.0, 4.0] if op == "Add" else [0.0, 2.0])


def test_pixel_layout_packs_rank_64_round_trip():
    from wgsentis.backends.pixel_layout import TextureLayout

    shape = (1,) * 30 + (3,) + (1,) * 32 + (5,)
    value = np.arange(15, dtype=np.float32).reshape(shape)
    for axis in (30, 63):
        layout = TextureLayout(shape, axis, np.dtype(np.float32), 4, 4)
        texels = layout.pack(value)
        raw = np.zeros((layout.height, layout.row_bytes // 16, 4), np.float32)
        raw[:, : layout.width] = texels
        np.testing.assert_array_equal(layout.unpack(raw.tobytes()), value)
