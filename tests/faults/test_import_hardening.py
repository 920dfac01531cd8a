"""Hostile and malformed models are refused at load with a typed error naming the culprit: external data
through links, graphs that break SSA or scope, cycles, negative dims, unknown IR versions, deep nesting;
acyclic graphs merely out of order load, sorted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import F, make_model
from onnx import AttributeProto, TensorProto, helper, numpy_helper

import wgsentis as ws
from wgsentis import onnx_import
from wgsentis.errors import ExternalDataError, ModelLoadError

B = TensorProto.BOOL
F16 = TensorProto.FLOAT16


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with ws.Worker(ws.load_model(model), "cpu") as worker:
        return worker.run(feeds)


# -- external data ---------------------------------------------------------------------------------------
def _external_model(folder: Path, location: str = "w.bin") -> Path:
    """m.onnx in ``folder`` adding a 6-float initializer 'w' stored at ``location`` (not written here)."""
    tensor = numpy_helper.from_array(np.zeros(6, np.float32), "w")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "24")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", F, [6])], [("y", F, [6])])
    model.graph.initializer.append(tensor)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "m.onnx").write_bytes(model.SerializeToString())
    return folder / "m.onnx"


WEIGHTS = np.arange(6, dtype=np.float32).tobytes()


@pytest.mark.parametrize("target_inside", [False, True])
def test_external_data_hard_link_refused(tmp_path, target_inside):
    path = _external_model(tmp_path / "model")
    source = (tmp_path / "model" / "other.bin") if target_inside else (tmp_path / "secret.bin")
    source.write_bytes(WEIGHTS)
    os.link(source, tmp_path / "model" / "w.bin")
    with pytest.raises(ExternalDataError) as info:
        ws.load_model(path)
    msg = str(info.value)
    assert "model 'm'" in msg and "initializer 'w'" in msg and "'w.bin'" in msg
    assert "is a hard link (2 links)" in msg


def test_external_data_symlink_inside_folder_refused(tmp_path):
    path = _external_model(tmp_path / "model")
    (tmp_path / "model" / "real.bin").write_bytes(WEIGHTS)
    os.symlink("real.bin", tmp_path / "model" / "w.bin")  # stays inside, still a link: refused
    with pytest.raises(ExternalDataError, match=r"initializer 'w' external data 'w\.bin'.*symbolic link"):
        ws.load_model(path)


def test_external_data_symlinked_directory_refused(tmp_path):
    path = _external_model(tmp_path / "model", "sub/w.bin")
    (tmp_path / "model" / "real").mkdir()
    (tmp_path / "model" / "real" / "w.bin").write_bytes(WEIGHTS)
    os.symlink("real", tmp_path / "model" / "sub")
    with pytest.raises(ExternalDataError, match=r"'sub/w\.bin' goes through the symbolic link 'sub'"):
        ws.load_model(path)


def test_external_data_fifo_refused_without_hanging(tmp_path):
    path = _external_model(tmp_path / "model")
    os.mkfifo(tmp_path / "model" / "w.bin")  # opening it for reading would block without O_NONBLOCK
    with pytest.raises(ExternalDataError, match=r"'w\.bin' is not a regular file"):
        ws.load_model(path)


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_external_data_saved_by_onnx_loads_opens_each_file_once_and_closes(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    weights = {f"w{i}": rng.standard_normal((64, 64)).astype(np.float32) for i in range(3)}
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h0"]), helper.make_node("MatMul", ["h0", "w1"], ["h1"]),
             helper.make_node("MatMul", ["h1", "w2"], ["y"])]
    model = make_model(nodes, [("x", F, [2, 64])], [("y", F, [2, 64])], weights)
    onnx.save_model(model, tmp_path / "mm.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="mm.data", size_threshold=0)
    opened: list[str] = []
    real_open = os.open

    def spying_open(path, flags, *args, **kwargs):
        opened.append(os.fsdecode(path))
        return real_open(path, flags, *args, **kwargs)

    before = _open_fds()
    monkeypatch.setattr(onnx_import.os, "open", spying_open)
    loaded = ws.load_model(tmp_path / "mm.onnx")
    monkeypatch.undo()
    assert opened.count("mm.data") == 1, opened  # three tensors, one open
    assert _open_fds() <= before  # every descriptor closed again
    x = rng.standard_normal((2, 64)).astype(np.float32)
    with ws.Worker(loaded, "cpu") as worker:
        out = worker.run({"x": x})["y"]
    np.testing.assert_allclose(out, x @ weights["w0"] @ weights["w1"] @ weights["w2"], rtol=1e-4, atol=1e-4)


def test_external_data_descriptors_closed_on_error(tmp_path):
    path = _external_model(tmp_path / "model")
    (tmp_path / "model" / "w.bin").write_bytes(WEIGHTS)
    model = onnx.load(path, load_external_data=False)
    model.graph.initializer.append(TensorProto(name="bad", data_type=F, dims=[2, -3]))  # read after 'w'

    before = _open_fds()
    with pytest.raises(ModelLoadError, match=r"initializer 'bad' has negative dims \[2, -3\]"):
        ws.load_model(model, base_dir=tmp_path / "model")
    assert _open_fds() <= before


# -- SSA and scope ---------------------------------------------------------------------------------------
def test_two_nodes_writing_one_tensor_refused():
    nodes = [helper.make_node("Relu", ["x"], ["t"], name="first"), helper.make_node("Neg", ["x"], ["t"], name="second"),
             helper.make_node("Identity", ["t"], ["y"], name="out")]
    with pytest.raises(ModelLoadError, match=r"nodes 'first' \(Relu\) and 'second' \(Neg\) .* both write tensor 't'"):
        ws.load_model(make_model(nodes, [("x", F, [2])], [("y", F, [2])]))


@pytest.mark.parametrize("target", ["x", "w"])
def test_node_writing_graph_input_or_initializer_refused(target):
    nodes = [helper.make_node("Relu", ["x"], [target], name="clobber"), helper.make_node("Add", ["x", "w"], ["y"])]
    model = make_model(nodes, [("x", F, [2])], [("y", F, [2])], {"w": np.ones(2, np.float32)})
    what = "a graph input" if target == "x" else "an initializer"
    with pytest.raises(ModelLoadError, match=rf"node 'clobber' \(Relu\) .* writes tensor '{target}', which is {what}"):
        ws.load_model(model)


def _loop(body_nodes, name: str = "loop", outer_nodes=(), inputs=(("x", F, [1]),), initializers=()):
    """A Loop running ``body_nodes`` (v_in -> v_out) 3 times over v0 = x; the model's output is v."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond"), *body_nodes], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", B, []),
         helper.make_tensor_value_info("v_in", F, [1])],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("v_out", F, [1])])
    loop = helper.make_node("Loop", ["trip", "c", "x"], ["v"], name=name, body=body)
    return make_model([*outer_nodes, loop],
                      [("trip", TensorProto.INT64, []), ("c", B, []), *inputs], [("v", F, [1])], initializers)


