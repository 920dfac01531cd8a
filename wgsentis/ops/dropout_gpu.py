"""gpu-compute programs of the dropout family: inference Dropout (and training with ratio 0) is a view
of its input, with an all-true mask when asked for; random masks stay on the CPU."""

from __future__ import annotations

import numpy as np

from wgsentis.ops.elementwise_gpu import refusing
from wgsentis.ops.registry import GPU_COMPUTE, register
from wgsentis.ops.tensor_gpu import filled_tensor, reshaped_view


def _dropout_identity(rec, layer, data):
    y = reshaped_view(rec, data, data.shape)
    if y is NotImplemented:
        return y
    if len(layer.outputs) > 1 and layer.outputs[1]:
        return y, filled_tensor(rec, data.shape, np.bool_, True)
    return y


@register("Dropout", 12, backend=GPU_COMPUTE, host_inputs=(1, 2))
@refusing
def dropout_v12(rec, layer, data, ratio=None, training_mode=None, **attrs):
    training = training_mode is not None and bool(np.asarray(training_mode))
    if training and (ratio is None or float(np.asarray(ratio)) != 0.0):
        return NotImplemented  # random masks stay on the CPU
    return _dropout_identity(rec, layer, data)
