"""Graph passes, run in one ordered list by ``optimize``. Each pass keeps every graph output."""

from __future__ import annotations

from wgsentis.model import Graph
from wgsentis.passes.einsum import LowerEinsum
from wgsentis.passes.fold_constants import FoldConstants
from wgsentis.passes.fuse import (
    FoldAffineIntoNextConv,
    FoldChannelAffine,
    FuseActivation,
    FuseConvBatchNorm,
    FuseHardSwishPattern,
    FuseResidualAdd,
)
from wgsentis.passes.noops import RemoveNoOps, RemoveUnused
from wgsentis.passes.reorder import CommutePoolAndPointwiseConv

PASSES = [LowerEinsum(), FoldConstants(), RemoveNoOps(), FuseHardSwishPattern(), FuseConvBatchNorm(),
          FoldChannelAffine(), FoldAffineIntoNextConv(), CommutePoolAndPointwiseConv(), FuseActivation(),
          FuseResidualAdd(), RemoveUnused()]


def optimize(graph: Graph, opsets: dict[str, int]) -> Graph:
    """Run every pass in order on ``graph`` (changed in place) and return it."""
    for graph_pass in PASSES:
        graph_pass.run(graph, opsets)
    return graph