def _loop_feeds(x: float = 1.0) -> dict[str, np.ndarray]:
    return {"trip": np.array(3), "c": np.array(True), "x": np.array([x], np.float32)}


def test_duplicate_producer_inside_subgraph_refused():
    body = [helper.make_node("Neg", ["v_in"], ["v_out"], name="n1"),
            helper.make_node("Relu", ["v_in"], ["v_out"], name="n2")]
    with pytest.raises(ModelLoadError, match=r"nodes 'n1' \(Neg\) and 'n2' \(Relu\) in graph 'test/loop\.body' "
                                             r"both write tensor 'v_out'"):
        ws.load_model(_loop(body))


def test_negative_initializer_dims_refused():
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", F, [2])], [("y", F, [2])])
    model.graph.initializer.append(TensorProto(name="w", data_type=F, dims=[-1, 2], float_data=[1.0, 2.0]))
    with pytest.raises(ModelLoadError, match=r"model 'test': initializer 'w' has negative dims \[-1, 2\]"):
        ws.load_model(model)


def test_negative_dims_in_sparse_initializer_and_constant_refused():
    model = make_model([helper.make_node("Add", ["x", "s"], ["y"])], [("x", F, [2])], [("y", F, [2])])
    values = numpy_helper.from_array(np.ones(1, np.float32), "s")
    indices = numpy_helper.from_array(np.zeros(1, np.int64), "s_idx")
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [-2]))
    with pytest.raises(ModelLoadError, match=r"sparse initializer 's' has negative dims \[-2\]"):
        ws.load_model(model)
    const = helper.make_node("Constant", [], ["k"], name="konst",
                             value=TensorProto(name="k", data_type=F, dims=[2, -1], float_data=[1.0, 2.0]))
    model = make_model([const, helper.make_node("Add", ["x", "k"], ["y"])], [("x", F, [2])], [("y", F, [2])])
    with pytest.raises(ModelLoadError, match=r"attribute 'value' of node 'konst' has negative dims \[2, -1\]"):
        ws.load_model(model)


