"""Every reference model of shared/MODELS.md runs on the CPU backend and matches ONNX Runtime:
relative L2 error per output at most 1e-3. The zoo "light" models run as shipped (also against
their shipped output) and densified (seeded random weights in place of the splat weights)."""

from __future__ import annotations

import numpy as np
import pytest
import zoo
from helpers import requires_gpu

import wgsentis as ws

TOLERANCE = 1e-3
CASES = [(name, False) for name in zoo.ALL_MODELS] + [(name, True) for name in zoo.LIGHT_MODELS]


def check_against_onnxruntime(name: str, dense: bool, backend: str, batch: int = 1, precision: str = "float32",
                              tolerance: float = TOLERANCE) -> dict[str, np.ndarray]:
    """Run ``name`` on ``backend`` and compare every output with ONNX Runtime (CPU): relative L2 <= 1e-3.

    Two outputs need care, both made by a final activation, whose logits are compared too:
    - Sigmoid: ORT's logistic is a fast rational approximation, 0.2% off in the far tail (x = -10.8
      gives 2.0951e-5 for the exact 2.0904e-5), and PP-OCR det's output on random input lies entirely
      there. The output is compared with the exact float64 sigmoid of ORT's logits.
    - Softmax of logits so large that one float32 ulp moves a probability by more than the tolerance
      (SqueezeNet as shipped: identical splat weights give 1000 logits of 1.05e10 whose ulp is 1024, and
      OpenBLAS rounds equal rows differently): the logits must match ORT, and the output must be the exact
      softmax of our own logits.
    """
    proto = zoo.load_proto(name, dense=dense)
    feeds = zoo.input_feeds(name, proto, batch=batch)
    finals = zoo.final_activation_logits(proto)
    reference = zoo.ort_outputs(zoo.with_outputs(proto, [v[1] for v in finals.values()]), feeds)
    model = ws.load_model(proto, name=name)
    opset = model.opsets.get("", 1)
    for _op, logits, _attrs in finals.values():
        model.add_output(logits)
    with ws.Worker(model, backend, threads=2, precision=precision) as worker:
        outputs = worker.run(feeds)
        assert worker.stats()["fallback_layers"] == [], worker.stats()["fallback_layers"]
    for out_name, ref in reference.items():
        expected, ours = ref, outputs[out_name]
        if out_name in finals:
            op, logits, attrs = finals[out_name]
            ill_conditioned = op == "Softmax" and np.spacing(np.float32(np.abs(reference[logits]).max())) > TOLERANCE
            if op == "Sigmoid":
                expected = zoo.exact_activation(op, reference[logits], attrs, opset)
            elif ill_conditioned:
                expected = zoo.exact_activation(op, outputs[logits], attrs, opset)
        err = zoo.rel_l2(ours, expected)
        assert err <= tolerance, f"{name} output {out_name}: relative L2 error {err:.2e} on {backend} ({precision})"
    return outputs


@pytest.mark.parametrize("name,dense", CASES, ids=[f"{n}-{'dense' if d else 'shipped'}" for n, d in CASES])
def test_model_matches_onnxruntime_on_cpu(name, dense):
    outputs = check_against_onnxruntime(name, dense, "cpu")
    expected = None if dense else zoo.shipped_expected(name)
    if expected is not None and name != "squeezenet":  # SqueezeNet's shipped output is ill-conditioned (above)
        out = outputs[zoo.load_proto(name).graph.output[0].name]
        assert zoo.rel_l2(out, expected) <= TOLERANCE


def test_batch_of_two_matches_onnxruntime():
    outputs = check_against_onnxruntime("orientation", False, "cpu", batch=2)
    out = outputs[zoo.load_proto("orientation").graph.output[0].name]
    assert out.shape[0] == 2
    assert not np.allclose(out[0], out[1])  # two different images, two answers


# Every reference model on gpu-compute (lavapipe in CI; about 45 s for all twelve). Light models run
# densified: splat weights would hide indexing bugs.
GPU_CASES = [pytest.param(n, id=n) for n in zoo.ALL_MODELS]


@requires_gpu
@pytest.mark.parametrize("name", GPU_CASES)
def test_model_matches_onnxruntime_on_gpu_compute(name):
    check_against_onnxruntime(name, name in zoo.LIGHT_MODELS, "gpu-compute")


@requires_gpu
@pytest.mark.parametrize("name", GPU_CASES)
def test_model_matches_onnxruntime_on_gpu_pixel(name):
    check_against_onnxruntime(name, name in zoo.LIGHT_MODELS, "gpu-pixel")


# precision="float16" rounds every Conv/MatMul/Gemm weight to half precision (relative error 2^-11
# each), which compounds over a deep network to ~1e-3..1e-2 relative at the outputs.
FLOAT16_TOLERANCE = 2e-2


@requires_gpu
@pytest.mark.parametrize("name", ["inception_v1", "ppocr_cls", "shufflenet"])
def test_model_float16_weights_on_gpu_compute(name):
    from wgsentis.backends.gpu.device import get_context

    if not get_context().has_f16:  # an adapter, but without the feature: not a missing adapter
        pytest.skip("this wgpu adapter has no shader-f16")
    check_against_onnxruntime(name, name in zoo.LIGHT_MODELS, "gpu-compute", precision="float16",
                              tolerance=FLOAT16_TOLERANCE)
