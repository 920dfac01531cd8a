"""Size rules of the signal ops (DFT, STFT, ...).

Each rule is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``); the memory budget
(``wgsentis.budget``) reads them from the ops' specs."""

from __future__ import annotations

from typing import Any

from wgsentis.ops import spec
from wgsentis.ops.spec import Output, size_rule


# -- signals -----------------------------------------------------------------------------------------


@size_rule("DFT")
def _dft(layer: Any, args: list[Any]) -> list[Output]:
    x = list(spec.shape_of(args[0]))
    if layer.opset < 20:
        axis = int(layer.attrs.get("axis", 1))
    else:
        axis = -2 if spec.arg(args, 2) is None else int(spec.scalar(args[2]))
    axis = spec.axis_of(axis, len(x))
    inverse, onesided = int(layer.attrs.get("inverse", 0)), int(layer.attrs.get("onesided", 0))
    if spec.arg(args, 1) is not None:
        n = int(spec.scalar(args[1]))
    else:
        n = 2 * (x[axis] - 1) if inverse and onesided else x[axis]
    x[axis] = n // 2 + 1 if onesided and not inverse else n
    x[-1] = 1 if inverse and onesided else 2
    return [spec.out(x, spec.itemsize_of(args[0]))]


@size_rule("STFT")
def _stft(layer: Any, args: list[Any]) -> list[Output]:
    batch, length = spec.shape_of(args[0])[:2]
    step = int(spec.scalar(args[1]))
    if spec.arg(args, 3) is not None:
        frame = int(spec.scalar(args[3]))
    else:
        frame = spec.shape_of(args[2])[0]
    frames = 1 + (length - frame) // step
    bins = frame // 2 + 1 if int(layer.attrs.get("onesided", 1)) else frame
    return [spec.out((batch, frames, bins, 2), spec.itemsize_of(args[0])),
            spec.out((batch, frames, frame), 16, "the framed signal, complex")]
