"""Batch scoring beyond one process: ``Predictor``, the callable class Ray Data's ``map_batches`` runs on an actor
pool (one Worker per actor, batches as dicts of numpy arrays), and ``map_batches``, which wires it up with one
actor per GPU where the cluster has GPUs. Ray is an optional extra (``pip install wgsentis[ray]``); ``Predictor``
itself needs nothing but wgsentis, so any loop that hands it dicts of columns (a Dask bag's partitions, a
multiprocessing pool) can use it the same way.

A batch's rows are independent samples along axis 0 of every column. A model input whose batch dim is fixed
(an export with N=1) is fed in chunks of that size, the last chunk padded by repeating its last row and the
padding's outputs dropped; a column of dtype object (rows of different shapes: images or text lines of any size)
is fed row by row (one whose rows share a shape is stacked and fed whole). Every output must have one row per
sample, or the batch fails with an InputError naming it; a sequence output with one element per row (a classic-ML
classifier's ZipMap dicts) becomes a column of objects.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from wgsentis.errors import InputError
from wgsentis.model import Model
from wgsentis.onnx_import import load_model
from wgsentis.worker import BackendType, Worker, backend_of

ModelSource = str | os.PathLike | bytes | onnx.ModelProto | Model


def _as_model(model: ModelSource) -> Model:
    return model if isinstance(model, Model) else load_model(model)


def _column(value: Any) -> np.ndarray:
    """A batch column as one array: a column of dtype object whose rows are arrays of one shape and dtype (what
    pandas batches and Ray's tensor columns may give) is stacked, so the batch runs whole, not row by row."""
    array = np.asarray(value)
    if array.dtype == object and array.ndim == 1 and len(array):
        rows = list(array)
        if all(isinstance(r, np.ndarray) for r in rows) and len({(r.shape, r.dtype) for r in rows}) == 1:
            return np.stack(rows)
    return array


def _object_column(values: Sequence[Any]) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):  # one by one: a slice assignment would broadcast rows that are arrays
        column[i] = value
    return column


def ray_adapter() -> int | None:
    """The adapter index of the GPU Ray gave the calling actor (``ray.get_gpu_ids()``, taken modulo the GPU
    adapters wgsentis lists, so N actors with one GPU each land on N different GPUs of a node); None outside an
    actor with a GPU. Vulkan, Metal and D3D12 ignore CUDA_VISIBLE_DEVICES, which is how Ray shares GPUs out, so
    the Predictor reads Ray's assignment itself."""
    try:
        import ray
    except ImportError:
        return None
    if not ray.is_initialized():
        return None
    try:
        gpu_ids = ray.get_gpu_ids()
    except Exception:  # outside a worker process of a Ray job
        return None
    if not gpu_ids:
        return None
    from wgsentis.backends.gpu.device import adapters

    gpus = [a.index for a in adapters() if a.adapter_type in ("DiscreteGPU", "IntegratedGPU")]
    if not gpus:
        return None
    return gpus[int(gpu_ids[0]) % len(gpus)]


