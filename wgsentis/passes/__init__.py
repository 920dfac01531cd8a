"""Graph passes, run in one ordered list by an ``Optimizer``. Each pass keeps every graph output.

The passes import the IR only: constant folding evaluates layers through the evaluator it is handed
(``load_model`` hands in the CPU backend's), so no pass depends on a backend.
"""

from __future__ import annotations

from wgsentis.ir import Graph
from wgsentis.passes.einsum import LowerEinsum
from wgsentis.passes.fold_constants import Evaluator, FoldConstants
from wgsentis.passes.fuse import (
    FoldAffineIntoNextConv,
    FoldChannelAffine,
    FuseActivation,
    FuseConvBatchNorm,
    FuseGeluPattern,
    FuseHardSwishPattern,
    FuseResidualAdd,
)
from wgsentis.passes.noops import RemoveNoOps, RemoveUnused
from wgsentis.passes.reorder import CommutePoolAndPointwiseConv



class Optimizer:
    """The passes in their order; called as ``optimizer(graph, opsets)``, it changes ``graph`` in place and
    returns it. ``evaluate`` runs a one-layer graph of constants (constant folding's evaluator)."""

    def __init__(self, evaluate: Evaluator) -> None:
        self.passes = [LowerEinsum(), FoldConstants(evaluate), RemoveNoOps(), FuseHardSwishPattern(),
                       FuseGeluPattern(), FuseConvBatchNorm(), FoldChannelAffine(), FoldAffineIntoNextConv(),
                       CommutePoolAndPointwiseConv(), FuseActivation(), FuseResidualAdd(), RemoveUnused()]

    def __call__(self, graph: Graph, opsets: dict[str, int]) -> Graph:
        for graph_pass in self.passes:
            graph_pass.run(graph, opsets)
        return graph


__all__ = ["Optimizer"]
