"""The fault corpus of issue 18: each class of bad model file, unsafe external data, unsupported graph, bad input
and bad worker argument raises its typed error naming the culprit (file, initializer, node, input, argument), on
cpu and gpu-compute wherever a worker is involved. NaN and Inf are results, not faults: they come out where
numpy puts them, on both backends. A batch of zero runs and gives an empty output of the right shape on both.

tests/faults/test_load_errors.py and tests/api/test_input_errors.py hold one case of several of these classes;
this corpus widens each class (every case is new)."""

from __future__ import annotations

import gzip
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from helpers import BACKENDS, F, I64, make_model
from onnx import TensorProto, helper, numpy_helper

import wgsentis as ws
from wgsentis.errors import (
    ExternalDataError,
    InputError,
    LayerError,
    ModelLoadError,
    TensorError,
    UnsupportedOperatorError,
    WgSentisError,
)


SAMPLE = Path(ws.__file__).resolve().parent / "data" / "sample.onnx"
SAMPLE_BYTES = SAMPLE.read_bytes()


def raises(kind: type[BaseException], action: Callable[[], Any], *culprits: str) -> BaseException:
    """Run ``action``; assert it raises exactly a ``kind`` (or subclass) whose message names every culprit."""
    with pytest.raises(kind) as info:
        action()
    text = str(info.value)
    for culprit in culprits:
        assert culprit in text, f"{type(info.value).__name__} does not name {culprit!r}: {text}"
    return info.value


# -- model files ------------------------------------------------------------------------------------------
def _truncated(keep: float) -> bytes:
    """The sample model cut after ``keep`` bytes (an int), or that fraction of its length (a float < 1)."""
    n = int(len(SAMPLE_BYTES) * keep) if isinstance(keep, float) else keep
    return SAMPLE_BYTES[:n]


BAD_CONTENTS: dict[str, bytes] = {
    "empty": b"",
    "zeros": b"\0" * 64,
    "text": b"this is not an ONNX model\n",
    "json": b'{"graph": {"node": []}}',
    "random": np.random.default_rng(18).integers(0, 256, 4096, dtype=np.uint8).tobytes(),
    "gzipped-model": gzip.compress(SAMPLE_BYTES),
    "a-tensor-not-a-model": numpy_helper.from_array(np.ones(3, np.float32), "t").SerializeToString(),
    "model-plus-trailing-junk": SAMPLE_BYTES + b"\xff" * 16,
    **{f"truncated-at-{keep}": _truncated(keep) for keep in (1, 2, 10, 64, 0.25, 0.5, 0.75, len(SAMPLE_BYTES) - 1)},
}


@pytest.mark.parametrize("content", list(BAD_CONTENTS))
def test_a_bad_model_file_names_the_file(tmp_path, content):
    path = tmp_path / f"{content}.onnx"
    path.write_bytes(BAD_CONTENTS[content])
    raises(ModelLoadError, lambda: ws.load_model(path), path.name)
    raises(ModelLoadError, lambda: ws.load_model(str(path)), path.name)


@pytest.mark.parametrize("content", list(BAD_CONTENTS))
def test_bad_model_bytes_are_named_as_bytes(content):
    raises(ModelLoadError, lambda: ws.load_model(BAD_CONTENTS[content]), "<bytes>")


def test_a_model_proto_without_a_graph_is_refused_like_its_bytes():
    raises(ModelLoadError, lambda: ws.load_model(onnx.ModelProto(), name="hollow"), "hollow", "graph")


@pytest.mark.parametrize("case", ["directory", "missing-in-missing-dir", "empty-string", "fifo",
                                  "dev-null", "name-too-long", "nul-byte"])
def test_a_path_that_is_not_a_model_file_names_the_path(tmp_path, case):
    where = {"directory": tmp_path, "missing-in-missing-dir":
             tmp_path / "no" / "such" / "m.onnx", "empty-string": "", "fifo": tmp_path / "pipe.onnx",
             "dev-null": "/dev/null", "name-too-long": tmp_path / ("x" * 5000 + ".onnx"),
             "nul-byte": str(tmp_path / "a\0b.onnx")}[case]
    if case == "fifo":
        os.mkfifo(where)
    culprit = {"empty-string": "model file", "name-too-long": "xxxx", "nul-byte": str(tmp_path)}.get(case, str(where))
    raises(ModelLoadError, lambda: ws.load_model(where), culprit)


@pytest.mark.parametrize("source", [None, 1.5, [str(SAMPLE)], {"path": str(SAMPLE)}, object(),
                                    np.frombuffer(SAMPLE_BYTES, np.uint8), helper.make_graph([], "g", [], [])],
                         ids=["None", "float", "list", "dict", "object", "ndarray", "GraphProto"])
