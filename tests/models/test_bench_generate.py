"""``tools/bench.py --generate`` (tools/bench_generate.py), shortened: a few greedy tokens of the small GPT-2-style
decoder on gpu-compute give ORT's tokens in every mode, and with the token picked on the device only a few bytes
cross per token (the 16 KiB bound of issue 31 holds whatever the vocabulary)."""

from __future__ import annotations

import bench_generate
import decoders
import pytest
from helpers import requires_gpu

pytest.importorskip("torch", reason="the decoders extra (torch, transformers) exports the models")
pytest.importorskip("transformers", reason="the decoders extra (torch, transformers) exports the models")


@requires_gpu
def test_generate_bench_modes_give_onnxruntime_tokens_and_the_argmax_mode_reads_only_the_token():
    rows = bench_generate.bench(["gpu-compute"], steps=4, rounds=1, config=decoders.DecoderConfig(vocab=1000),
                                threads=1)
    (row,) = rows
    assert row["same_tokens"]
    assert all(row[k] > 0 for k in ("ort_ms", "host_ms", "device_ms", "argmax_ms", "replay_ms"))
    assert row["device_bytes"] >= 4 * 1000  # the logits read
    assert row["argmax_bytes"] <= 64  # the token, the mask and input id: no logits, no cache
    # The cache both ways, against the logits and a new size's host values (its positions and mask, once a plan)
    assert row["host_bytes"] > 8 * row["device_bytes"]
    assert row["new_size_plans"] >= 3  # device mode's steps are sizes its worker had not seen
    # From the third step each is planned from the base trace (the second step's full trace, after a prompt's)
    assert 1 <= row["resized_plans"] <= row["new_size_plans"]
