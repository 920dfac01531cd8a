"""Facets of the com.microsoft contrib ops that ONNX's shape inference does not know: their shape rules, so the
importer can carry shapes through them (``wgsentis.rule_shapes``) and the memory budget can size them. Each rule
is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``), the first output first;
all read only their inputs' shapes and dtypes."""

from __future__ import annotations

from typing import Any

from wgsentis.ops import spec
from wgsentis.ops.spec import Output, describe, size_rule

MS_DOMAIN = "com.microsoft"

# Output 0 has input 0's shape and type: activations, biases and skips added, normalizations over the last axis,
# rotary embeddings. (The QLinear ops are left out: their output's type is their output zero point's, which may be
# another 8-bit type than the input's.)
SAME_AS_FIRST = ("Gelu", "FastGelu", "BiasGelu", "QuickGelu", "BiasAdd", "SkipLayerNormalization",
                 "SkipSimplifiedLayerNormalization", "RotaryEmbedding")


@size_rule(*SAME_AS_FIRST, domain=MS_DOMAIN)
def _same_as_first(layer: Any, args: list[Any]) -> list[Output]:
    return [spec.out(spec.shape_of(args[0]), spec.itemsize_of(args[0]))]


@size_rule("BiasSplitGelu", domain=MS_DOMAIN)
def _bias_split_gelu(layer: Any, args: list[Any]) -> list[Output]:
    """(N, HW, 2C) -> (N, HW, C): the second half of the channels gates the first."""
    shape = spec.shape_of(args[0])
    if not shape or shape[-1] % 2:
        raise ValueError("BiasSplitGelu needs an even last dimension")
    return [spec.out((*shape[:-1], shape[-1] // 2), spec.itemsize_of(args[0]))]


describe(*SAME_AS_FIRST, "BiasSplitGelu", domain=MS_DOMAIN, size_reads_shapes=True)