def test_load_model_names_a_wrong_source_type(source):
    raises(ModelLoadError, lambda: ws.load_model(source), type(source).__name__)


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview, onnx.load_model_from_string, Path, str])
def test_every_accepted_source_type_loads_the_sample(wrap):
    source = wrap(SAMPLE) if wrap in (Path, str) else wrap(SAMPLE_BYTES)
    model = ws.load_model(source)
    assert [i.name for i in model.inputs] == ["image"]


# -- external data ---------------------------------------------------------------------------------------
WEIGHTS = np.arange(6, dtype=np.float32)


def _external_model(folder: Path, entries: dict[str, str | None]) -> Path:
    """``folder``/m.onnx whose initializer 'w' (float32[6]) has the external-data ``entries`` (None: left
    out), with the weights in ``folder``/w.bin."""
    tensor = numpy_helper.from_array(WEIGHTS, "w")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in entries.items():
        if value is not None:
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add_w")], "ext",
                              [helper.make_tensor_value_info("x", F, [6])],
                              [helper.make_tensor_value_info("y", F, [6])], [tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "w.bin").write_bytes(WEIGHTS.tobytes())
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _entries(location: str | None = "w.bin", offset: str | None = "0", length: str | None = "24") -> dict:
    return {"location": location, "offset": offset, "length": length}


# name -> (external-data entries, what the message must name besides the initializer)
UNSAFE_LOCATIONS: dict[str, tuple[dict, str]] = {
    "dot-parent": (_entries("./../w.bin"), "./../w.bin"),
    "parent-of-parent": (_entries("../../w.bin"), "../../w.bin"),
    "absolute-into-etc": (_entries("/etc/hostname"), "/etc/hostname"),
    "missing-in-a-subfolder": (_entries("sub/absent.bin"), "sub/absent.bin"),
    "absolute-dev-zero": (_entries("/dev/zero"), "/dev/zero"),
    "empty-location": (_entries(""), "location"),
    "no-location": (_entries(None), "location"),
    "a-directory": (_entries("."), "'.'"),
    "nul-byte": (_entries("w\0.bin"), "w"),
    "name-too-long": (_entries("a" * 5000), "aaaa"),
    "path-too-deep": (_entries("a/" * 3000 + "w.bin"), "a/a/"),
}

BAD_RANGES: dict[str, tuple[dict, str]] = {
    "offset-past-end": (_entries(offset="100"), "100"),
    "length-one-short": (_entries(length="23"), "23"),
    "offset-negative": (_entries(offset="-4"), "-4"),
    "offset-huge": (_entries(offset=str(2**70)), str(2**70)),
    "length-past-end": (_entries(length="1000"), "1000"),
    "length-negative": (_entries(length="-1"), "-1"),
    "length-huge": (_entries(length=str(2**64)), str(2**64)),
    "offset-float": (_entries(offset="1.5"), "offset"),
    "offset-word": (_entries(offset="abc"), "offset"),
    "offset-hex": (_entries(offset="0x4"), "offset"),
    "length-exponent": (_entries(length="1e3"), "length"),
}


@pytest.mark.parametrize("case", list(UNSAFE_LOCATIONS))
def test_external_data_outside_the_folder_or_absent_is_refused(tmp_path, case):
    entries, culprit = UNSAFE_LOCATIONS[case]
    (tmp_path / "w.bin").write_bytes(WEIGHTS.tobytes())  # a real file just outside the model folder
    path = _external_model(tmp_path / "model", entries)
    raises(ExternalDataError, lambda: ws.load_model(path), "'m'", "initializer 'w'", culprit)


@pytest.mark.parametrize("case", list(BAD_RANGES))
def test_external_data_offsets_and_lengths_are_checked(tmp_path, case):
    entries, culprit = BAD_RANGES[case]
    path = _external_model(tmp_path / "model", entries)
    raises(ExternalDataError, lambda: ws.load_model(path), "initializer 'w'", culprit)


def test_an_absolute_path_into_the_model_folder_is_still_refused(tmp_path):
    path = _external_model(tmp_path / "model", _entries(str(tmp_path / "model" / "w.bin")))
    raises(ExternalDataError, lambda: ws.load_model(path), "initializer 'w'", str(tmp_path / "model" / "w.bin"))


