"""No-op removal (Identity, inference Dropout, same-shape Reshape) and dead-layer removal."""

from __future__ import annotations

from wgsentis.ir import Graph, Layer, captured_names, subgraphs


def _rename_inputs(graph: Graph, old: str, new: str) -> None:
    for layer in graph.layers:
        layer.inputs = [new if n == old else n for n in layer.inputs]
        for sub in subgraphs(layer):
            _rename_inputs(sub, old, new)
            sub.outputs = [type(o)(new, o.dtype, o.shape, o.kind) if o.name == old and old not in
                           {x for lay in sub.layers for x in lay.outputs} else o for o in sub.outputs]


class RemoveNoOps:
    """Bypass layers that return their input unchanged, where no graph output depends on the name."""

    def run(self, graph: Graph, opsets: dict[str, int]) -> None:
        outputs = {o.name for o in graph.outputs}
        read = {n for layer in graph.layers for n in [*layer.inputs, *captured_names(layer)]} | outputs
        kept: list[Layer] = []
        for layer in graph.layers:
            if self._is_noop(layer, graph, read) and layer.outputs[0] not in outputs and layer.inputs[0]:
                _rename_inputs(graph, layer.outputs[0], layer.inputs[0])
                continue
            kept.append(layer)
        graph.layers = kept

    @staticmethod
    def _is_noop(layer: Layer, graph: Graph, read: set[str]) -> bool:
        if layer.domain:
            return False
        if layer.op_type == "Identity":
            return len(layer.inputs) == 1
        if layer.op_type == "Dropout":
            # Inference Dropout is identity unless training_mode is set or the mask is used.
            mask_used = len(layer.outputs) > 1 and layer.outputs[1] in read
            training = layer.inputs[2] if len(layer.inputs) > 2 else ""
            training_off = not training or (training in graph.constants and not bool(graph.constants[training]))
            return not mask_used and training_off and not layer.attrs.get("is_test", 1) == 0
        if layer.op_type == "Reshape" and len(layer.inputs) == 2:
            src = graph.value_info.get(layer.inputs[0])
            dst = graph.value_info.get(layer.outputs[0])
            return (src is not None and dst is not None and src.shape is not None and src.shape == dst.shape
                    and all(isinstance(d, int) for d in src.shape))
        return False


class RemoveUnused:
    """Drop layers none of whose outputs reaches a graph output."""

    def run(self, graph: Graph, opsets: dict[str, int]) -> None:
        needed = {o.name for o in graph.outputs}
        kept: list[Layer] = []
        for layer in reversed(graph.layers):
            if any(o in needed for o in layer.outputs if o) or layer.op_type in _SIDE_EFFECT_OPS:
                kept.append(layer)
                needed.update(n for n in layer.inputs if n)
                needed.update(captured_names(layer))
        graph.layers = list(reversed(kept))
        graph.constants = {k: v for k, v in graph.constants.items() if k in needed}


_SIDE_EFFECT_OPS: frozenset[str] = frozenset()