def test_ir_version_newer_than_onnx_knows_refused():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [1])], [("y", F, [1])])
    model.ir_version = onnx.IR_VERSION + 5
    with pytest.raises(ModelLoadError, match=rf"model 'test' has IR version {onnx.IR_VERSION + 5}, newer than the "
                                             rf"newest the installed onnx .* knows \({onnx.IR_VERSION}\)"):
        ws.load_model(model)


# -- cycles and unknown inputs ---------------------------------------------------------------------------
def test_cycle_refused_naming_nodes_and_tensors():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="start"), helper.make_node("Add", ["a", "c"], ["b"], name="p"),
             helper.make_node("Neg", ["b"], ["c"], name="q"), helper.make_node("Identity", ["c"], ["y"], name="out")]
    with pytest.raises(ModelLoadError, match=r"nodes 'p' -> 'q' -> 'p' in graph 'test' form a cycle "
                                             r"\(through tensors 'b', 'c'\)"):
        ws.load_model(make_model(nodes, [("x", F, [1])], [("y", F, [1])]))


def test_node_reading_its_own_output_is_a_cycle():
    nodes = [helper.make_node("Add", ["x", "y"], ["y"], name="selfish")]
    with pytest.raises(ModelLoadError, match=r"nodes 'selfish' -> 'selfish' .* form a cycle \(through tensors 'y'\)"):
        ws.load_model(make_model(nodes, [("x", F, [1])], [("y", F, [1])]))


def test_cycle_inside_subgraph_refused():
    body = [helper.make_node("Add", ["v_in", "t2"], ["t1"], name="b1"),
            helper.make_node("Neg", ["t1"], ["t2"], name="b2"),
            helper.make_node("Identity", ["t2"], ["v_out"], name="b3")]
    with pytest.raises(ModelLoadError, match=r"nodes 'b1' -> 'b2' -> 'b1' in graph 'test/loop\.body' form a cycle"):
        ws.load_model(_loop(body))


def test_cycle_through_a_captured_value_refused():
    # the Loop's body reads 'h', which is computed from the Loop's own output
    body = [helper.make_node("Add", ["v_in", "h"], ["v_out"], name="acc")]
    model = _loop(body, outer_nodes=[helper.make_node("Neg", ["v"], ["h"], name="from_v")])
    with pytest.raises(ModelLoadError, match=r"nodes '(loop' -> 'from_v' -> 'loop|from_v' -> 'loop' -> 'from_v)'"):
        ws.load_model(model)


def test_input_nobody_produces_refused():
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")]
    with pytest.raises(ModelLoadError, match=r"node 'adder' \(Add\) in graph 'test' reads tensor 'ghost', which no "
                                             r"node, graph input or initializer"):
        ws.load_model(make_model(nodes, [("x", F, [1])], [("y", F, [1])]))


def test_input_nobody_produces_inside_subgraph_refused():
    body = [helper.make_node("Add", ["v_in", "ghost"], ["v_out"], name="inner_add")]
    with pytest.raises(ModelLoadError, match=r"node 'inner_add' \(Add\) in graph 'test/loop\.body' reads tensor "
                                             r"'ghost', which no node, graph input or initializer of this or "
                                             r"an enclosing graph produces"):
        ws.load_model(_loop(body))