@pytest.mark.parametrize("link", ["file-outside-relative", "folder-outside", "dev-zero", "loop"])
def test_external_data_through_a_link_out_of_the_folder_is_refused(tmp_path, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "w.bin").write_bytes(WEIGHTS.tobytes())
    location = "sub/w.bin" if link == "folder-outside" else "w.bin"
    path = _external_model(tmp_path / "model", _entries(location))
    (tmp_path / "model" / "w.bin").unlink()
    if link == "folder-outside":
        os.symlink(outside, tmp_path / "model" / "sub")
    else:
        target = {"file-outside-relative": Path("../outside/w.bin"), "dev-zero": Path("/dev/zero"),
                  "loop": Path("w.bin")}[link]
        os.symlink(target, tmp_path / "model" / "w.bin")
    raises(ExternalDataError, lambda: ws.load_model(path), "initializer 'w'", location)


# -- graphs the engine does not run -------------------------------------------------------------------------
def _one_node(node: onnx.NodeProto, inputs: int = 1, opset: int = 17, domains=()) -> onnx.ModelProto:
    return make_model([node], [(f"x{i}", F, [2, 3]) for i in range(inputs)], [("y", F, None)], opset=opset,
                      domains=domains)


# name -> (model, error type, what the message must name)
GRAPH_FAULTS: dict[str, tuple[onnx.ModelProto, type[ModelLoadError], tuple[str, ...]]] = {
    "unknown-op": (_one_node(helper.make_node("Conv2D", ["x0"], ["y"], name="tf_conv")),
                   UnsupportedOperatorError, ("Conv2D", "tf_conv")),
    "op-name-in-lower-case": (_one_node(helper.make_node("relu", ["x0"], ["y"], name="lower")),
                              UnsupportedOperatorError, ("relu", "lower")),
    "empty-op-type": (_one_node(helper.make_node("", ["x0"], ["y"], name="blank")),
                      UnsupportedOperatorError, ("blank",)),
    "unnamed-unknown-op": (_one_node(helper.make_node("Bogus", ["x0"], ["y"])),
                           UnsupportedOperatorError, ("Bogus", "Bogus_0")),
    "domain-not-imported": (_one_node(helper.make_node("Relu", ["x0"], ["y"], name="r", domain="com.unknown")),
                            UnsupportedOperatorError, ("com.unknown", "'r'")),
    "unknown-op-in-known-domain": (
        _one_node(helper.make_node("NoSuchOp", ["x0"], ["y"], name="ms", domain="com.microsoft"),
                  domains=[("com.microsoft", 1)]), UnsupportedOperatorError, ("NoSuchOp", "com.microsoft", "'ms'")),
    "onnx-ml-domain": (
        _one_node(helper.make_node("TreeEnsemble", ["x0"], ["y"], name="te", domain="ai.onnx.ml"),
                  domains=[("ai.onnx.ml", 3)]), UnsupportedOperatorError, ("TreeEnsemble", "ai.onnx.ml")),
    "default-opset-1000": (_one_node(helper.make_node("Relu", ["x0"], ["y"], name="r"), opset=1000),
                           ModelLoadError, ("opset 1000",)),
    "default-opset-zero": (_one_node(helper.make_node("Relu", ["x0"], ["y"], name="r0"), opset=0),
                           UnsupportedOperatorError, ("Relu", "r0", "opset 0")),
    "op-newer-than-model-opset": (_one_node(helper.make_node("Mish", ["x0"], ["y"], name="mish"), opset=17),
                                  UnsupportedOperatorError, ("Mish", "mish", "opset 18")),
    "gelu-before-opset-20": (_one_node(helper.make_node("Gelu", ["x0"], ["y"], name="gelu"), opset=17),
                             UnsupportedOperatorError, ("Gelu", "gelu", "opset 20")),
    "add-one-input": (_one_node(helper.make_node("Add", ["x0"], ["y"], name="add1")),
                      ModelLoadError, ("add1", "Add", "1 inputs")),
    "add-three-inputs": (_one_node(helper.make_node("Add", ["x0", "x1", "x2"], ["y"], name="add3"), 3),
                         ModelLoadError, ("add3", "3 inputs")),
    "conv-no-inputs": (_one_node(helper.make_node("Conv", [], ["y"], name="conv0"), 0),
                       ModelLoadError, ("conv0", "Conv", "0 inputs")),
    "matmul-three-inputs": (_one_node(helper.make_node("MatMul", ["x0", "x1", "x2"], ["y"], name="mm3"), 3),
                            ModelLoadError, ("mm3", "3 inputs")),
    "gemm-one-input": (_one_node(helper.make_node("Gemm", ["x0"], ["y"], name="gemm1")),
                       ModelLoadError, ("gemm1", "1 inputs")),
    "softmax-two-inputs": (_one_node(helper.make_node("Softmax", ["x0", "x1"], ["y"], name="sm2"), 2),
                           ModelLoadError, ("sm2", "2 inputs")),
    "where-two-inputs": (_one_node(helper.make_node("Where", ["x0", "x1"], ["y"], name="where2"), 2),
                         ModelLoadError, ("where2", "2 inputs")),
    "concat-no-inputs": (_one_node(helper.make_node("Concat", [], ["y"], name="cat0", axis=0), 0),
                         ModelLoadError, ("cat0", "Concat", "0 inputs")),
    "attribute-of-an-old-opset": (_one_node(helper.make_node("Add", ["x0", "x1"], ["y"], name="bc", axis=1), 2),
                                  UnsupportedOperatorError, ("bc", "axis")),
    "misspelt-attribute": (_one_node(helper.make_node("Transpose", ["x0"], ["y"], name="tp", perms=[1, 0])),
                           UnsupportedOperatorError, ("tp", "perms")),
    "attribute-of-another-op": (_one_node(helper.make_node("Relu", ["x0"], ["y"], name="ra", alpha=0.1)),
                                UnsupportedOperatorError, ("ra", "alpha")),
    "conv-kernel-attribute": (_one_node(helper.make_node("Conv", ["x0", "x1"], ["y"], name="ck", kernel=3), 2),
                              UnsupportedOperatorError, ("ck", "kernel")),
    "softmax-dim-attribute": (_one_node(helper.make_node("Softmax", ["x0"], ["y"], name="sd", dim=1)),
                              UnsupportedOperatorError, ("sd", "dim")),
}


