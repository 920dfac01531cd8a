"""Batch scoring (issue 32): ``wgsentis.batch.Predictor`` on dicts of columns (whole batches, fixed-batch models
fed in padded chunks, ragged object columns row by row, kept columns, typed errors), ``wgsentis.adapters()`` and
``Worker(adapter=)``, and the Predictor on Ray Data: a local Ray instance, 2 CPUs, 2 actors of the cpu backend
with 1 thread each, scores 2000 inputs with the same outputs as one process."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from helpers import make_model, requires_gpu
from onnx import TensorProto, helper

import wgsentis as ws
from wgsentis.batch import Predictor, map_batches
from wgsentis.errors import DeviceError, InputError

SAMPLE = "wgsentis/data/sample.onnx"
RNG = np.random.default_rng(32)


def _images(n: int) -> np.ndarray:
    return RNG.random((n, 3, 32, 32), dtype=np.float32)


def _one_process(batch: np.ndarray) -> dict[str, np.ndarray]:
    with ws.Worker(ws.load_model(SAMPLE), "cpu", threads=1) as worker:
        return worker.run({"image": batch})


def _fixed_batch_model() -> onnx.ModelProto:
    # (2, 4) @ (4, 3): an export whose batch dim is fixed at 2
    w = RNG.standard_normal((4, 3)).astype(np.float32)
    return make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", TensorProto.FLOAT, [2, 4])],
                      [("y", TensorProto.FLOAT, [2, 3])], {"w": w})


def _pooling_model() -> onnx.ModelProto:
    # (N, 3, H, W) -> (N, 3): any image size
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"]), helper.make_node("Flatten", ["p"], ["y"])]
    return make_model(nodes, [("x", TensorProto.FLOAT, ["N", 3, "H", "W"])], [("y", TensorProto.FLOAT, ["N", 3])])


def test_a_batch_scores_as_one_run_with_kept_columns_and_renamed_inputs():
    images = _images(10)
    ids = np.arange(10) + 100
    predictor = Predictor(SAMPLE, inputs={"image": "pixels"}, keep_columns=["id"])
    got = predictor({"pixels": images, "id": ids, "other": np.zeros(10)})
    assert sorted(got) == ["id", "probabilities"]
    np.testing.assert_array_equal(got["id"], ids)
    np.testing.assert_allclose(got["probabilities"], _one_process(images)["probabilities"], rtol=1e-6, atol=1e-7)
    assert predictor.rows_scored == 10 and predictor.batches_scored == 1


def test_intermediate_outputs_become_columns():
    predictor = Predictor(SAMPLE, outputs=["pw", "probabilities"])
    got = predictor({"image": _images(3)})
    assert list(got) == ["pw", "probabilities"] and got["pw"].shape == (3, 16, 8, 8)


def test_a_fixed_batch_model_is_fed_in_padded_chunks():
    proto = _fixed_batch_model()
    x = RNG.standard_normal((7, 4)).astype(np.float32)
    got = Predictor(proto)({"x": x})["y"]
    w = onnx.numpy_helper.to_array(proto.graph.initializer[0])
    assert got.shape == (7, 3)
    np.testing.assert_allclose(got, x @ w, rtol=1e-5, atol=1e-6)


def test_a_ragged_object_column_is_fed_row_by_row():
    rows = [RNG.random((3, h, w), dtype=np.float32) for h, w in ((4, 5), (7, 3), (2, 9))]
    column = np.empty(3, dtype=object)
    column[:] = rows
    got = Predictor(_pooling_model())({"x": column})["y"]
    np.testing.assert_allclose(got, np.stack([r.mean(axis=(1, 2)) for r in rows]), rtol=1e-5)


def test_a_classifier_with_zipmap_scores_labels_and_probability_dicts_as_onnxruntime_does():
    sklearn = pytest.importorskip("sklearn.linear_model")
    skl2onnx = pytest.importorskip("skl2onnx")
    from skl2onnx.common.data_types import FloatTensorType

    x = RNG.standard_normal((60, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64) + (x[:, 2] > 1)
    proto = skl2onnx.convert_sklearn(sklearn.LogisticRegression().fit(x, y),
                                     initial_types=[("features", FloatTensorType([None, 4]))], target_opset=17)
    got = Predictor(proto, inputs={"features": "x"})({"x": x})
    import onnxruntime

    labels, probabilities = onnxruntime.InferenceSession(proto.SerializeToString()).run(None, {"features": x})
    np.testing.assert_array_equal(got["output_label"], labels)
    assert got["output_probability"].dtype == object and len(got["output_probability"]) == 60
    for ours, theirs in zip(got["output_probability"], probabilities, strict=True):
        assert ours.keys() == theirs.keys()
        np.testing.assert_allclose([ours[k] for k in ours], [theirs[k] for k in ours], rtol=1e-5, atol=1e-6)


def test_pandas_batches_and_object_columns_of_one_shape_score_whole():
    pandas = pytest.importorskip("pandas")
    images = _images(5)
    column = np.empty(5, dtype=object)
    for i in range(5):
        column[i] = images[i]
    predictor = Predictor(SAMPLE, keep_columns=["id"])
    want = _one_process(images)["probabilities"]
    for batch in ({"image": column, "id": np.arange(5)}, pandas.DataFrame({"image": list(images), "id": range(5)})):
        got = predictor(batch)
        np.testing.assert_allclose(got["probabilities"], want, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(got["id"], np.arange(5))


def test_bad_batches_raise_typed_errors_naming_the_column_or_output():
    predictor = Predictor(SAMPLE, keep_columns=["id"])
    with pytest.raises(InputError, match=r"input 'image' reads batch column 'image'.*lacks"):
        predictor({"pixels": _images(2), "id": np.arange(2)})
    with pytest.raises(InputError, match="no column 'id'"):
        predictor({"image": _images(2)})
    with pytest.raises(InputError, match="'nope' is not an input"):
        Predictor(SAMPLE, inputs={"nope": "x"})
    vectors = [("a", TensorProto.FLOAT, ["N"]), ("b", TensorProto.FLOAT, ["N"])]
    two = make_model([helper.make_node("Add", ["a", "b"], ["y"])], vectors, [("y", TensorProto.FLOAT, ["N"])])
    with pytest.raises(InputError, match="one row count"):
        Predictor(two)({"a": np.zeros(3, np.float32), "b": np.zeros(4, np.float32)})
    total = make_model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0)], [("x", TensorProto.FLOAT, ["N", 2])],
                       [("s", TensorProto.FLOAT, [])])
    with pytest.raises(InputError, match=r"output 's'.*one row per sample"):
        Predictor(total)({"x": np.ones((3, 2), np.float32)})
    with pytest.raises(InputError, match="dict of column"):
        predictor([1, 2])


def test_worker_adapter_argument_is_checked():
    model = ws.load_model(SAMPLE)
    for bad in (-1, True, "0", 1.0):
        with pytest.raises(InputError, match="adapter must be None or an index"):
            ws.Worker(model, "gpu-compute", adapter=bad)
    with pytest.raises(InputError, match="cpu backend runs on the host"):
        ws.Worker(model, "cpu", adapter=0)


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_adapters_are_listed_and_a_worker_runs_on_the_one_it_is_given(backend):
    found = ws.adapters()
    assert [a.index for a in found] == list(range(len(found))) and found
    assert all(a.backend in ("Vulkan", "Metal", "D3D12") and a.name for a in found)
    images = _images(4)
    want = _one_process(images)["probabilities"]
    with ws.Worker(ws.load_model(SAMPLE), backend, adapter=len(found) - 1) as worker:
        on_adapter = worker.run({"image": images}, on_device=True)["probabilities"]
        np.testing.assert_allclose(np.asarray(on_adapter), want, rtol=1e-5, atol=1e-6)
        # a device tensor of that adapter's device fed to a Worker on the default device arrives intact
        identity = make_model([helper.make_node("Identity", ["p"], ["q"])], [("p", TensorProto.FLOAT, ["N", 10])],
                              [("q", TensorProto.FLOAT, ["N", 10])])
        with ws.Worker(ws.load_model(identity), backend) as default:
            np.testing.assert_allclose(default.run({"p": on_adapter})["q"], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(DeviceError, match=rf"adapter {len(found)} is not one of this machine's {len(found)}"):
        ws.Worker(ws.load_model(SAMPLE), backend, adapter=len(found))
    got = Predictor(SAMPLE, backend, adapter=0)({"image": images})["probabilities"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


class PidPredictor(Predictor):
    """The Predictor with the scoring process's id as a column: which actor scored each row."""

    def __call__(self, batch):
        import os

        result = super().__call__(batch)
        result["pid"] = np.full(len(result["probabilities"]), os.getpid())
        return result


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    # this module's classes travel to the actors by value: the actors cannot import a test module
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # a pool starts scoring when its actors are up, not with the first one (which would score everything here),
    # and an actor that cannot start fails the run within this many seconds instead of leaving it waiting
    ray.data.DataContext.get_current().wait_for_min_actors_s = 300
    yield ray
    ray.shutdown()


