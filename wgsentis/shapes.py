"""Concrete shapes and sample inputs: what the CLI's inspect table and FLOPs counts are built on."""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.errors import InputError
from wgsentis.model import Model, TensorInfo


def concrete_shape(info: TensorInfo, dims: dict[str, int] | None = None, default: int = 1) -> tuple[int, ...]:
    """The shape of an input with symbolic/unknown dims replaced from ``dims``, keyed by the dim's
    name or by ``"INPUT:AXIS"`` (unnamed dims). An unknown leading (batch) dim defaults to ``default``;
    any other unknown dim is an InputError: guessing 1 for an image's height would run a degenerate
    model (zero-size tensors, NaN pools) and profile nothing real."""
    if info.shape is None:
        raise InputError(f"input '{info.name}' has unknown rank; give it explicitly")
    dims = dims or {}
    out = []
    for axis, d in enumerate(info.shape):
        key = d if isinstance(d, str) else f"{info.name}:{axis}"
        if isinstance(d, int):
            out.append(d)
        elif key in dims:
            out.append(int(dims[key]))
        elif f"{info.name}:{axis}" in dims:
            out.append(int(dims[f"{info.name}:{axis}"]))
        elif axis == 0:
            out.append(default)
        else:
            shape = ["?" if v is None else v for v in info.shape]
            raise InputError(f"input '{info.name}' {shape}: the size of axis {axis} ({d or 'unnamed'}) is unknown; "
                             f"give it (dims={{'{key}': N}}, CLI --dim {key}=N) or pass the input itself")
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
