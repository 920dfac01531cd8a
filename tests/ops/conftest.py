"""Fixtures shared by the op tests: the orientation reference model quantized by ONNX Runtime's own tools (the
``shaders`` fixture is tests/conftest.py's)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest


@pytest.fixture(scope="session")
def orientation_models(tmp_path_factory):
    """The orientation reference model quantized three ways: static QDQ, static QOperator, dynamic."""
    zoo = pytest.importorskip("zoo")
    quantization = pytest.importorskip("onnxruntime.quantization")
    proto = zoo.load_proto("orientation")
    feeds = zoo.input_feeds("orientation", proto)
    folder = tmp_path_factory.mktemp("quantized")
    source = folder / "float.onnx"
    onnx.save(proto, source)

    class Calibration(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(5)
            self.batches = iter([{k: v + rng.standard_normal(v.shape).astype(np.float32) * 0.1
                                  for k, v in feeds.items()} for _ in range(3)])

        def get_next(self):
            return next(self.batches, None)

    paths = {}
    for name in ("QDQ", "QOperator"):
        paths[name] = folder / f"static_{name}.onnx"
        quantization.quantize_static(source, paths[name], Calibration(),
                                     quant_format=getattr(quantization.QuantFormat, name))
    paths["dynamic"] = folder / "dynamic.onnx"
    quantization.quantize_dynamic(source, paths["dynamic"])
    return paths, feeds