def test_ray_data_scores_2000_inputs_on_two_actors_as_one_process_does(local_ray):
    images = _images(2000)
    ids = np.arange(2000)
    dataset = local_ray.data.from_items([{"id": int(i), "image": images[i]} for i in ids], override_num_blocks=8)
    scored = dataset.map_batches(PidPredictor, fn_constructor_args=(ws.load_model(SAMPLE),),
                                 fn_constructor_kwargs={"backend": "cpu", "threads": 1, "keep_columns": ["id"]},
                                 batch_size=125, batch_format="numpy",
                                 compute=local_ray.data.ActorPoolStrategy(size=2), num_cpus=1)
    rows = sorted(scored.take_all(), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(ids)
    got = np.stack([r["probabilities"] for r in rows])
    np.testing.assert_allclose(got, _one_process(images)["probabilities"], rtol=1e-6, atol=1e-7)
    assert len({int(r["pid"]) for r in rows}) == 2  # both actors scored


def test_map_batches_wires_a_predictor_per_actor(local_ray):
    images = _images(300)
    # items straight into the actors: a CPU task before them (a rename, a repartition) would wait for a CPU the
    # two actors hold on this 2-CPU instance
    dataset = local_ray.data.from_items([{"id": i, "image": images[i]} for i in range(300)], override_num_blocks=4)
    rows = sorted(map_batches(dataset, SAMPLE, "cpu", actors=2, batch_size=50, keep_columns=["id"]).take_all(),
                  key=lambda r: r["id"])
    got = np.stack([r["probabilities"] for r in rows])
    np.testing.assert_allclose(got, _one_process(images)["probabilities"], rtol=1e-6, atol=1e-7)
    with pytest.raises(InputError, match="actors must be a positive integer"):
        map_batches(dataset, SAMPLE, actors=0)