def test_output_nobody_produces_refused():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [1])], [("y", F, [1]), ("z", F, [1])])
    with pytest.raises(ModelLoadError, match=r"output 'z' of graph 'test' is produced by no node"):
        ws.load_model(model)


# -- out of order, sorted at import ----------------------------------------------------------------------
def test_out_of_order_graph_loads_and_matches_in_order():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Mul", ["a", "a"], ["b"], name="sq"),
             helper.make_node("Sub", ["b", "x"], ["c"], name="sub"),
             helper.make_node("Add", ["c", "a"], ["y"], name="add")]
    feeds = {"x": np.array([-2.0, -0.5, 0.5, 3.0], np.float32)}
    expected = _run(make_model(nodes, [("x", F, [4])], [("y", F, [4])]), feeds)["y"]
    shuffled = [nodes[3], nodes[1], nodes[2], nodes[0]]
    model = make_model(shuffled, [("x", F, [4])], [("y", F, [4])])
    np.testing.assert_array_equal(_run(model, feeds)["y"], expected)
    np.testing.assert_array_equal(expected, np.maximum(feeds["x"], 0) ** 2 - feeds["x"] + np.maximum(feeds["x"], 0))
    assert len(model.graph.node) == 4 and model.graph.node[0].name == "add"  # the caller's proto is left alone


def test_valid_order_is_kept():
    nodes = [helper.make_node("Neg", ["x"], ["b"], name="second"), helper.make_node("Relu", ["x"], ["a"], name="first"),
             helper.make_node("Add", ["a", "b"], ["y"], name="join")]
    model = ws.load_model(make_model(nodes, [("x", F, [1])], [("y", F, [1])]), optimize=False)
    assert [layer.name for layer in model.imported.layers] == ["second", "first", "join"]


def test_out_of_order_loop_body_and_captured_value_load_and_match():
    # body: v_out = (v_in + w) * 2, its nodes reversed; w is an outer value produced after the Loop node
    body = [helper.make_node("Mul", ["s", "two"], ["v_out"], name="double"),
            helper.make_node("Add", ["v_in", "w"], ["s"], name="plus_w")]
    outer = [helper.make_node("Relu", ["x"], ["w"], name="make_w")]
    model = _loop(body, initializers={"two": np.array([2.0], np.float32)})
    model.graph.node.append(outer[0])  # after the Loop that captures 'w'
    out = _run(model, _loop_feeds(1.5))["v"]
    x = 1.5
    v = x
    for _ in range(3):
        v = (v + max(x, 0.0)) * 2
    np.testing.assert_allclose(out, [v])


def test_out_of_order_if_branch_loads_and_matches():
    then_branch = helper.make_graph(
        [helper.make_node("Neg", ["t"], ["r"], name="neg"), helper.make_node("Add", ["x", "x"], ["t"], name="dbl")],
        "then", [], [helper.make_tensor_value_info("r", F, [2])])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                                    [helper.make_tensor_value_info("e", F, [2])])
    model = make_model([helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_branch,
                                         else_branch=else_branch)], [("c", B, []), ("x", F, [2])], [("y", F, [2])])
    x = np.array([1.0, -3.0], np.float32)
    np.testing.assert_array_equal(_run(model, {"c": np.array(True), "x": x})["y"], -2 * x)
    np.testing.assert_array_equal(_run(model, {"c": np.array(False), "x": x})["y"], x)


def test_float16_converted_model_with_input_casts_at_the_end_loads():
    # the layout float16 converters leave: the body computes in float16, the input Cast comes last
    nodes = [helper.make_node("Mul", ["x16", "k"], ["m"], name="scale"),
             helper.make_node("Relu", ["m"], ["r"], name="relu"),
             helper.make_node("Cast", ["r"], ["y"], name="output_cast", to=F),
             helper.make_node("Cast", ["x"], ["x16"], name="input_cast", to=F16)]
    model = make_model(nodes, [("x", F, [3])], [("y", F, [3])], {"k": np.array([2, -1, 0.5], np.float16)})
    x = np.array([1.0, 2.0, -4.0], np.float32)
    expected = np.maximum(x * [2, -1, 0.5], 0)
    np.testing.assert_array_equal(_run(model, {"x": x})["y"], expected)
    loaded = ws.load_model(model.SerializeToString(), optimize=False)  # parsed here, so sorted in place
    assert [layer.name for layer in loaded.imported.layers] == ["input_cast", "scale", "relu", "output_cast"]
    with ws.Worker(loaded, "cpu") as worker:
        np.testing.assert_array_equal(worker.run({"x": x})["y"], expected)