@pytest.mark.parametrize("case", list(GRAPH_FAULTS))
def test_a_graph_the_engine_cannot_run_is_refused_at_load(case):
    model, kind, culprits = GRAPH_FAULTS[case]
    raises(kind, lambda: ws.load_model(model), *culprits)


# -- inputs --------------------------------------------------------------------------------------------------
def _input_model() -> ws.Model:
    """c = a + b (float32 [n, 3]), d = i + 1 (int64 [2])."""
    return ws.load_model(make_model(
        [helper.make_node("Add", ["a", "b"], ["c"], name="add"),
         helper.make_node("Add", ["i", "one"], ["d"], name="inc")],
        [("a", F, ["n", 3]), ("b", F, ["n", 3]), ("i", I64, [2])], [("c", F, ["n", 3]), ("d", I64, [2])],
        {"one": np.array(1, np.int64)}), name="faulty")


def _good() -> dict[str, np.ndarray]:
    return {"a": np.ones((1, 3), np.float32), "b": np.ones((1, 3), np.float32), "i": np.array([1, 2], np.int64)}


@pytest.fixture(scope="module", params=BACKENDS)
def input_worker(request):
    with ws.Worker(_input_model(), request.param) as worker:
        yield worker


DROP = object()  # in BAD_FEEDS: leave this input out

# name -> (the feeds, given as changes to good ones), what the InputError must name
BAD_FEEDS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "an-output-given-as-input": ({"c": np.ones((1, 3), np.float32)}, ("'c'", "'a', 'b', 'i'")),
    "name-in-wrong-case": ({"A": np.ones((1, 3), np.float32), "a": DROP}, ("'A'",)),
    "missing-int-input": ({"i": DROP}, ("missing", "'i'", "int64")),
    "all-missing": ({"a": DROP, "b": DROP, "i": DROP}, ("missing", "'a'", "'b'", "'i'")),
    "none": ({"a": None}, ("'a'", "NoneType")),
    "bytes": ({"a": b"\x00\x00\x80?"}, ("'a'", "bytes")),
    "dict": ({"a": {"values": [1, 2, 3]}}, ("'a'", "dict")),
    "object": ({"a": object()}, ("'a'", "object")),
    "int": ({"a": 3}, ("'a'", "int")),
    "float": ({"a": 2.5}, ("'a'", "float")),
    "float16": ({"a": np.ones((1, 3), np.float16)}, ("'a'", "float16")),
    "int32": ({"a": np.ones((1, 3), np.int32)}, ("'a'", "int32")),
    "bool": ({"a": np.ones((1, 3), bool)}, ("'a'", "bool")),
    "complex": ({"a": np.ones((1, 3), np.complex64)}, ("'a'", "complex64")),
    "object-array": ({"a": np.array([[1, 2, 3]], dtype=object)}, ("'a'", "object")),
    "str-array": ({"a": np.array([["x", "y", "z"]])}, ("'a'", "str")),
    "float-for-int64": ({"i": np.array([1.0, 2.0], np.float32)}, ("'i'", "int64", "float32")),
    "int32-for-int64": ({"i": np.array([1, 2], np.int32)}, ("'i'", "int64", "int32")),
    "rank-0": ({"a": np.float32(1.0)}, ("'a'", "rank 2", "[]")),
    "rank-3": ({"a": np.ones((1, 1, 3), np.float32)}, ("'a'", "rank 2", "[1, 1, 3]")),
    "wrong-fixed-dim": ({"a": np.ones((2, 2), np.float32), "b": np.ones((2, 3), np.float32)},
                        ("'a'", "[n, 3]", "[2, 2]", "axis 1")),
    "wrong-fixed-dim-int": ({"i": np.ones(3, np.int64)}, ("'i'", "[2]", "[3]")),
    "list-of-wrong-shape": ({"a": [[1.0, 2.0]]}, ("'a'", "[1, 2]")),
    "ragged-list": ({"a": [[1.0, 2.0], [3.0]]}, ("'a'",)),
    "list-of-strings": ({"a": [["x", "y", "z"]]}, ("'a'",)),
    "tensor-of-wrong-dtype": ({"a": ws.Tensor(np.ones((1, 3)))}, ("'a'", "float64")),
    "tensor-of-a-sequence": ({"a": ws.Tensor([np.ones((1, 3), np.float32)])}, ("'a'",)),
}


