"""Messages that name the culprit (issue 29, point 11): com.microsoft ops given inputs of the wrong rank or size
raise a LayerError naming the layer, the op, the input and the dim at fault, checked before any arithmetic, and
the same error on every backend (the GPU programs call the kernels' checks), instead of numpy's own words
("tuple index out of range", "cannot reshape array of size ..."); the GPU plan-memory refusal reports the layer's
own output size and the plan's total apart; the CLI reports a file problem in one line and a nonzero exit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from helpers import BACKENDS, requires_gpu
from onnx import helper as h
from onnx import numpy_helper

import wgsentis as ws
from wgsentis.errors import LayerError

MS = "com.microsoft"
RNG = np.random.default_rng(29)
Case = tuple[onnx.ModelProto, dict[str, np.ndarray]]


def _model(op: str, names: list[str], feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray],
           outputs: int = 1, **attrs: Any) -> Case:
    """One ``op`` node named "bad" over ``names`` ("" for an omitted input); feeds become graph inputs."""
    outs = [f"y{k}" for k in range(outputs)]
    graph = h.make_graph([h.make_node(op, names, outs, name="bad", domain=MS, **attrs)], "bad",
                         [h.make_tensor_value_info(k, h.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                          for k, v in feeds.items()],
                         [h.make_empty_tensor_value_info(o) for o in outs],
                         [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model, feeds


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _i8(*shape: int) -> np.ndarray:
    return RNG.integers(-128, 128, shape).astype(np.int8)


def _mha(query: np.ndarray, key: np.ndarray, value: np.ndarray) -> Case:
    return _model("MultiHeadAttention", ["q", "k", "v"], {"q": query, "k": key, "v": value}, {}, num_heads=2)


def _gqa(query: np.ndarray, key: np.ndarray, heads: int, kv_heads: int) -> Case:
    consts = {"sl": np.full(query.shape[0], query.shape[1] - 1, np.int32), "tot": np.array(query.shape[1], np.int32)}
    return _model("GroupQueryAttention", ["q", "k", "v", "", "", "sl", "tot"], {"q": query, "k": key, "v": key},
                  consts, num_heads=heads, kv_num_heads=kv_heads)


def _rotary(x: np.ndarray, cos: np.ndarray) -> Case:
    consts = {"pos": np.array([0], np.int64), "cos": cos, "sin": cos.copy()}
    return _model("RotaryEmbedding", ["x", "pos", "cos", "sin"], {"x": x}, consts)


def _skip_norm(x: np.ndarray, skip: np.ndarray, gamma: np.ndarray) -> Case:
    return _model("SkipLayerNormalization", ["x", "skip", "gamma"], {"x": x, "skip": skip}, {"gamma": gamma})


def _qgemm(a: np.ndarray, b: np.ndarray) -> Case:
    consts = {"as": np.array(0.04, np.float32), "az": np.array(120, np.uint8), "b": b,
              "bs": np.array(0.01, np.float32), "bz": np.array(0, np.int8)}
    return _model("QGemm", ["a", "as", "az", "b", "bs", "bz"], {"a": a}, consts, transB=1)


def _lstm(x: np.ndarray, w: np.ndarray, h0: np.ndarray | None = None) -> Case:
    scale, zero = np.array([0.01], np.float32), np.zeros(1, np.int8)
    consts = {"w": w, "r": _i8(1, 4, 16), "ws": scale, "wz": zero, "rs": scale, "rz": zero}
    names = ["x", "w", "r", "", "", "", "", "", "ws", "wz", "rs", "rz"]
    if h0 is not None:
        consts["h0"], names[5] = h0, "h0"
    return _model("DynamicQuantizeLSTM", names, {"x": x}, consts, outputs=3, hidden_size=4)


_cos = np.ones((20, 4), np.float32)
CASES: dict[str, tuple[Callable[[], Case], str]] = {
    "mha-key-rank": (lambda: _mha(_f(2, 5, 16), _f(5, 16), _f(5, 16)),
                     r"input 1 \(key\) must be \(B, L, D\).*got shape \[5, 16\] \(rank 2, not 3\)"),
    "mha-heads": (lambda: _mha(_f(2, 5, 15), _f(2, 5, 15), _f(2, 5, 15)),
                  r"input 0 \(query\) of shape \[2, 5, 15\]: dim 2 \(D\) 15 is not a multiple of num_heads 2"),
    "mha-value-length": (lambda: _mha(_f(2, 5, 16), _f(2, 5, 16), _f(2, 6, 16)),
                         r"input 2 \(value\).*dim 1 \(L\) is 6, expected 5"),
    "gqa-query-rank": (lambda: _gqa(_f(3, 16), _f(3, 8), 2, 1), r"input 0 \(query\) must be \(B, S, D\)"),
    "gqa-key-width": (lambda: _gqa(_f(1, 3, 16), _f(1, 3, 12), 2, 1), r"input 1 \(key\).*dim 2 \(Nkv x H\) is 12"),
    "gqa-heads": (lambda: _gqa(_f(1, 3, 24), _f(1, 3, 16), 3, 2), r"num_heads 3 .* kv_num_heads 2"),
    "rotary-cache-rank": (lambda: _rotary(_f(1, 3, 16), _cos[:, 0].copy()),
                          r"input 2 \(cos_cache\) must be \(max_position, rotary_dim / 2\).*\(rank 1, not 2\)"),
    "rotary-heads": (lambda: _rotary(_f(1, 3, 18), _cos), r"input 0 \(input\).*dim 2 \(D\) 18 is not a whole number"),
    "skip-norm-gamma": (lambda: _skip_norm(_f(2, 5, 32), _f(2, 5, 32), _f(16)),
                        r"input 2 \(gamma\).*dim 0 \(H\) is 16, expected 32"),
    "skip-norm-skip": (lambda: _skip_norm(_f(2, 5, 32), _f(2, 4, 32), _f(32)),
                       r"input 1 \(skip\) of shape \[2, 4, 32\]"),
    "qgemm-k": (lambda: _qgemm(RNG.integers(0, 255, (4, 6)).astype(np.uint8), _i8(5, 7)),
                r"input 3 \(B\) must be \(N, K\) with K = 6.*dim 1 \(K\) is 7, expected 6"),
    "qgemm-a-rank": (lambda: _qgemm(RNG.integers(0, 255, (2, 4, 6)).astype(np.uint8), _i8(5, 6)),
                     r"input 0 \(A\) must be \(M, K\).*\(rank 3, not 2\)"),
    "lstm-w-inputs": (lambda: _lstm(_f(5, 3, 6), _i8(1, 7, 16)), r"input 1 \(W\).*dim 1 \(I\) is 7, expected 6"),
    "lstm-x-rank": (lambda: _lstm(_f(5, 6), _i8(1, 6, 16)), r"input 0 \(X\) must be \(S, B, I\).*\(rank 2, not 3\)"),
    "lstm-h0-batch": (lambda: _lstm(_f(5, 3, 6), _i8(1, 6, 16), _f(1, 2, 4)),
                      r"input 5 \(initial_h\).*dim 1 \(B\) is 2, expected 3"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_contrib_bad_shapes_name_the_input_and_dim(backend: str, case: str) -> None:
    build, pattern = CASES[case]
    model, feeds = build()
    with ws.Worker(ws.load_model(model.SerializeToString()), backend) as worker, \
            pytest.raises(LayerError, match=pattern) as info:
        worker.run(feeds)
    assert info.value.layer == "bad"
    assert str(info.value).startswith("layer 'bad' (")
    for numpy_words in ("tuple index", "cannot reshape", "broadcast", "zip()", "unpack", "gufunc"):
        assert numpy_words not in str(info.value)


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_the_plan_memory_refusal_names_the_layers_own_bytes_and_the_plans_total(backend: str) -> None:
    """Five 4 MiB intermediates alive at once under a 16 MiB limit: the layer whose buffer passes it is named
    with its own 4 MiB (it said the plan's total was the layer's output), and the plan's total apart."""
    from onnx import TensorProto

    from wgsentis.errors import ResourceLimitError

    ops = ["Relu", "Neg", "Abs", "Exp", "Sigmoid"]
    nodes = [h.make_node(op, ["x"], [f"t{k}"], name=f"u{k}") for k, op in enumerate(ops)]
    nodes.append(h.make_node("Sum", [f"t{k}" for k in range(len(ops))], ["y"], name="sum"))
    graph = h.make_graph(nodes, "held", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1 << 20])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = ws.load_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    with ws.Worker(model, backend, memory_limit=16 << 20) as worker, \
            pytest.raises(ResourceLimitError, match="device memory of the plan") as info:
        worker.run({"x": np.ones(1 << 20, np.float32)})
    error = info.value
    assert 4 << 20 <= error.nbytes < 5 << 20  # one intermediate (a texture may round up a little)
    assert error.total is not None and error.total > 16 << 20
    assert f"needs {error.nbytes:,} bytes" in str(error) and f"to {error.total:,} bytes" in str(error)


