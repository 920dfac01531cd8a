"""Size rules of ai.onnx.ml ops beside those ops/ml.py declares: ArrayFeatureExtractor, TreeEnsemble.

Each rule is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``); the memory budget
(``wgsentis.budget``) reads them from the ops' specs."""

from __future__ import annotations

import math
from typing import Any

from wgsentis.ops import spec
from wgsentis.ops.spec import Output, size_rule


# -- ai.onnx.ml ------------------------------------------------------------------------------------


@size_rule("ArrayFeatureExtractor", domain="ai.onnx.ml")
def _array_feature_extractor(layer: Any, args: list[Any]) -> list[Output]:
    x = spec.shape_of(args[0])
    count = math.prod(spec.shape_of(args[1]))
    return [spec.out((1, count) if len(x) == 1 else (*x[:-1], count), spec.itemsize_of(args[0]))]


@size_rule("TreeEnsemble", domain="ai.onnx.ml")
def _tree_ensemble(layer: Any, args: list[Any]) -> list[Output]:
    targets = layer.attrs.get("n_targets")
    if targets is None:
        return []
    x = spec.shape_of(args[0])
    return [spec.out((x[0] if len(x) > 1 else 1, int(targets)), 8)]
