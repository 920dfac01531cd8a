"""``tools/bench.py --sizes`` (tools/bench_sizes.py), shortened: PP-OCRv4 rec at 2 new widths and the BERT-style
encoder at 2 new lengths on gpu-compute print their per-size lines and their tables with every number measured, and
their outputs match ONNX Runtime."""

from __future__ import annotations

import re

import numpy as np

import bench
import bench_sizes
import pytest
from helpers import requires_gpu
from test_catalog import fetched


def test_rec_widths_are_distinct_multiples_of_eight_over_the_range():
    widths = bench_sizes.rec_widths(20)
    assert len(widths) == 20 and widths[0] == 160 and widths[-1] == 800
    assert all(w % 8 == 0 for w in widths) and widths == sorted(set(widths))
    assert any(w % 32 for w in widths)  # not only the multiples of 32 that tile evenly
    with pytest.raises(ValueError):
        bench_sizes.rec_widths(200)


@requires_gpu
def test_two_new_widths_of_the_recognizer_on_gpu_compute(capsys):
    fetched("ppocrv4_rec")
    status = bench.main(["--sizes", "--sizes-models", "ppocrv4_rec", "--backends", "gpu-compute",
                         "--sizes-widths", "2", "--sizes-runs", "2"])
    out = capsys.readouterr().out
    assert status == 0, out  # 0: every output matched ORT
    per_size = re.findall(r"48x(\d+) new +([\d.]+) ms +replay +([\d.]+) ms +x +([\d.]+) +(\d+) pipelines +"
                          r"max abs err ([\d.e+-]+)", out)
    assert [int(w) for w, *_ in per_size] == [160, 800], out
    for _width, new_ms, replay_ms, ratio, _pipelines, abs_error in per_size:
        assert float(new_ms) > 0 and float(replay_ms) > 0 and float(ratio) > 0
        assert float(abs_error) < 1e-3
    (row,) = [line for line in out.splitlines() if line.startswith("ppocrv4_rec ")]
    fields = row.split()
    assert fields[:5] == ["ppocrv4_rec", "gpu-compute", "2:", "48x160..48x800", fields[4]], row
    cold_ms, new_ms, replay_ms, worst, median = (float(f) for f in fields[4:9])
    assert min(cold_ms, new_ms, replay_ms) > 0 and worst >= median > 0
    assert fields[-1] == "same", row
    assert re.search(r"a new size costs [\d.]+x a replay", out), out


def test_encoder_lengths_are_distinct_over_the_range_and_mostly_not_multiples_of_four():
    lengths = bench_sizes.encoder_lengths(20)
    assert len(lengths) == 20 and lengths[0] == 9 and lengths[-1] == 128 and lengths == sorted(set(lengths))
    assert sum(n % 4 != 0 for n in lengths) > 10
    feeds = bench_sizes._feeds("input_ids", (1, 10), tokens=True)
    assert feeds["attention_mask"].tolist() == [[1] * 8 + [0] * 2]  # the last fifth padding
    assert feeds["input_ids"].dtype == np.int64 and feeds["input_ids"].min() >= 3
    with pytest.raises(ValueError):
        bench_sizes.encoder_lengths(200)


@requires_gpu
def test_two_new_lengths_of_the_bert_encoder_on_gpu_compute(capsys):
    pytest.importorskip("torch", reason="the decoders extra (torch, transformers) exports the encoder")
    pytest.importorskip("transformers", reason="the decoders extra (torch, transformers) exports the encoder")
    status = bench.main(["--sizes", "--sizes-models", "bert_encoder", "--backends", "gpu-compute",
                         "--sizes-widths", "2", "--sizes-runs", "2"])
    out = capsys.readouterr().out
    assert status == 0, out  # 0: every output matched ORT, the padded positions included
    per_size = re.findall(r"1x(\d+) new +([\d.]+) ms +replay +([\d.]+) ms", out)
    assert [int(n) for n, *_ in per_size] == [9, 128], out
    (row,) = [line for line in out.splitlines() if line.startswith("bert_encoder ")]
    assert row.split()[:4] == ["bert_encoder", "gpu-compute", "2:", "1x9..1x128"] and row.split()[-1] == "same", row