def _feeds(changes: dict[str, Any]) -> dict[str, Any]:
    feeds: dict[str, Any] = {**_good(), **changes}
    return {name: value for name, value in feeds.items() if value is not DROP}


@pytest.mark.parametrize("case", list(BAD_FEEDS))
def test_a_bad_input_names_the_input(input_worker, case):
    changes, culprits = BAD_FEEDS[case]
    err = raises(InputError, lambda: input_worker.schedule(_feeds(changes)), "'faulty'", *culprits)
    assert isinstance(err, WgSentisError)


def test_a_symbolic_dim_of_zero_and_one_is_a_warning_as_onnx_runtime_allows_it(input_worker):
    # Issue 29: a symbolic name is no constraint across inputs (ORT runs such feeds); said once, as a warning.
    from wgsentis.errors import SymbolicDimensionWarning

    with pytest.warns(SymbolicDimensionWarning, match="dimension 'n' is 1 here but 0 in input 'a'"):
        input_worker.schedule(_feeds({"a": np.ones((0, 3), np.float32)}))


def test_inputs_that_are_not_a_mapping_are_an_input_error(input_worker):
    feeds = _good()
    raises(InputError, lambda: input_worker.run([feeds["a"], feeds["b"], feeds["i"]]), "'faulty'")
    raises(InputError, lambda: input_worker.run(tuple(feeds.items())), "'faulty'")


def test_odd_layouts_and_lists_are_accepted_and_give_the_same_answer(input_worker):
    base = np.arange(12, dtype=np.float32).reshape(2, 6)
    strided = base[:, ::2]  # (2, 3), not contiguous
    feeds = {"a": np.asfortranarray(strided), "b": strided, "i": [5, 6]}
    out = input_worker.run(feeds)
    np.testing.assert_array_equal(out["c"], 2 * strided)
    np.testing.assert_array_equal(out["d"], [6, 7])
    big = input_worker.run({**_good(), "i": np.array([2**40, -(2**40)], np.int64)})["d"]
    np.testing.assert_array_equal(big, [2**40 + 1, -(2**40) + 1])  # past int32: exact, never wrapped