def _cli_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI on ``argv``; assert a nonzero exit and a one-line message; return it."""
    from wgsentis.cli import main

    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"wgsentis {argv[0]}: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def test_cli_output_dir_that_is_a_file_is_one_line(tmp_path, capsys) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("")
    assert f"--output-dir {blocker}: is a file" in _cli_error(["run", "--output-dir", str(blocker)], capsys)
    nested = blocker / "out"
    assert f"'{blocker}' is a file" in _cli_error(["run", "--output-dir", str(nested)], capsys)


@pytest.mark.parametrize("flag", ["--json", "--trace", "--html"])
def test_cli_unwritable_profile_outputs_are_refused_before_profiling(flag, tmp_path, capsys) -> None:
    target = tmp_path / "no-such-folder" / "p.out"
    err = _cli_error(["profile", "--backend", "cpu", "--runs", "1", "--quiet", flag, str(target)], capsys)
    assert f"{flag} {target}" in err and "does not exist" in err
    err = _cli_error(["profile", "--backend", "cpu", "--runs", "1", "--quiet", flag, str(tmp_path)], capsys)
    assert "is a folder" in err


def test_cli_missing_model_is_one_line(tmp_path, capsys) -> None:
    assert str(tmp_path / "missing.onnx") in _cli_error(["inspect", str(tmp_path / "missing.onnx")], capsys)


@pytest.mark.parametrize(("array", "words"), [(np.zeros((1, 3, 16, 16), np.float32), "expects shape"),
                                              (np.zeros((1, 3, 32, 32), np.float64), "expects dtype float32")])
def test_cli_inspect_checks_its_inputs_as_run_does(array, words, tmp_path, capsys) -> None:
    """inspect ran the model on any array (a 16x16 image through a 32x32 model); now it is run's error."""
    np.save(tmp_path / "x.npy", array)
    argv = ["--input", f"image={tmp_path / 'x.npy'}"]
    inspected = _cli_error(["inspect", *argv], capsys)
    assert words in inspected and "input 'image'" in inspected
    ran = _cli_error(["run", *argv], capsys)
    assert inspected.removeprefix("wgsentis inspect: ") == ran.removeprefix("wgsentis run: ")
