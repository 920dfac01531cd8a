"""wgsentis.onnx_backend drives the engine through ONNX's own backend test runner."""

from __future__ import annotations

import unittest

import numpy as np
import onnx.backend.test
from helpers import F, make_model, requires_gpu
from onnx import helper

import wgsentis.onnx_backend as backend


def test_run_model_and_supports_device():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [3])], [("y", F, [3])])
    (out,) = backend.run_model(model, [np.array([-1, 0, 2], np.float32)])
    np.testing.assert_array_equal(out, [0, 0, 2])
    assert backend.supports_device("CPU")


def test_onnx_backend_test_runner_subset():
    suite_builder = onnx.backend.test.BackendTest(backend, __name__)
    for pattern in (r"test_relu_cpu", r"test_conv_with_strides_padding_cpu", r"test_gemm_default_.*_cpu",
                    r"test_softmax_axis_0_cpu", r"test_if_cpu", r"test_loop11_cpu"):
        suite_builder.include(pattern)
    suite = unittest.TestSuite()
    for case in suite_builder.test_cases.values():
        suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(case))
    result = unittest.TextTestRunner(verbosity=0).run(suite)
    ran = result.testsRun - len(result.skipped)
    assert ran >= 6, f"only {ran} cases ran"
    assert result.wasSuccessful(), [str(f[1])[-500:] for f in result.failures + result.errors]


@requires_gpu
def test_gpu_pixel_through_the_backend_interface():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [3])], [("y", F, [3])])
    x = np.array([-1, 0, 2], np.float32)
    assert backend.supports_device("GPU-PIXEL")
    (by_device,) = backend.run_model(model, [x], device="GPU-PIXEL")
    rep = backend.prepare(model, backend="gpu-pixel")
    (by_name,) = rep.run([x])
    assert rep.worker.backend.value == "gpu-pixel"
    np.testing.assert_array_equal(by_device, [0, 0, 2])
    np.testing.assert_array_equal(by_name, [0, 0, 2])