def test_the_output_of_a_failed_run_raises_its_layer_error_wherever_it_is_used(input_worker):
    backend = input_worker.backend.value
    bad = ws.load_model(make_model([helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_reshape")],
                                   [("x", F, [6]), ("s", I64, [2])], [("y", F, None)]))
    with ws.Worker(bad, backend) as failing:
        failing.schedule({"x": np.ones(6, np.float32), "s": np.array([4, 4], np.int64)})
        failed = failing.peek_output()
        raises(LayerError, lambda: input_worker.schedule({**_good(), "a": failed}), "bad_reshape", "Reshape")
        raises(LayerError, failed.download_to_array, "bad_reshape")  # a second read: the same error
        raises(TensorError, failed.is_readback_request_done, "'y'", "readback_request")
    raises(TensorError, ws.Tensor, "data")


# -- worker arguments and lifecycle -----------------------------------------------------------------------------
BAD_WORKER_ARGS: dict[str, tuple[dict[str, Any], type[WgSentisError], tuple[str, ...]]] = {
    "unknown-backend": ({"backend": "tpu"}, InputError, ("'tpu'", "cpu", "gpu-compute")),
    "empty-backend": ({"backend": ""}, InputError, ("''",)),
    "backend-int": ({"backend": 3}, InputError, ("'3'",)),
    "backend-none": ({"backend": None}, InputError, ("'None'",)),
    "backend-unknown": ({"backend": "gpu-vertex"}, InputError, ("'gpu-vertex'",)),
    "threads-zero": ({"threads": 0}, InputError, ("threads=0",)),
    "threads-negative": ({"threads": -2}, InputError, ("threads=-2",)),
    "threads-float": ({"threads": 1.5}, InputError, ("threads=1.5",)),
    "threads-str": ({"threads": "2"}, InputError, ("threads='2'",)),
    "threads-bool": ({"threads": True}, InputError, ("threads=True",)),
    "precision-int8": ({"precision": "int8"}, InputError, ("precision='int8'",)),
    "precision-none": ({"precision": None}, InputError, ("precision=None",)),
    "precision-float16-on-cpu": ({"precision": "float16"}, InputError, ("float16", "cpu")),
    "spin-wait-str": ({"spin_wait": "yes"}, InputError, ("spin_wait='yes'",)),
    "model-none": ({"model": None}, InputError, ("NoneType",)),
    "model-path": ({"model": str(SAMPLE)}, InputError, ("str",)),
    "model-proto": ({"model": onnx.ModelProto()}, InputError, ("ModelProto",)),
}


@pytest.mark.parametrize("case", list(BAD_WORKER_ARGS))
def test_a_bad_worker_argument_names_the_argument(case):
    given, kind, culprits = BAD_WORKER_ARGS[case]
    args = {"model": _input_model(), "backend": "cpu", **given}
    model, backend = args.pop("model"), args.pop("backend")
    raises(kind, lambda: ws.Worker(model, backend, **args), *culprits)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_closed_worker_refuses_work_and_closes_again_quietly(backend):
    worker = ws.Worker(_input_model(), backend)
    first = worker.run(_good())["c"]
    worker.close()
    raises(WgSentisError, lambda: worker.run(_good()), "'faulty'", "closed")
    raises(WgSentisError, lambda: worker.schedule(_good()), "'faulty'", "closed")
    worker.close()
    with ws.Worker(_input_model(), backend) as again:  # the model itself is untouched
        np.testing.assert_array_equal(again.run(_good())["c"], first)
    raises(WgSentisError, lambda: again.run(_good()), "closed")


# -- NaN and Inf propagate -------------------------------------------------------------------------------------
SPECIALS = np.array([np.nan, np.inf, -np.inf, 1.5, -2.0, 0.0, 3.0, -0.5], np.float32)
PAIR_A = np.array([np.nan, 1, np.inf, -np.inf, 0, 2, np.nan, -1, np.inf, -np.inf, 0, -2, -np.inf, -0.0, 1, -1],
                  np.float32)
PAIR_B = np.array([1, np.nan, np.inf, 1, 0, -np.inf, np.nan, 2, -np.inf, 0.5, -1, 0.5, -3, -1, np.inf, np.inf],
                  np.float32)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(np.float32(0), x)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) if not math.isnan(v) else math.nan for v in x.astype(np.float64)], np.float32)


# op -> (attributes, numpy reference); every case runs one node on SPECIALS.
UNARY_REFS: dict[str, tuple[dict[str, Any], Callable[[np.ndarray], np.ndarray]]] = {
    "Relu": ({}, lambda x: np.maximum(x, 0)),
    "LeakyRelu": ({}, lambda x: np.where(x >= 0, x, np.float32(0.01) * x)),
    "Sigmoid": ({}, lambda x: 1 / (1 + np.exp(-x))),
    "Tanh": ({}, np.tanh),
    "HardSigmoid": ({}, lambda x: np.clip(np.float32(0.2) * x + np.float32(0.5), 0, 1)),
    "HardSwish": ({}, lambda x: x * np.clip(x / 6 + np.float32(0.5), 0, 1)),
    "Elu": ({}, lambda x: np.where(x >= 0, x, np.expm1(x))),
    "Celu": ({}, lambda x: np.maximum(0, x) + np.minimum(0, np.expm1(x))),
    "Softplus": ({}, _softplus),
    "Softsign": ({}, lambda x: x / (1 + np.abs(x))),
    "Clip": ({}, lambda x: x),
    "Sign": ({}, np.sign),
    "Exp": ({}, np.exp),
    "Log": ({}, np.log),
    "Sqrt": ({}, np.sqrt),
    "Abs": ({}, np.abs),
    "Neg": ({}, np.negative),
    "Floor": ({}, np.floor),
    "Ceil": ({}, np.ceil),
    "Reciprocal": ({}, lambda x: 1 / x),
    "Erf": ({}, _erf),
    "Softmax": ({"axis": 0}, lambda x: np.exp(x - x.max()) / np.exp(x - x.max()).sum()),
    "ReduceMax": ({"keepdims": 0}, lambda x: np.max(x)),
    "ReduceMean": ({"keepdims": 0}, lambda x: np.mean(x)),
}
BINARY_REFS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
    "Max": np.maximum, "Min": np.minimum,
}


