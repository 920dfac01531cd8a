"""ws.profile on the cpu and gpu-compute backends: JSON keys, the time-sum rule, the pruned views, batch, errors,
exports."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from helpers import BACKENDS, requires_gpu

import wgsentis as ws
from wgsentis.errors import InputError

TOP_KEYS = {"model", "name", "backend", "batch_size", "threads", "device", "runs", "ms_per_batch", "ms_min",
            "ms_max", "items_per_second", "layers", "transfers", "op_types", "flops_profile", "ceilings", "timer"}
LAYER_KEYS = {"name", "op_type", "weight_names", "device", "fallback", "time_ms", "flops", "bytes", "params",
              "gflops_per_s", "gb_per_s", "bound", "percent"}


def _check(prof: ws.Profile, backend: str) -> dict:
    data = json.loads(json.dumps(prof.to_dict()))  # JSON-able
    assert TOP_KEYS <= set(data)
    assert data["backend"] == backend and data["ms_min"] <= data["ms_per_batch"] <= data["ms_max"]
    assert data["layers"] and all(LAYER_KEYS <= set(e) for e in data["layers"])
    assert all(e["bound"] in ("compute", "memory") and e["time_ms"] >= 0 for e in data["layers"])
    assert abs(sum(r["percent"] for r in data["op_types"]) - 100) < 0.5  # shares of the layer time
    rows = [*data["layers"], *data["transfers"], *data["host"]]
    assert abs(sum(r["time_ms"] for r in rows) - data["time_sum_ms"]) < 1e-3 * max(1.0, data["time_sum_ms"])
    fp = data["flops_profile"]
    assert fp["total_flops"] == sum(e["flops"] for e in fp["layers"]) > 0
    assert data["ceilings"]["peak_gflops_per_s"] > 0 and data["ceilings"]["peak_gb_per_s"] > 0
    if backend.startswith("gpu-"):
        _check_gpu_rows(data)
    return data


# The measured rows of a gpu-compute profile are parts of its instrumented runs: together they may not exceed
# those runs' mean wall by more than this (rows are interquartile means, the wall a plain mean; the runs
# interleave, so a machine that slows down 2-3x slows rows and wall alike). Seen on lavapipe: 0.4-0.8 with
# timestamps, 0.77-0.95 with host timers.
MEASURED_TO_WALL = 1.5


def _check_gpu_rows(data: dict) -> None:
    """What a gpu-compute profile's time sum rests on. ``RESIDUAL_ROW`` ('submit + readback wait') is the
    rest of ms_per_batch once the other rows are counted, so the sum reaches ms_per_batch by definition and
    a lower bound on the time-sum ratio cannot fail there: the rows measured on their own (layers,
    transfers, the other host rows) are bounded instead, and the residual must be that rest, never negative."""
    from wgsentis.profiler.collect import RESIDUAL_ROW

    (residual,) = [r["time_ms"] for r in data["host"] if r["name"] == RESIDUAL_ROW]
    layers = sum(e["time_ms"] for e in data["layers"])
    rows = [*data["layers"], *data["transfers"], *(r for r in data["host"] if r["name"] != RESIDUAL_ROW)]
    measured = sum(r["time_ms"] for r in rows)
    assert layers > 0, "no GPU time measured for any layer"
    assert measured <= MEASURED_TO_WALL * data["ms_per_batch_instrumented"], (
        f"measured rows {measured:.4f} ms, instrumented runs {data['ms_per_batch_instrumented']} ms")
    assert residual >= 0
    # The run's fixed costs, phase by phase, each measured on its own: together within a plain run.
    phases = data["run_phases_ms"]
    assert {"upload_ms", "encode_ms", "submit_ms", "map_request_ms", "wait_ms", "copy_out_ms"} <= set(phases)
    assert phases["encode_ms"] > 0 and phases["submit_ms"] > 0
    assert sum(v for k, v in phases.items() if k != "gpu_ms") <= MEASURED_TO_WALL * data["ms_max"], phases
    # rows are rounded to 5 decimals, ms_per_batch to 4
    assert abs(residual - max(0.0, data["ms_per_batch"] - measured)) <= 1e-4 + 5e-6 * len(rows), (
        residual, data["ms_per_batch"], measured)


def test_cpu_profile_sample(sample_path: str, tmp_path) -> None:
    prof = ws.profile(sample_path, backend="cpu", threads=2, runs=5, warmup=1)
    data = _check(prof, "cpu")
    assert all(e["device"] == "cpu" and not e["fallback"] for e in data["layers"])
    assert data["device"]["logical_cores"] >= 1 and "instruction_sets" in data["device"]
    # pruning sensitivity for weighted layers: three sparsities, output change grows with sparsity
    pruned = [e for e in data["layers"] if "pruning" in e]
    assert pruned and all(e["op_type"] in ("Conv", "FusedConv", "Gemm", "MatMul", "ConvTranspose") for e in pruned)
    for e in pruned:
        assert e["pruning"]["sparsities"] == [0.5, 0.7, 0.9] and len(e["pruning"]["estimated_saved_ms"]) == 3
    assert "top layers" in prof.table()
    trace = json.loads(prof.to_chrome_trace(tmp_path / "t.json").read_text())
    names = {ev["name"] for ev in trace["traceEvents"] if ev["ph"] == "X"}
    assert "stem_conv (Conv)" in names
    again = ws.Profile.from_json(prof.to_json(tmp_path / "p.json"))
    assert again.data == data
    assert "<svg" in prof.to_html(tmp_path / "p.html").read_text()
    # the pruned views at the default levels, on every layer and op type
    assert data["pruning_levels"] == [0.4, 0.6, 0.8, 0.9, 0.95]
    keys = ["0.4", "0.6", "0.8", "0.9", "0.95"]
    assert all(list(e["estimated_ms"]) == keys for e in [*data["layers"], *data["op_types"]])
    assert [r["level"] for r in data["pruned_estimates"]] == data["pruning_levels"]
    assert all(r["speedup"] >= 1.0 for r in data["pruned_estimates"])
    assert "speedup" in prof.table()


def test_cpu_time_sum_squeezenet() -> None:
    import zoo

    proto = zoo.load_proto("squeezenet")
    ratios = []
    # The machine is shared: up to three retries when a noisy neighbour skews the runs (a clean-clone CI run beside
    # other jobs read 0.40 and 0.43 on two tries in a row).
    for _ in range(4):
        prof = ws.profile(proto, backend="cpu", threads=2, runs=5, warmup=1,
                          inputs=zoo.input_feeds("squeezenet", proto), pruning_layers=0)
        data = _check(prof, "cpu")
        ratios.append(data["time_sum_ratio"])
        if 0.9 <= ratios[-1] <= 1.1:
            break
    assert 0.9 <= ratios[-1] <= 1.1, ratios


def test_pruned_estimate_rule_by_hand() -> None:
    """The pruned views' rule on a hand-made profile: a compute-bound layer with a prunable weight takes
    time * (1 - level); compute-bound without one, and memory-bound with one, keep their time; ms_per_batch
    falls by the share of the rows saved; level 0 is the baseline."""
    from wgsentis.profiler.profile import add_pruned_estimates
    from wgsentis.profiler.summary import op_type_summary

    layers = [{"name": "fc", "op_type": "Gemm", "bound": "compute", "prunable_weight": "w", "time_ms": 2.0},
              {"name": "mm", "op_type": "MatMul", "bound": "compute", "prunable_weight": None, "time_ms": 1.0},
              {"name": "conv", "op_type": "Conv", "bound": "memory", "prunable_weight": "k", "time_ms": 0.5},
              {"name": "fc2", "op_type": "Gemm", "bound": "memory", "prunable_weight": "w2", "time_ms": 0.5}]
    for e in layers:
        e.update(flops=1, params=1)
    data = {"layers": layers, "op_types": op_type_summary(layers, []), "ms_per_batch": 8.0, "time_sum_ms": 4.0}
    add_pruned_estimates(data, (0.0, 0.5, 0.9))
    assert data["pruning_levels"] == [0.0, 0.5, 0.9]
    assert layers[0]["estimated_ms"] == {"0": 2.0, "0.5": 1.0, "0.9": pytest.approx(0.2)}
    assert all(e["estimated_ms"] == {"0": e["time_ms"], "0.5": e["time_ms"], "0.9": e["time_ms"]} for e in layers[1:])
    gemm = next(r for r in data["op_types"] if r["op_type"] == "Gemm")
    assert gemm["estimated_ms"] == {"0": 2.5, "0.5": 1.5, "0.9": pytest.approx(0.7)}
    # 1.0 ms of 4.0 ms of rows saved at 0.5: a quarter off ms_per_batch; 1.8 ms at 0.9
    assert [r["ms_per_batch"] for r in data["pruned_estimates"]] == [8.0, 6.0, pytest.approx(4.4)]
    assert [r["speedup"] for r in data["pruned_estimates"]] == [1.0, pytest.approx(1.3333, abs=1e-4),
                                                                pytest.approx(1.8182, abs=1e-4)]
    untimed = add_pruned_estimates({"layers": [{**layers[0], "time_ms": None}], "op_types": [], "ms_per_batch": None})
    assert untimed["layers"][0]["estimated_ms"]["0.9"] is None
    assert untimed["pruned_estimates"][0]["ms_per_batch"] is None


def _matmul_relu_model():
    """x (1 x 256 x 1024) @ W (1024 x 1024), then Relu: a MatMul far above any CPU's ridge point (about 85
    FLOPs per byte; ~12 measured on the shared test machine) beside a memory-bound activation."""
    import onnx
    from onnx import TensorProto, helper

    w = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Relu", ["m"], ["y"], name="relu")],
        "mmr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256, 1024])], [onnx.numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_pruned_views_of_a_measured_profile(tmp_path) -> None:
    """Measured on the cpu: level 0 is the baseline (layers, op types, ms per batch); the compute-bound
    prunable MatMul's estimate falls with the level, the memory-bound Relu's stays; the speedup is >= 1 and
    grows with the level; the views survive a JSON round trip and show in the text summary."""
    prof = ws.profile(_matmul_relu_model(), backend="cpu", threads=2, runs=3, warmup=1, pruning_layers=0,
                      pruning_levels=(0, 0.4, 0.9))
    data = prof.to_dict()
    keys = ["0", "0.4", "0.9"]
    for e in [*data["layers"], *data["op_types"]]:
        assert list(e["estimated_ms"]) == keys and e["estimated_ms"]["0"] == e["time_ms"]
    assert data["pruned_estimates"][0]["ms_per_batch"] == data["ms_per_batch"]
    assert data["pruned_estimates"][0]["speedup"] == 1.0
    layers = {e["name"]: e for e in data["layers"]}
    mm = layers["mm"]
    assert mm["prunable_weight"] == "w" and mm["bound"] == "compute", (mm["arithmetic_intensity"], data["ceilings"])
    for e in data["layers"]:
        est = [e["estimated_ms"][k] for k in keys]
        if e["bound"] == "compute" and e["prunable_weight"] and e["time_ms"] > 0:
            assert est[0] > est[1] > est[2] and est[2] == pytest.approx(0.1 * e["time_ms"], abs=1e-5)
        else:
            assert est == [e["time_ms"]] * 3, e
    speedups = [r["speedup"] for r in data["pruned_estimates"]]
    assert speedups[0] == 1.0 < speedups[1] < speedups[2]
    again = ws.Profile.from_json(prof.to_json(tmp_path / "p.json"))
    assert again.data == json.loads(json.dumps(data))
    assert again["layers"][0]["estimated_ms"]["0.9"] == mm["estimated_ms"]["0.9"]
    table = prof.table()
    assert "speedup" in table and f"{speedups[2]:.2f}x" in table


@pytest.mark.parametrize("levels", [(0.4, 1.0), (-0.1,), 0.5, ("a",), (True,)])
def test_pruning_levels_errors(sample_path: str, levels) -> None:
    with pytest.raises(InputError, match="pruning_levels"):
        ws.profile(sample_path, backend="cpu", timing=False, pruning_levels=levels)


def test_no_timing_and_batch(sample_path: str) -> None:
    prof = ws.profile(sample_path, backend="cpu", batch_size=3, timing=False)
    assert prof["ms_per_batch"] is None and prof["inputs"]["image"][0] == 3
    one = ws.profile(sample_path, backend="cpu", batch_size=1, timing=False)
    assert prof["flops_profile"]["total_flops"] == 3 * one["flops_profile"]["total_flops"]
    assert prof["flops_profile"]["total_params"] == one["flops_profile"]["total_params"] > 0
    # the model as imported: counted for the profile's batch too (BN and activations still their own layers)
    assert prof["flops_profile"]["model_total_flops"] == 3 * one["flops_profile"]["model_total_flops"]
    assert one["flops_profile"]["model_total_flops"] >= one["flops_profile"]["total_flops"]
    assert prof["pruned_estimates"] and all(r["ms_per_batch"] is None for r in prof["pruned_estimates"])


@pytest.mark.parametrize(("kwargs", "arg"), [({"batch_size": 0}, "batch_size"), ({"runs": 0}, "runs"),
                                             ({"threads": 0}, "threads"), ({"backend": "tpu"}, "backend"),
                                             ({"warmup": -1}, "warmup"), ({"spin_wait": "no"}, "spin_wait")])
def test_argument_errors(sample_path: str, kwargs: dict, arg: str) -> None:
    with pytest.raises(InputError, match=arg):
        ws.profile(sample_path, **{"backend": "cpu", **kwargs})


def test_fixed_batch_error(tmp_path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(InputError, match="batch_size=4"):
        ws.profile(model, backend="cpu", batch_size=4)
    assert ws.profile(onnx.ModelProto.FromString(model.SerializeToString()), backend="cpu", batch_size=2,
                      runs=1, warmup=0)["batch_size"] == 2


@requires_gpu
def test_gpu_pixel_profile_sample(sample_path: str) -> None:
    """gpu-pixel: per-layer GPU time from timestamps on each render pass, the transfers, and ceilings measured
    with the pixel kernels themselves (cached per backend)."""
    prof = ws.profile(sample_path, backend="gpu-pixel", threads=2, runs=3, warmup=1)
    data = _check(prof, "gpu-pixel")
    assert data["timer"] in ("gpu-timestamps", "host (one fenced submission per layer)")
    assert all(e["device"] == "gpu" and e["time_ms"] > 0 for e in data["layers"] if e["op_type"] != "Flatten")
    assert {t["kind"] for t in data["transfers"]} == {"upload", "download"}
    from wgsentis.profiler.ceilings import cache_key

    assert data["ceilings"]["peak_gflops_per_s"] > 0  # kept apart from gpu-compute's, measured with pixel kernels
    assert cache_key("gpu-pixel", data["device"], 2) != cache_key("gpu-compute", data["device"], 2)


@requires_gpu
def test_gpu_profile_sample(sample_path: str) -> None:
    prof = ws.profile(sample_path, backend="gpu-compute", threads=2, runs=3, warmup=1)
    data = _check(prof, "gpu-compute")
    assert data["timer"] in ("gpu-timestamps", "host (one fenced submission per layer)")
    assert data["device"]["name"] and "limits" in data["device"] and "features" in data["device"]
    kinds = {t["kind"] for t in data["transfers"]}
    assert kinds == {"upload", "download"}
    assert {r["name"] for r in data["host"]} == {"host: encode commands", "host: submit + readback wait"}


@requires_gpu
def test_gpu_host_timers(sample_path: str) -> None:
    prof = ws.profile(sample_path, backend="gpu-compute", runs=2, warmup=0, use_timestamps=False, pruning_layers=0,
                      measure_ceilings=False)
    assert prof["timer"].startswith("host") and all(e["time_ms"] > 0 for e in prof["layers"])


def _measured_share(data: dict) -> float:
    """The share of ms_per_batch that measured rows explain: on gpu-compute the 'submit + readback wait'
    row is the rest of the median plain run by definition, so the time sum cannot fall short there;
    what can is this share (layers timed too short, or host work no row accounts for)."""
    rest = sum(r["time_ms"] for r in data["host"] if r["name"] == "host: submit + readback wait")
    return (data["time_sum_ms"] - rest) / data["ms_per_batch"]


def _time_sum_ratio(source, backend: str, feeds=None, runs: int = 7, min_share: float = 0.0, attempts: int = 2,
                    **kwargs) -> tuple[dict, list[float]]:
    """Profile ``source`` until the time-sum ratio is within 10% and measured rows explain at least
    ``min_share`` of the run (at most ``attempts`` times: the machine is shared, and a retry absorbs a
    noisy neighbour); returns the last profile's data and every ratio seen (below 0.9 where the share
    fell short)."""
    ratios = []
    for _ in range(attempts):
        prof = ws.profile(source, backend=backend, threads=2, runs=runs, warmup=1, inputs=feeds, **kwargs)
        data = _check(prof, backend)
        ratio = data["time_sum_ratio"]
        ratios.append(ratio if _measured_share(data) >= min_share else min(ratio, round(_measured_share(data), 4)))
        if 0.9 <= ratios[-1] <= 1.1:
            break
    return data, ratios


@requires_gpu
def test_gpu_time_sum_inception() -> None:
    """The time-sum rule on a model whose layers dominate its run (~250 ms, 84 layers)."""
    import zoo

    proto = zoo.load_proto("inception_v1")
    data, ratios = _time_sum_ratio(proto, "gpu-compute", zoo.input_feeds("inception_v1", proto), pruning_layers=1,
                                   min_share=0.8)
    assert 0.9 <= ratios[-1] <= 1.1, ratios
    assert sum(1 for e in data["layers"] if "pruning" in e) == 1


@requires_gpu
@pytest.mark.parametrize("name", ["sample", "ppocr_cls"])
def test_gpu_time_sum_small_models(name: str, sample_path: str) -> None:
    """The rule on models where the timestamps' own cost is a large share of the run: the ~1 ms built-in
    sample and PP-OCR cls (~15 ms, 154 layers). On lavapipe one timestamp write costs ~60 us of GPU
    time; the profiler measures it on the model itself (a run stamped only at its ends beside each
    per-layer run) and takes it out of the layer rows."""
    import zoo

    if name == "sample":
        source, feeds = sample_path, None
    else:
        source = zoo.load_proto(name, dense=True)
        feeds = zoo.input_feeds(name, source)
    # 20 runs: these models are fast, and a median of more runs resists a noisy neighbour better.
    data, ratios = _time_sum_ratio(source, "gpu-compute", feeds, runs=20, pruning_layers=0)
    # The residual row fills the sum up to ms_per_batch (a ratio under 1 cannot happen here): what is checked
    # below is the upper side, and _check's _check_gpu_rows bounds the measured rows themselves.
    assert ratios[-1] <= 1.1, ratios
    if data["timer"] == "gpu-timestamps":
        # What was taken out of the layer rows: one measured stamp cost per layer interval, and beyond it at most
        # what the runs measured over their ends-only twins (a loaded machine's surplus, taken out in proportion).
        assert data["timestamp_cost_us"] >= 0 and data["timestamp_excess_ms"] >= 0
        # The overhead is reported in ms to 4 decimals (off by up to 5e-5 ms), the cost in us to 3 (off by up
        # to 5e-4 us, once per layer): at the bound they round apart by up to both (CI saw 2.5038 > 2.503794).
        bound = 1e-3 * (data["timestamp_cost_us"] + 5e-4) * len(data["layers"]) + 5e-5
        assert 0 <= data["timestamp_overhead_ms"] <= bound + data["timestamp_excess_ms"] + 5e-5


def test_stamp_cost_is_bounded_by_the_shortest_layer_interval() -> None:
    """The per-stamp cost taken out of GPU layer rows: the median of the per-run estimates where they
    agree, never more than 0.9 of the shortest layer interval of any run (each interval holds one stamp
    and some work, so no layer reads 0 ms), never negative. AlexNet on lavapipe once read a 588 us median
    (13 stamps in a 67 ms run, so one run's noise reads as hundreds of microseconds per stamp)
    while its Softmax took ~100 us, stamp included."""
    from wgsentis.profiler.collect import _stamp_cost

    tight = [52e-6, 55e-6, 61e-6, 57e-6, 63e-6]  # PP-OCR cls on lavapipe
    assert _stamp_cost(tight, [90e-6] * 5) == pytest.approx(57e-6)
    scattered = [588e-6, 253e-6, 700e-6, -39e-6, 731e-6]
    assert _stamp_cost(scattered, [125e-6, 122e-6, 85e-6, 300e-6, 99e-6]) == pytest.approx(0.9 * 85e-6)
    assert _stamp_cost([-300e-6, -20e-6, 10e-6], [1e-3] * 3) == 0.0
    assert _stamp_cost([40e-6, 60e-6], []) == pytest.approx(50e-6)
    assert _stamp_cost([], [1e-4]) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_reference_model(backend: str) -> None:
    import zoo

    outside = {}
    for name in zoo.ALL_MODELS:
        proto = zoo.load_proto(name)
        # Measured rows explain at least 80% of a run (the rest is submission and the readback wait, which
        # the 'submit + readback wait' row fills in on gpu-compute; 0.85-1.06 seen on lavapipe), but on
        # PP-OCR cls: ~20-30 ms over 154 small layers, a quarter of it in submission and readback.
        # Five runs on the cpu, seven on gpu-compute (rows are then interquartile means) and three attempts:
        # twelve models on a shared machine. A CI rehearsal saw ShuffleNet's three-run profile read 0.76 and
        # 1.29, and a CI run saw AlexNet's five-run gpu profile read 1.119, 0.797 and 1.104: on lavapipe the
        # "GPU" shares the two cores with everything else, so its runs scatter more.
        data, ratios = _time_sum_ratio(proto, backend, zoo.input_feeds(name, proto),
                                       runs=5 if backend == "cpu" else 7, pruning_layers=1,
                                       name=name, min_share=0.0 if name in ("ppocr_cls",) else 0.8, attempts=3)
        print(name, backend, data["ms_per_batch"], ratios, round(_measured_share(data), 4), file=sys.stderr)
        assert np.isfinite(data["ms_per_batch"])
        # PP-OCR cls's rows are mostly per-layer timestamp costs (154 layers of ~0.15 ms): a clean-clone CI run
        # read 1.17, 1.21 and 1.18 on gpu-compute where a rerun read 1.00. Its band is wider.
        low, high = (0.8, 1.3) if name == "ppocr_cls" else (0.9, 1.1)
        if not low <= ratios[-1] <= high:
            outside[name] = ratios
    assert not outside, f"time-sum ratio outside its band (0.9..1.1; PP-OCR cls 0.8..1.3) on {backend}: {outside}"


def test_cpu_ceilings_are_cached_per_threading_mode() -> None:
    """Spin-wait and blocking runs reach different peaks, so neither may read the other's ceilings; a GPU's
    ceilings do not depend on the host's threading."""
    from wgsentis.profiler.ceilings import cache_key

    cpu = {"cpu": "some cpu"}
    assert cache_key("cpu", cpu, 2, spin_wait=True) != cache_key("cpu", cpu, 2, spin_wait=False)
    assert cache_key("cpu", cpu, 2) == cache_key("cpu", cpu, 2, spin_wait=False)  # the keys cached before
    gpu = {"name": "gpu", "driver": "d", "backend": "vulkan"}
    assert cache_key("gpu-compute", gpu, 2, spin_wait=True) == cache_key("gpu-compute", gpu, 2, spin_wait=False)
