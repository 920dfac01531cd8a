"""Concrete shapes and sample inputs: what the CLI's inspect table and FLOPs counts are built on."""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.errors import InputError
from wgsentis.model import Model, TensorInfo


def concrete_shape(info: TensorInfo, dims: dict[str, int] | None = None, default: int = 1) -> tuple[int, ...]:
    """The shape of an input with symbolic/unknown dims replaced from ``dims`` (else ``default``)."""
    if info.shape is None:
        raise InputError(f"input '{info.name}' has unknown rank; give it explicitly")
    dims = dims or {}
    out = []
    for d in info.shape:
        if isinstance(d, int):
            out.append(d)
        elif isinstance(d, str) and d in dims:
            out.append(int(dims[d]))
        else:
            out.append(default)
    return tuple(out)


def sample_inputs(model: Model, dims: dict[str, int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs for every model input: floats in [0, 1), integers in [0, 10), bools."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for info in model.inputs:
        shape = concrete_shape(info, dims)
        dtype = info.dtype if info.dtype is not None else np.dtype(np.float32)
        if dtype.kind == "f":
            feeds[info.name] = rng.random(shape, dtype=np.float64).astype(dtype)
        elif dtype.kind in "iu":
            feeds[info.name] = rng.integers(0, 10, shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[info.name] = rng.random(shape) < 0.5
        else:
            raise InputError(f"model '{model.name}': no sample data for input '{info.name}' of dtype {dtype}")
    return feeds


def layer_shapes(model: Model, feeds: dict[str, Any]) -> dict[str, tuple[int, ...] | None]:
    """Run the model once on the CPU and record the shape of every tensor it produces or reads."""
    from wgsentis.backends.cpu import GraphProgram

    shapes: dict[str, tuple[int, ...] | None] = {
        name: tuple(v.shape) for name, v in model.graph.constants.items()
    }
    shapes.update({name: tuple(np.asarray(v).shape) for name, v in feeds.items()})

    def record(layer: Any, values: list[Any]) -> None:
        for name, value in zip(layer.outputs, values, strict=False):
            if name:
                shapes[name] = tuple(value.shape) if isinstance(value, np.ndarray) else None

    program = GraphProgram(model.graph, 1)
    program.run(feeds, on_layer=record)
    return shapes