class Predictor:
    """Scores batches (dicts of column name -> array, rows along axis 0) with one Worker.

    ``model``: a path, bytes, an onnx.ModelProto or a loaded ``wgsentis.Model``. ``backend``, ``threads`` and
    ``worker_options`` go to the Worker. ``adapter``: the GPU (an index in ``wgsentis.adapters()``); "auto" (the
    default) takes the one Ray assigned the actor (``ray_adapter``), else wgpu's default; ignored on cpu.
    ``inputs``: model input name -> batch column, for columns named otherwise (default: the same names).
    ``outputs``: the model outputs (or any intermediate tensors, added with ``add_output``) to return as columns;
    default every model output. ``keep_columns``: batch columns copied unchanged into the result (ids, paths).
    """

    def __init__(self, model: ModelSource, backend: BackendType | str = "cpu", *, threads: int = 1,
                 adapter: int | str | None = "auto", inputs: Mapping[str, str] | None = None,
                 outputs: Sequence[str] | None = None, keep_columns: Sequence[str] = (),
                 **worker_options: Any) -> None:
        self.backend = backend_of(backend)
        loaded = _as_model(model)
        names = [t.name for t in loaded.outputs]
        for name in outputs or ():
            if name not in names:
                loaded.add_output(name)  # raises a typed error naming a tensor the model does not have
        self.model = loaded
        self.output_names = list(outputs) if outputs else names
        input_names = [t.name for t in loaded.inputs]
        self.columns = {name: name for name in input_names}
        for name, column in (inputs or {}).items():
            if name not in self.columns:
                raise InputError(f"Predictor(inputs={dict(inputs or {})}): '{name}' is not an input of model "
                                 f"'{loaded.name}' (its inputs: {input_names})")
            self.columns[name] = column
        self.keep_columns = list(keep_columns)
        if adapter == "auto":
            adapter = ray_adapter() if self.backend is not BackendType.CPU else None
        elif self.backend is BackendType.CPU:
            adapter = None  # a pipeline written for GPUs may pass an index; the host has no adapters
        self.adapter = adapter
        self.worker = Worker(loaded, self.backend, threads=threads, adapter=adapter, **worker_options)
        # The fixed batch size of each input (None: its batch dim varies, a whole batch is fed at once).
        self.fixed_rows = {t.name: t.shape[0] if t.shape and isinstance(t.shape[0], int) else None
                           for t in loaded.inputs}
        self.rows_scored = 0
        self.batches_scored = 0

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if not isinstance(batch, Mapping):  # a pandas DataFrame (batch_format="pandas"): its columns
            if not hasattr(batch, "columns"):
                raise InputError(f"Predictor: a batch is a dict of column -> array, got {type(batch).__name__}")
            batch = {str(c): batch[c].to_numpy() for c in batch.columns}
        feeds: dict[str, np.ndarray] = {}
        for name, column in self.columns.items():
            if column not in batch:
                raise InputError(f"Predictor: model '{self.model.name}' input '{name}' reads batch column "
                                 f"'{column}', which the batch lacks (its columns: {sorted(batch)})")
            feeds[name] = _column(batch[column])
        for column in self.keep_columns:
            if column not in batch:
                raise InputError(f"Predictor(keep_columns=...): the batch has no column '{column}' "
                                 f"(its columns: {sorted(batch)})")
        rows = self._rows(feeds)
        if any(v.dtype == object for v in feeds.values()):
            result = self._row_by_row(feeds, rows)
        else:
            result = self._chunked(feeds, rows)
        for column in self.keep_columns:
            result[column] = np.asarray(batch[column])
        self.rows_scored += rows
        self.batches_scored += 1
        return result

    def _rows(self, feeds: Mapping[str, np.ndarray]) -> int:
        counts = {name: (len(v) if v.ndim else None) for name, v in feeds.items()}
        sizes = {c for c in counts.values() if c is not None}
        if len(sizes) != 1:
            raise InputError(f"Predictor: the batch's input columns of model '{self.model.name}' must have one "
                             f"row count along axis 0; got {counts}")
        return sizes.pop()

    def _chunked(self, feeds: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        fixed = {self.fixed_rows.get(name) for name in feeds} - {None}
        if len(fixed) > 1:
            raise InputError(f"Predictor: model '{self.model.name}''s inputs fix different batch sizes {fixed}")
        step = fixed.pop() if fixed else rows
        parts: dict[str, list[np.ndarray]] = {name: [] for name in self.output_names}
        for start in range(0, rows, step):
            taken = min(step, rows - start)
            chunk = {}
            for name, value in feeds.items():
                part = value[start:start + taken]
                if taken < step:  # the last chunk of a fixed-size input: its last row repeated, dropped after
                    part = np.concatenate([part, np.repeat(part[-1:], step - taken, axis=0)])
                chunk[name] = part
            for name, value in self._run(chunk, step).items():
                parts[name].append(value[:taken])
        return {name: np.concatenate(values) if len(values) > 1 else values[0] for name, values in parts.items()}

    def _row_by_row(self, feeds: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        ranks = {t.name: len(t.shape) if t.shape is not None else None for t in self.model.inputs}
        per_row: dict[str, list[np.ndarray]] = {name: [] for name in self.output_names}
        for i in range(rows):
            row = {}
            for name, value in feeds.items():
                sample = np.asarray(value[i])
                # a sample is a model input without its batch dim, or (rank given) with it
                row[name] = sample[None] if ranks.get(name) in (None, sample.ndim + 1) else sample
            for name, value in self._run(row, 1).items():
                per_row[name].append(value[0])
        result = {}
        for name, values in per_row.items():
            if len({v.shape for v in values}) == 1 and values[0].dtype != object:
                result[name] = np.stack(values)
            else:  # rows of different shapes stay a column of arrays, as they came in
                result[name] = _object_column(values)
        return result

    def _run(self, feeds: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        outputs = self.worker.run(feeds)
        result = {}
        for name in self.output_names:
            value = outputs[name]
            if isinstance(value, list) and len(value) == rows:  # a sequence output (ZipMap's dicts): one per row
                value = _object_column(value)
            if not isinstance(value, np.ndarray) or value.ndim == 0 or len(value) != rows:
                shape = getattr(value, "shape", type(value).__name__)
                raise InputError(f"Predictor: output '{name}' of model '{self.model.name}' has {shape} for a batch "
                                 f"of {rows} rows; a batch column needs one row per sample (choose per-row "
                                 f"outputs with outputs=...)")
            result[name] = value
        return result

    def close(self) -> None:
        self.worker.close()

    def __del__(self) -> None:
        worker = getattr(self, "worker", None)
        if worker is not None:
            worker.close()


def map_batches(dataset: Any, model: ModelSource, backend: BackendType | str = "cpu", *, actors: int = 1,
                threads: int = 1, batch_size: int = 256, num_gpus: float | None = None,
                **predictor_options: Any) -> Any:
    """``dataset.map_batches`` with a Predictor per actor: ``actors`` actors, each with ``threads`` CPUs and, on a
    GPU backend of a cluster with GPUs, one GPU (``num_gpus`` overrides: 0 for a GPU backend on a CPU device such
    as lavapipe). The model is loaded once here and shipped to the actors through Ray's object store, so the
    nodes need not share a file system."""
    if isinstance(actors, bool) or not isinstance(actors, int) or actors < 1:
        raise InputError(f"map_batches(actors={actors!r}): actors must be a positive integer")
    loaded = _as_model(model)
    kind = backend_of(backend)
    try:
        import ray
        from ray.data import ActorPoolStrategy
    except ImportError as exc:
        raise ImportError(f"wgsentis.batch.map_batches needs Ray Data ({exc}): pip install 'wgsentis[ray]'") from None
    if num_gpus is None:
        num_gpus = 0.0
        if kind is not BackendType.CPU:
            num_gpus = 1.0 if ray.is_initialized() and ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
    options = {"num_gpus": num_gpus} if num_gpus else {}
    return dataset.map_batches(Predictor, fn_constructor_args=(loaded,),
                               fn_constructor_kwargs={"backend": kind.value, "threads": threads, **predictor_options},
                               batch_size=batch_size, batch_format="numpy",
                               compute=ActorPoolStrategy(size=actors), num_cpus=threads, **options)


__all__ = ["Predictor", "map_batches", "ray_adapter"]