# -- nesting depth ---------------------------------------------------------------------------------------
NESTED_IFS = '''
import sys
import onnx
from onnx import AttributeProto, TensorProto, helper


def nested(n):
    """n Ifs nested in their then branches, built in place (protobuf will not copy messages that deep)."""
    vi = helper.make_tensor_value_info
    inputs = [vi("c", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, [1])]
    model = helper.make_model(helper.make_graph([], "main", inputs, [vi("y1", TensorProto.FLOAT, [1])]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    graph = model.graph
    for i in range(1, n + 1):
        node = graph.node.add()
        node.op_type, node.name = "If", f"if{i}"
        node.input.append("c")
        node.output.append(f"y{i}")
        other = node.attribute.add()
        other.name, other.type = "else_branch", AttributeProto.GRAPH
        other.g.name = f"e{i}"
        leaf = other.g.node.add()
        leaf.op_type = "Identity"
        leaf.input.append("x")
        leaf.output.append(f"e{i}")
        other.g.output.add().CopyFrom(vi(f"e{i}", TensorProto.FLOAT, [1]))
        then = node.attribute.add()
        then.name, then.type = "then_branch", AttributeProto.GRAPH
        graph = then.g
        graph.name = f"t{i}"
        graph.output.add().CopyFrom(vi(f"y{i + 1}", TensorProto.FLOAT, [1]))
    leaf = graph.node.add()
    leaf.op_type = "Identity"
    leaf.input.append("x")
    leaf.output.append(f"y{n + 1}")
    return model
'''


def _child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NESTED_IFS + code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])


@pytest.mark.parametrize("depth", [onnx_import.MAX_SUBGRAPH_DEPTH + 1, 200])
def test_deep_nesting_refused_from_proto_bytes_and_path(tmp_path, depth):
    code = f'''
import wgsentis as ws
model = nested({depth})
path = {str(tmp_path / "deep.onnx")!r}
with open(path, "wb") as fh:
    fh.write(model.SerializeToString())
for label, src in (("proto", model), ("bytes", model.SerializeToString()), ("path", path)):
    try:
        ws.load_model(src)
        print(label, "loaded")
    except Exception as exc:
        print(label, type(exc).__name__, exc)
'''
    child = _child(code)
    assert child.returncode == 0, child.stderr[-2000:]
    lines = child.stdout.strip().splitlines()
    assert [line.split()[:2] for line in lines] == [["proto", "ModelLoadError"], ["bytes", "ModelLoadError"],
                                                   ["path", "ModelLoadError"]], child.stdout
    limit = onnx_import.MAX_SUBGRAPH_DEPTH
    for line in lines:
        assert f"subgraphs nest deeper than the limit of {limit} (MAX_SUBGRAPH_DEPTH)" in line
        assert "'if1' > 'if2'" in line and f"'if{limit + 1}'" in line
    assert re.search(r"model '([^']*/)?deep(\.onnx)?'", lines[2]), lines[2]  # the file's name or path


def test_nesting_at_the_limit_loads_and_runs():
    code = f'''
import numpy as np
import wgsentis as ws
model = ws.load_model(nested({onnx_import.MAX_SUBGRAPH_DEPTH}).SerializeToString())
with ws.Worker(model, "cpu") as worker:
    print(worker.run({{"c": np.array(True), "x": np.array([4.0], np.float32)}})["y1"].tolist())
'''
    child = _child(code)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip() == "[4.0]"


