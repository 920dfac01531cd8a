"""What ``prune()`` returns: the pruned ModelProto and, per prunable layer, what pruning did to it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onnx import ModelProto


@dataclass
class LayerPruning:
    """What pruning did to one prunable layer."""

    name: str
    op_type: str
    weight: str
    level: float  # requested
    sparsity: float  # actual: the fraction of the weight's entries zeroed (unstructured) or removed (structured)
    channels: int | None = None  # output channels before (structured)
    kept_channels: int | None = None
    kept_indices: list[int] | None = None  # which of the original output channels remain (structured)
    dense_reason: str | None = None  # why structured pruning left it dense although a level > 0 was asked

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class PruneResult:
    """The pruned model (``proto``), per-layer results and where it was written (``path``, or None)."""

    proto: ModelProto
    structured: bool
    layers: dict[str, LayerPruning] = field(default_factory=dict)
    path: Path | None = None

    def __repr__(self) -> str:
        pruned = sum(1 for e in self.layers.values() if e.sparsity > 0)
        kind = "structured" if self.structured else "unstructured"
        return f"PruneResult({kind}, {pruned}/{len(self.layers)} layers pruned, path={self.path})"

    def summary(self) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self.layers.values()]