def assert_ieee_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """NaN exactly where ``want`` has NaN, infinities equal, finite values close."""
    want = np.asarray(want, np.float32)
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN positions {got} vs {want}")
    np.testing.assert_array_equal(np.isinf(got) * np.sign(got), np.isinf(want) * np.sign(want),
                                  err_msg=f"{what}: infinities {got} vs {want}")
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=2e-5, atol=1e-6, err_msg=what)


def _run_one(model: onnx.ModelProto, backend: str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    with ws.Worker(ws.load_model(model), backend) as worker:
        return worker.run(feeds)["y"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", list(UNARY_REFS))
def test_nan_and_inf_propagate_through_unary_ops(backend, op):
    attrs, reference = UNARY_REFS[op]
    model = make_model([helper.make_node(op, ["x"], ["y"], name="node", **attrs)], [("x", F, [8])], [("y", F, None)])
    with np.errstate(all="ignore"):
        want = reference(SPECIALS)
    assert_ieee_equal(_run_one(model, backend, {"x": SPECIALS}), want, f"{op} on {backend}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", list(BINARY_REFS))
def test_nan_and_inf_propagate_through_binary_ops(backend, op):
    model = make_model([helper.make_node(op, ["a", "b"], ["y"], name="node")],
                       [("a", F, [16]), ("b", F, [16])], [("y", F, None)])
    with np.errstate(all="ignore"):
        want = BINARY_REFS[op](PAIR_A, PAIR_B)
    assert_ieee_equal(_run_one(model, backend, {"a": PAIR_A, "b": PAIR_B}), want, f"{op} on {backend}")


def _image_with_specials() -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)
    x[0, 0, 1, 1], x[0, 1, 2, 2], x[0, 2, 3, 3], x[0, 3, 4, 5] = np.nan, np.inf, -np.inf, np.nan
    return x


_W1 = np.random.default_rng(1).standard_normal((8, 4, 1, 1)).astype(np.float32)
_B1 = np.random.default_rng(2).standard_normal(8).astype(np.float32)
_WM = np.random.default_rng(3).standard_normal((36, 5)).astype(np.float32)


def _pool(x: np.ndarray, reduce: Callable[..., np.ndarray]) -> np.ndarray:
    n, c, h, w = x.shape
    return reduce(x.reshape(n, c, h // 2, 2, w // 2, 2), axis=(3, 5))


def _conv1x1(x: np.ndarray) -> np.ndarray:
    return np.einsum("oc,nchw->nohw", _W1[:, :, 0, 0], x) + _B1[None, :, None, None]


# name -> (nodes, initializers, numpy reference of the image)
IMAGE_REFS: dict[str, tuple[list[onnx.NodeProto], dict[str, np.ndarray], Callable[[np.ndarray], np.ndarray]]] = {
    "MaxPool": ([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], {},
                lambda x: _pool(x, np.max)),
    "AveragePool": ([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], {},
                    lambda x: _pool(x, np.mean)),
    "GlobalAveragePool": ([helper.make_node("GlobalAveragePool", ["x"], ["y"])], {},
                          lambda x: x.mean(axis=(2, 3), keepdims=True)),
    "GlobalMaxPool": ([helper.make_node("GlobalMaxPool", ["x"], ["y"])], {},
                      lambda x: x.max(axis=(2, 3), keepdims=True)),
    "Conv1x1": ([helper.make_node("Conv", ["x", "w", "b"], ["y"])], {"w": _W1, "b": _B1}, _conv1x1),
    "Conv1x1+Relu": ([helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
                     {"w": _W1, "b": _B1}, lambda x: np.maximum(_conv1x1(x), 0)),
    "Conv1x1+Clip": ([helper.make_node("Conv", ["x", "w", "b"], ["c"]),
                      helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
                     {"w": _W1, "b": _B1, "lo": np.float32(0), "hi": np.float32(6)},
                     lambda x: np.clip(_conv1x1(x), 0, 6)),
    "Flatten+MatMul": ([helper.make_node("Flatten", ["x"], ["f"], axis=2),
                        helper.make_node("MatMul", ["f", "m"], ["y"])],
                       {"m": _WM}, lambda x: x.reshape(4, 36) @ _WM),
    "ReduceSum-axes": ([helper.make_node("ReduceSum", ["x", "ax"], ["y"])], {"ax": np.array([2, 3], np.int64)},
                       lambda x: x.sum(axis=(2, 3), keepdims=True)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(IMAGE_REFS))
def test_nan_and_inf_propagate_through_pools_products_and_fused_activations(backend, name):
    nodes, inits, reference = IMAGE_REFS[name]
    model = make_model(nodes, [("x", F, [1, 4, 6, 6])], [("y", F, None)], inits)
    x = _image_with_specials()
    with np.errstate(all="ignore"):
        want = reference(x)
    got = _run_one(model, backend, {"x": x})
    assert_ieee_equal(got, want.astype(np.float32), f"{name} on {backend}")


# -- zero-size batches -----------------------------------------------------------------------------------------
def _zero_cases() -> dict[str, tuple[onnx.ModelProto | None, dict[str, np.ndarray], tuple[int, ...]]]:
    x = np.zeros((0, 4, 6, 6), np.float32)
    a = np.zeros((0, 16), np.float32)

    def one(node: onnx.NodeProto, feeds: dict[str, np.ndarray], inits: dict | None = None) -> onnx.ModelProto:
        return make_model([node], [(k, F, list(v.shape)) for k, v in feeds.items()], [("y", F, None)], inits or {})

    w3 = np.ones((8, 4, 3, 3), np.float32)
    return {
        "sample-model": (None, {"image": np.zeros((0, 3, 32, 32), np.float32)}, (0, 10)),
        "conv3x3": (one(helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4), {"x": x}, {"w": w3}), {"x": x},
                    (0, 8, 6, 6)),
        "depthwise": (one(helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4, group=4), {"x": x},
                          {"w": np.ones((4, 1, 3, 3), np.float32)}), {"x": x}, (0, 4, 6, 6)),
        "maxpool": (one(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2]), {"x": x}), {"x": x},
                    (0, 4, 5, 5)),
        "global-average-pool": (one(helper.make_node("GlobalAveragePool", ["x"], ["y"]), {"x": x}), {"x": x},
                                (0, 4, 1, 1)),
        "matmul": (one(helper.make_node("MatMul", ["a", "m"], ["y"]), {"a": a}, {"m": np.ones((16, 8), np.float32)}),
                   {"a": a}, (0, 8)),
        "gemm": (one(helper.make_node("Gemm", ["a", "m", "c"], ["y"]), {"a": a},
                     {"m": np.ones((16, 8), np.float32), "c": np.ones(8, np.float32)}), {"a": a}, (0, 8)),
        "softmax-over-the-empty-axis": (one(helper.make_node("Softmax", ["a"], ["y"], axis=0), {"a": a}), {"a": a},
                                        (0, 16)),
        "log-softmax": (one(helper.make_node("LogSoftmax", ["a"], ["y"], axis=1), {"a": a}), {"a": a}, (0, 16)),
        "reduce-mean-over-the-empty-axis": (one(helper.make_node("ReduceMean", ["a"], ["y"], axes=[0]), {"a": a}),
                                            {"a": a}, (1, 16)),
        "transpose": (one(helper.make_node("Transpose", ["a"], ["y"], perm=[1, 0]), {"a": a}), {"a": a}, (16, 0)),
        "concat": (one(helper.make_node("Concat", ["a", "a"], ["y"], axis=1), {"a": a}), {"a": a}, (0, 32)),
        "reshape-minus-one": (one(helper.make_node("Reshape", ["a", "s"], ["y"]), {"a": a},
                                  {"s": np.array([-1, 4, 4], np.int64)}), {"a": a}, (0, 4, 4)),
        "layer-norm": (one(helper.make_node("LayerNormalization", ["a", "g", "h"], ["y"]), {"a": a},
                           {"g": np.ones(16, np.float32), "h": np.zeros(16, np.float32)}), {"a": a}, (0, 16)),
        "resize": (one(helper.make_node("Resize", ["x", "", "sc"], ["y"]), {"x": x},
                       {"sc": np.array([1, 1, 2, 2], np.float32)}), {"x": x}, (0, 4, 12, 12)),
    }


ZERO_CASES = _zero_cases()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(ZERO_CASES))
def test_a_zero_size_batch_runs_and_returns_an_empty_output(backend, case):
    proto, feeds, shape = ZERO_CASES[case]
    model = ws.load_model(SAMPLE) if proto is None else ws.load_model(proto)
    with ws.Worker(model, backend) as worker:
        for _ in range(2):  # the recorded run and its replay
            out = next(iter(worker.run(feeds).values()))
            assert out.shape == shape and out.dtype == np.float32, f"{case} on {backend}: {out.dtype}{out.shape}"
    if case == "reduce-mean-over-the-empty-axis":
        assert np.isnan(out).all()  # the mean of nothing, as numpy says (without its warning)