def test_attribute_graph_types_are_walked_for_depth():
    # a graph hidden in an attribute whose declared type is not GRAPH still counts towards the depth
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="host")], [("x", F, [1])], [("y", F, [1])])
    attr = model.graph.node[0].attribute.add()
    attr.name, attr.type = "hidden", AttributeProto.INT
    inner = attr.g
    for i in range(onnx_import.MAX_SUBGRAPH_DEPTH):
        node = inner.node.add()
        node.op_type, node.name = "If", f"level{i}"
        sub = node.attribute.add()
        sub.name, sub.type = "then_branch", AttributeProto.GRAPH
        inner = sub.g
    inner.name = "leaf"  # a graph is present once anything in it is set
    with pytest.raises(ModelLoadError, match=r"deeper than the limit .* node path 'host' > 'level0'"):
        ws.load_model(model)


# -- names that are not text, ranks numpy cannot hold --------------------------------------------------------------
def _rank_bomb(case: str) -> onnx.ModelProto:
    """A model whose ``case`` asks for a tensor of rank 4096 (numpy holds 64): before the check, ONNX's shape
    inference copied the rank-N type into every value downstream (2**18 elements grew loading by 471 MB)."""
    long = numpy_helper.from_array(np.ones(4096, np.int64), "target")
    relus = [helper.make_node("Relu", [f"r{k}"], [f"r{k + 1}"], name=f"relu{k}") for k in range(3)]
    if case == "declared-input":
        dims = [1] * 4096
        return make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, dims)], [("y", F, None)])
    if case == "initializer":
        big = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1] * 65, float_data=[1.0])
        model = make_model([helper.make_node("Relu", ["w"], ["y"])], [], [("y", F, None)])
        model.graph.initializer.append(big)
        return model
    if case == "unsqueeze-axes":
        node = helper.make_node("Unsqueeze", ["x", "target"], ["r0"], name="grow")
        long = numpy_helper.from_array(np.arange(100, dtype=np.int64), "target")
        model = make_model([node, *relus], [("x", F, [1])], [("r3", F, None)])
    else:
        op, inputs = {"Reshape": ("Reshape", ["x", "target"]), "Expand": ("Expand", ["x", "target"]),
                      "ConstantOfShape": ("ConstantOfShape", ["target"])}[case]
        model = make_model([helper.make_node(op, inputs, ["r0"], name="grow"), *relus], [("x", F, [1])],
                           [("r3", F, None)])
    model.graph.initializer.append(long)
    return model


@pytest.mark.parametrize("case", ["Reshape", "Expand", "ConstantOfShape", "unsqueeze-axes", "declared-input",
                                  "initializer"])
def test_a_rank_numpy_cannot_hold_is_refused_before_shape_inference(case):
    with pytest.raises(ModelLoadError, match=r"rank \d+; tensors of rank above 64") as info:
        ws.load_model(_rank_bomb(case))
    culprit = {"declared-input": "'x'", "initializer": "'w'"}.get(case, "'grow'")
    assert culprit in str(info.value)


def test_a_rank_of_64_still_loads_and_runs():
    model = make_model([helper.make_node("Reshape", ["x", "target"], ["y"])], [("x", F, [2])], [("y", F, None)])
    model.graph.initializer.append(numpy_helper.from_array(np.array([2] + [1] * 63, np.int64), "target"))
    assert _run(model, {"x": np.ones(2, np.float32)})["y"].ndim == 64


@pytest.mark.parametrize("field", ["graph-input", "initializer", "metadata"])
def test_a_name_that_is_not_utf8_is_refused(field):
    mark = "Q\u00e9Q"
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", F, [1])], [("y", F, [1])])
    model.graph.initializer.append(numpy_helper.from_array(np.ones(1, np.float32), "w"))
    if field == "graph-input":
        model.graph.input[0].name = "x" + mark
        model.graph.node[0].input[0] = "x" + mark
    elif field == "initializer":
        model.graph.initializer[0].name = "w" + mark
        model.graph.node[0].input[1] = "w" + mark
    else:
        model.metadata_props.add(key="k" + mark, value="v")
    data = model.SerializeToString().replace("\u00e9".encode(), b"\xff\xa9")
    with pytest.raises(ModelLoadError, match="not valid UTF-8"):
        ws.load_model(data)
