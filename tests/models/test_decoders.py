"""Transformer decoders exported by torch.onnx (tools/decoders.py: a GPT-2-style decoder with past_key_values, a
Whisper-style encoder-decoder) generate the same tokens as ONNX Runtime on every backend, 48 greedy steps, each a
new cache length; the last position's logits stay close at every step. With ``on_device=True`` the cache stays on
the GPU between steps and the same tokens come out."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import requires_gpu

import wgsentis as ws

decoders = pytest.importorskip("decoders")
pytest.importorskip("torch", reason="the decoders extra (torch, transformers) exports the models")
pytest.importorskip("transformers", reason="the decoders extra (torch, transformers) exports the models")

STEPS = 48
GPT2 = decoders.DecoderConfig(vocab=1000)  # GPT-2's width and depth in the issue; a small vocabulary for speed
WHISPER = decoders.DecoderConfig(layers=2, width=128, heads=4, vocab=1000)
BACKENDS = ["cpu", pytest.param("gpu-compute", marks=requires_gpu), pytest.param("gpu-pixel", marks=requires_gpu)]
LOGIT_TOLERANCE = 2e-3  # absolute, on logits of magnitude ~10; float32 sums in another order


def _ort_run(path):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(None, feeds), strict=True))


@pytest.fixture(scope="module")
def gpt2():
    path = decoders.export_gpt2(config=GPT2)
    reference = decoders.generate(_ort_run(path), layers=GPT2.layers, heads=GPT2.heads, head_size=GPT2.head_size,
                                  steps=STEPS, prompt=[1, 2, 3])
    assert len(set(reference.tokens)) > STEPS // 4, "the random decoder repeats itself: the check would be weak"
    return path, reference


@pytest.fixture(scope="module")
def whisper():
    encoder, decoder = decoders.export_whisper(config=WHISPER)
    features = np.random.default_rng(0).standard_normal((1, decoders.WHISPER_MELS, decoders.WHISPER_FRAMES),
                                                        dtype=np.float32)
    states = _ort_run(encoder)({"input_features": features})["encoder_hidden_states"]
    reference = decoders.generate(_ort_run(decoder), layers=WHISPER.layers, heads=WHISPER.heads,
                                  head_size=WHISPER.head_size, steps=STEPS, prompt=[1], ids_name="decoder_input_ids",
                                  extra={"encoder_hidden_states": states}, mask=False)
    return encoder, decoder, features, states, reference


def _same_generation(ours, reference, what):
    worst = max(float(np.abs(a - b).max()) for a, b in zip(ours.logits, reference.logits, strict=True))
    assert ours.tokens == reference.tokens, f"{what}: tokens differ from ONNX Runtime's"
    assert worst <= LOGIT_TOLERANCE, f"{what}: logits {worst:.2e} from ONNX Runtime's"


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpt2_generates_onnxruntime_tokens(gpt2, backend):
    """Every backend's tokens are ORT's; each step past the first keeps most of the exporter's shape arithmetic
    from the step before (only what reads the past length is computed again), on the GPU backends while each new
    length's plan is recorded as on the cpu backend in every run."""
    path, reference = gpt2
    kept, stamped = [], []
    # (Each step's own trace, not one prepared ahead while the step before ran: test_lookahead.py and the device
    # cache test below take that path.)
    with ws.Worker(ws.load_model(str(path)), backend, prepare_ahead=False) as worker:
        def run(feeds):
            outputs = worker.run(feeds)
            stats = worker.stats()
            kept.append((stats["shape_layers"], stats["shape_layers_kept"]))
            stamped.append((stats.get("gpu_layers_reused", 0) + stats.get("gpu_layers_kept", 0),
                            stats.get("gpu_layers_built", 0), stats.get("plans_resized", 0)))
            return outputs

        ours = decoders.generate(run, layers=GPT2.layers, heads=GPT2.heads, head_size=GPT2.head_size,
                                 steps=STEPS, prompt=[1, 2, 3])
    _same_generation(ours, reference, f"gpt2 on {backend}")
    count = kept[0][0]
    assert count > 300 and kept[0][1] == 0, kept[0]  # the first run computes them all
    # From the third step (the second has a new input_ids length too) at least 80% are kept.
    assert all(n == count and k >= 0.8 * count for n, k in kept[2:]), kept
    if backend != "cpu":
        # From the third step most GPU layers (all but those over the cache: attention) are kept as they were or
        # stamped from a template, not built again; the tokens above are ORT's. The second step (one token after the
        # prompt's three) changes nearly every layer against the prompt's trace, so the third is traced in full and
        # every later length is planned from it (backends/gpu/resize.py; 4x256: 116 of 172 GPU layers kept).
        share = 2.0 if backend == "gpu-compute" else 1.8
        assert all(reused >= share * built > 0 for reused, built, _ in stamped[2:]), stamped
        resized = [r for *_, r in stamped]
        assert all(later == earlier + 1 for earlier, later in itertools.pairwise(resized[2:])), stamped


@pytest.mark.parametrize("backend", BACKENDS)
def test_whisper_encoder_decoder_generates_onnxruntime_tokens(whisper, backend):
    encoder, decoder, features, states, reference = whisper
    with ws.Worker(ws.load_model(str(encoder)), backend) as enc, ws.Worker(ws.load_model(str(decoder)), backend) as dec:
        ours_states = enc.run({"input_features": features})["encoder_hidden_states"]
        assert np.abs(ours_states - states).max() <= 1e-4
        ours = decoders.generate(dec.run, layers=WHISPER.layers, heads=WHISPER.heads, head_size=WHISPER.head_size,
                                 steps=STEPS, prompt=[1], ids_name="decoder_input_ids",
                                 extra={"encoder_hidden_states": ours_states}, mask=False)
    _same_generation(ours, reference, f"whisper on {backend}")


@pytest.mark.parametrize("backend", [p for p in BACKENDS if p != "cpu"])
def test_gpt2_cache_stays_on_the_device(gpt2, backend):
    """With on_device=True the cache is fed back as device tensors: per step only the token and the mask go up,
    nothing comes down but the logits the loop reads (on demand, outside the run's transfers)."""
    path, reference = gpt2
    crossed = []
    with ws.Worker(ws.load_model(str(path)), backend) as worker:
        def run(feeds):
            outputs = worker.run(feeds, on_device=True)
            stats = worker.stats()
            # (A new size's plan uploads once what the host computed for it: the position embedding row, the
            # positions and the mask a GPU layer reads.)
            planned = sum(t["bytes"] for t in stats["transfers"] if t["layer"] == "a host value of the plan")
            crossed.append((stats["upload_bytes"] - planned, stats["download_bytes"], planned))
            assert all(outputs[n].on_device for n in decoders.present_names(GPT2.layers))
            return outputs

        ours = decoders.generate(run, layers=GPT2.layers, heads=GPT2.heads, head_size=GPT2.head_size,
                                 steps=STEPS, prompt=[1, 2, 3])
    _same_generation(ours, reference, f"gpt2 on {backend}, cache on the device")
    logits_bytes = 4 * GPT2.vocab
    for step, (up, down, planned) in enumerate(crossed[1:], start=1):
        assert up <= 8 * (1 + 3 + step) + 64, f"step {step}: {up} bytes uploaded"  # the token and the mask
        assert planned <= 4 * GPT2.width + 16 * (1 + 3 + step) + 64, f"step {step}: {planned} bytes of host values"
        assert down == 0, f"step {step}: {down} bytes downloaded by the run"
    assert logits_bytes + max(up + planned for up, _, planned in crossed[1:]) <= 16 * 1024
