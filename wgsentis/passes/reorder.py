"""Reorders that keep a graph's results and cut its work: an AveragePool next to a pointwise (1x1)
Conv commutes with it, since both are linear and the pool weights every channel alike. Each pair runs
in the order that costs less:

- AveragePool -> Conv 1x1 with fewer output than input channels becomes Conv -> AveragePool: the pool
  then runs over the fewer channels (Inception v2's pool branches: 3x3/1 pools over 256-576 channels
  feeding 1x1 convs to 32-128).
- Conv 1x1 -> AveragePool that shrinks the plane becomes AveragePool -> Conv: the products then run on
  the pooled positions (DenseNet's transitions: 1x1 convs at 56x56, 28x28 and 14x14 followed by 2x2/2
  pools, a quarter of the FLOPs after the swap).

The bias commutes too (the average of a constant is that constant) where every window averages only
the input it covers: ``count_include_pad`` 0, or no padding and no ceil-mode overhang. Runs before
FuseActivation, so the Conv carries no activation yet; the swapped layers keep their names, and the
pair's final tensor keeps its name, shape and position in the order.
"""

from __future__ import annotations

import math

from wgsentis.ir import Graph, Layer
from wgsentis.passes.fuse import single_consumer

# The pool may grow at most this much (in channels) for a swap that makes the products cheaper.
_MAX_POOL_GROWTH = 4


def _pointwise_conv(layer: Layer, consts: dict) -> tuple[int, int] | None:
    """(input channels, output channels) of a plain 1x1 Conv (stride 1, no padding, one group, constant
    float weights and bias, no fused activation); None for anything else."""
    if layer.op_type != "Conv" or layer.domain or layer.fused_activation or len(layer.outputs) != 1:
        return None
    if len(layer.inputs) < 2 or layer.inputs[1] not in consts:
        return None
    if len(layer.inputs) > 2 and layer.inputs[2] and layer.inputs[2] not in consts:
        return None
    w = consts[layer.inputs[1]]
    if w.ndim < 3 or w.dtype.kind != "f" or any(k != 1 for k in w.shape[2:]):
        return None
    attrs = layer.attrs
    if attrs.get("group", 1) != 1 or any(s != 1 for s in attrs.get("strides") or [1]):
        return None
    if any(p != 0 for p in attrs.get("pads") or [0]):
        return None
    return int(w.shape[1]), int(w.shape[0])


def _averages_what_it_covers(pool: Layer, rank: int) -> bool:
    """Whether every window of ``pool`` (an AveragePool of a rank-``rank`` input) divides by the number of
    input elements it covers, so that it maps a constant to itself."""
    if pool.op_type != "AveragePool" or pool.domain or pool.fused_activation or len(pool.outputs) != 1:
        return False
    kernel = pool.attrs.get("kernel_shape")
    if not kernel or len(kernel) != rank - 2 or any(d != 1 for d in pool.attrs.get("dilations") or [1]):
        return False
    if pool.attrs.get("count_include_pad", 0) == 0:
        return True
    padded = pool.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or any(pool.attrs.get("pads") or [0])
    return not padded and not pool.attrs.get("ceil_mode", 0)


def _positions_kept(pool: Layer) -> float:
    """The fraction of positions an AveragePool keeps, from its strides (1: as many out as in)."""
    return 1.0 / math.prod(pool.attrs.get("strides") or [1])


class CommutePoolAndPointwiseConv:
    """Swap AveragePool and a 1x1 Conv next to it where the other order costs less (see the module)."""

    def run(self, graph: Graph, opsets: dict[str, int]) -> None:
        outputs = {o.name for o in graph.outputs}
        consts = graph.constants
        consumers = graph.consumers()
        position = {id(layer): i for i, layer in enumerate(graph.layers)}
        swapped: set[int] = set()
        for first in list(graph.layers):
            if id(first) in swapped or len(first.outputs) != 1:
                continue
            middle = first.outputs[0]
            second = single_consumer(consumers, middle)
            if middle in outputs or second is None or id(second) in swapped or second.inputs[0] != middle:
                continue
            if first.op_type == "AveragePool" and second.op_type == "Conv":
                pool, conv, pool_first = first, second, True
            elif first.op_type == "Conv" and second.op_type == "AveragePool":
                conv, pool, pool_first = first, second, False
            else:
                continue
            channels = _pointwise_conv(conv, consts)
            if channels is None:
                continue
            c_in, c_out = channels
            rank = consts[conv.inputs[1]].ndim
            if not _averages_what_it_covers(pool, rank):
                continue
            if pool_first:
                # The pool moves after the conv: worth it where the conv narrows the channels.
                if c_out >= c_in:
                    continue
                source, final = pool.inputs[0], conv.outputs[0]
                between = f"{final}/before_{pool.name}"
                conv.inputs = [source, *conv.inputs[1:]]
                conv.outputs = [between]
                pool.inputs = [between]
                pool.outputs = [final]
            else:
                # The pool moves before the conv: worth it where it shrinks the plane the products run
                # on, and the pool's growth (it now runs over the conv's input channels) stays bounded.
                if _positions_kept(pool) > 0.5 or c_in > _MAX_POOL_GROWTH * c_out:
                    continue
                source, final = conv.inputs[0], pool.outputs[0]
                between = f"{final}/before_{conv.name}"
                pool.inputs = [source]
                pool.outputs = [between]
                conv.inputs = [between, *conv.inputs[1:]]
                conv.outputs = [final]
            # The layer that now runs first takes the earlier slot: its input was ready there, and the
            # conv's weights are constants, so the order stays topological.
            i, j = position[id(first)], position[id(second)]
            graph.layers[i], graph.layers[j] = second, first
            position[id(first)], position[id(second)] = j, i
            swapped.update((id(first), id(second)))
