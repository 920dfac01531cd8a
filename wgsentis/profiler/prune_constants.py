"""The constant tensors of the ModelProto being pruned (initializers and Constant nodes), read and written in place,
and the small folding that exposes weights an exporter reshapes or casts in the graph (``fold_constants``).

The folding is the pruner's own, not the engine's ``passes.FoldConstants``: that one works on the imported IR,
folds every deterministic op with constant inputs (ConstantOfShape splats, Shape chains, ...) and drops the
folded layers, where pruning edits and writes back the user's own graph, folding only the few ops whose spec says
``prune_foldable`` into Constant nodes of the same name. Using it would change which layers are prunable and what is
written."""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto, ModelProto, NodeProto, helper, numpy_helper

from wgsentis.ops.spec import spec_of


class Constants:
    """The graph's constant tensors by name; a write keeps the name where the tensor has one reader, else
    gives that reader a fresh copy (another reader may need different channels)."""

    def __init__(self, proto: ModelProto) -> None:
        self.graph = proto.graph
        self.inits = {t.name: t for t in self.graph.initializer}
        self.nodes: dict[str, NodeProto] = {}
        for node in self.graph.node:
            if node.op_type == "Constant" and len(node.output) == 1 and not node.input:
                self.nodes[node.output[0]] = node
        self.values: dict[str, np.ndarray] = {}
        self.readers: dict[str, int] = {}
        for node in self.graph.node:
            for name in [*node.input, *captured_names(node)]:
                self.readers[name] = self.readers.get(name, 0) + 1
        for out in self.graph.output:
            self.readers[out.name] = self.readers.get(out.name, 0) + 1
        self.fresh = 0

    def get(self, name: str) -> np.ndarray | None:
        if not name:
            return None
        if name not in self.values:
            value: np.ndarray | None = None
            if name in self.inits:
                value = numpy_helper.to_array(self.inits[name])
            elif name in self.nodes:
                attrs = {a.name: a for a in self.nodes[name].attribute}
                if "value" in attrs:
                    value = numpy_helper.to_array(attrs["value"].t)
                elif "value_float" in attrs:
                    value = np.array(attrs["value_float"].f, np.float32)
                elif "value_floats" in attrs:
                    value = np.array(list(attrs["value_floats"].floats), np.float32)
                elif "value_int" in attrs:
                    value = np.array(attrs["value_int"].i, np.int64)
                elif "value_ints" in attrs:
                    value = np.array(list(attrs["value_ints"].ints), np.int64)
            if value is None:
                return None
            self.values[name] = value
        return self.values[name]

    def arrays(self) -> dict[str, np.ndarray]:
        """Every float constant of two or more dims (what ``prunable_weight`` looks among)."""
        names = list(self.inits) + list(self.nodes)
        out = {}
        for n in names:
            if n in self.inits and len(self.inits[n].dims) < 2:
                continue
            v = self.get(n)
            if v is not None:
                out[n] = v
        return out

    def write(self, node: NodeProto, index: int, value: np.ndarray) -> None:
        name = node.input[index]
        value = np.ascontiguousarray(value.astype(self.get(name).dtype, copy=False))
        if self.readers.get(name, 0) <= 1:
            tensor = numpy_helper.from_array(value, name)
            if name in self.inits:
                self.inits[name].CopyFrom(tensor)
            else:
                const = self.nodes[name]
                del const.attribute[:]
                const.attribute.append(helper.make_attribute("value", tensor))
            self.values[name] = value
            return
        self.fresh += 1
        new = f"{name}__pruned{self.fresh}"
        while new in self.inits or new in self.nodes:
            self.fresh += 1
            new = f"{name}__pruned{self.fresh}"
        tensor = numpy_helper.from_array(value, new)
        self.graph.initializer.append(tensor)
        self.inits[new] = self.graph.initializer[-1]
        self.values[new] = value
        self.readers[name] -= 1
        self.readers[new] = 1
        node.input[index] = new

    def finish(self) -> None:
        """Drop constants nothing reads (any more: replaced by pruned copies, or folded into a Constant); keep the
        graph-input entries of initializers in step."""
        dead = {n for n in [*self.inits, *self.nodes] if self.readers.get(n, 0) <= 0}
        if dead:
            kept = [t for t in self.graph.initializer if t.name not in dead]
            del self.graph.initializer[:]
            self.graph.initializer.extend(kept)
            nodes = [n for n in self.graph.node if not (n.op_type == "Constant" and n.output[0] in dead)]
            del self.graph.node[:]
            self.graph.node.extend(nodes)
            inputs = [i for i in self.graph.input if i.name not in dead]
            del self.graph.input[:]
            self.graph.input.extend(inputs)
        dims = {t.name: list(t.dims) for t in self.graph.initializer}
        for vi in self.graph.input:  # IR < 4 models list initializers as inputs too, with their shapes
            if vi.name in dims and vi.type.HasField("tensor_type"):
                shape = vi.type.tensor_type.shape
                del shape.dim[:]
                for d in dims[vi.name]:
                    shape.dim.add().dim_value = d


def captured_names(node: NodeProto) -> set[str]:
    """Outer names read inside a node's subgraphs."""
    names: set[str] = set()
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            local = {i.name for i in g.input} | {t.name for t in g.initializer}
            local |= {o for n in g.node for o in n.output}
            for n in g.node:
                names |= {i for i in [*n.input, *captured_names(n)] if i and i not in local}
            names |= {o.name for o in g.output if o.name not in local}
    return names


def default_opset(proto: ModelProto) -> int:
    """The model's opset of the default (ai.onnx) domain."""
    return next((e.version for e in proto.opset_import if e.domain in ("", "ai.onnx")), 1)


def fold_constants(proto: ModelProto) -> int:
    """Replace each node of a ``prune_foldable`` op whose inputs are all constants by a Constant node of its value (same
    name, same output): exporters often reshape a stored bias or weight in the graph, which would hide it
    from pruning. Returns how many nodes were folded."""
    from onnx.reference import ReferenceEvaluator

    consts = Constants(proto)
    opset = default_opset(proto)
    folded = 0
    for node in proto.graph.node:
        if not spec_of(node.op_type).prune_foldable or node.domain not in ("", "ai.onnx") or len(node.output) != 1 \
                or not node.input or captured_names(node):
            continue
        values = [consts.get(n) for n in node.input]
        if any(v is None for v in values) or any(not n for n in node.input):
            continue
        try:  # ONNX's reference implementation: the op's exact semantics (0 and -1 in shapes, broadcasting)
            names = [f"i{k}" for k in range(len(values))]
            single = helper.make_node(node.op_type, names, ["y"], domain=node.domain)
            single.attribute.extend(node.attribute)
            graph = helper.make_graph([single], "fold", [], [helper.make_empty_tensor_value_info("y")],
                                      [numpy_helper.from_array(np.asarray(v), n) for n, v in zip(names, values,
                                                                                                   strict=True)])
            value = np.asarray(ReferenceEvaluator(helper.make_model(
                graph, opset_imports=[helper.make_opsetid("", opset)])).run(None, {})[0])
        except Exception:  # not foldable after all: leave the node as it is
            continue
        name, out = node.name, node.output[0]
        node.Clear()
        node.CopyFrom(helper.make_node("Constant", [], [out], name=name,
                                       value=numpy_helper.from_array(value, out)))
        consts.nodes[out] = node
        consts.values[out] = value
        folded += 1
    return folded
