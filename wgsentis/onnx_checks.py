"""Structural checks of an ONNX model's graphs, made before the importer converts anything: nesting depth,
names that are text, ranks numpy can hold, single producers, scope, cycles, topological order. Nothing here
recurses.

Subgraphs (If branches, Loop and Scan bodies) may nest at most ``MAX_SUBGRAPH_DEPTH`` deep; bytes that
protobuf refused are scanned in their wire format to say where they nest too deep. Every graph and subgraph
is validated as ONNX's checker would (one producer per tensor, no node writing a graph input or
initializer, every input produced somewhere in scope, no cycle) and sorted topologically (Kahn's algorithm,
stable: a valid given order is kept), counting what a node's subgraphs capture from the enclosing scope as
that node's inputs.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from typing import Any

import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto

from wgsentis.errors import ModelLoadError
from wgsentis.ops.spec import spec_of

# Deepest nesting of subgraphs (If branches, Loop and Scan bodies) a model may have. protobuf's own parser
# refuses messages nested over 100 levels, which a serialized model reaches at about 31 nested subgraphs
# (three messages per level); the limit sits below that, so bytes, files and ModelProtos all meet it first.
MAX_SUBGRAPH_DEPTH = 24


def _node_label(node: NodeProto, index: int) -> str:
    """A node's name as the importer names its layer: its own name, else op type and index."""
    return node.name or f"{node.op_type}_{index}"


def _path_text(path: tuple[str, ...]) -> str:
    """A node path for a message: 'a > b > c', its middle elided when long."""
    shown = list(path) if len(path) <= 8 else [*path[:3], f"... ({len(path) - 6} more) ...", *path[-3:]]
    return " > ".join(f"'{p}'" if not p.startswith("...") else p for p in shown)


def too_deep_error(model: str, path: tuple[str, ...]) -> ModelLoadError:
    return ModelLoadError(
        f"model '{model}': subgraphs nest deeper than the limit of {MAX_SUBGRAPH_DEPTH} "
        f"(MAX_SUBGRAPH_DEPTH) along the node path {_path_text(path)}"
    )


def _attr_graphs(attr: AttributeProto) -> list[GraphProto]:
    """Every graph an attribute holds, whatever its declared type says."""
    return ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)


def check_depth(proto: ModelProto, model: str) -> None:
    """Refuse subgraphs nested deeper than MAX_SUBGRAPH_DEPTH (in the graph and in local functions)."""
    stack: list[tuple[Any, int, tuple[str, ...]]] = [(proto.graph.node, 0, ())]
    stack += [(fn.node, 0, (f"function {fn.name}",)) for fn in proto.functions]
    while stack:
        nodes, depth, path = stack.pop()
        for index, node in enumerate(nodes):
            for attr in node.attribute:
                for sub in _attr_graphs(attr):
                    inner = (*path, _node_label(node, index))
                    if depth + 1 > MAX_SUBGRAPH_DEPTH:
                        raise too_deep_error(model, inner)
                    stack.append((sub.node, depth + 1, inner))


def check_text(proto: ModelProto, model: str) -> None:
    """Refuse names that are not text. protobuf's python runtime hands a string field holding invalid UTF-8
    back as bytes, which would otherwise reach schema lookups as a TypeError or become a layer's name."""

    def need_text(value: Any, what: str) -> None:
        if not isinstance(value, str):
            shown = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else repr(value)
            raise ModelLoadError(f"model '{model}': {what} '{shown}' is not valid UTF-8 text")

    for entry in proto.opset_import:
        need_text(entry.domain, "an opset_import domain")
    for prop in proto.metadata_props:
        need_text(prop.key, "a metadata key")
        need_text(prop.value, f"the value of metadata '{prop.key}'")
    for gp, where in _all_graphs(proto):
        need_text(gp.name, f"the name of {where}")
        for vi in [*gp.input, *gp.output, *gp.value_info]:
            need_text(vi.name, f"a value of {where}")
        for init in gp.initializer:
            need_text(init.name, f"an initializer of {where}")
        for index, node in enumerate(gp.node):
            need_text(node.name, f"the name of node {index} of {where}")
            label = f"node {_node_label(node, index)} of {where}"
            need_text(node.op_type, f"the op type of {label}")
            need_text(node.domain, f"the domain of {label}")
            for name in [*node.input, *node.output]:
                need_text(name, f"a tensor name of {label}")
            for attr in node.attribute:
                need_text(attr.name, f"an attribute name of {label}")


def _all_graphs(proto: ModelProto) -> Iterator[tuple[GraphProto, str]]:
    """Every graph of the model (main graph, local functions' bodies, subgraphs at any depth), each with
    words that say where it is; iterative, so it is safe before the nesting depth is known."""
    graphs: list[tuple[GraphProto, str]] = [(proto.graph, "the main graph")]
    graphs += [(GraphProto(node=fn.node), f"function {fn.name!r}") for fn in proto.functions]
    while graphs:
        gp, where = graphs.pop()
        yield gp, where
        for index, node in enumerate(gp.node):
            for attr in node.attribute:
                graphs += [(sub, f"a subgraph of node {_node_label(node, index)!r} of {where}")
                           for sub in _attr_graphs(attr)]


# numpy holds at most 64 dimensions. A rank beyond that can never run, and ONNX's shape inference copies a
# rank-N type into every value downstream: a 2 MB Reshape target of 2**18 elements grew loading by 471 MB.
MAX_RANK = 64


def check_ranks(proto: ModelProto, model: str) -> None:
    """Refuse tensors of rank above MAX_RANK before shape inference sees them: declared types, initializers,
    and the outputs of Reshape/ConstantOfShape/Expand/Unsqueeze whose target comes from a constant."""

    def refuse(rank: int, what: str) -> None:
        raise ModelLoadError(f"model '{model}': {what} has rank {rank}; tensors of rank above {MAX_RANK} are "
                             "not supported (numpy's limit)")

    for gp, where in _all_graphs(proto):
        for vi in [*gp.input, *gp.output, *gp.value_info]:
            tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else vi.type.sequence_type.elem_type.tensor_type
            if len(tt.shape.dim) > MAX_RANK:
                refuse(len(tt.shape.dim), f"value '{vi.name}' of {where}")
        lengths: dict[str, int] = {}  # constant name -> its element count
        for init in gp.initializer:
            if len(init.dims) > MAX_RANK:
                refuse(len(init.dims), f"initializer '{init.name}' of {where}")
            lengths[init.name] = math.prod(max(int(d), 0) for d in init.dims)
        for index, node in enumerate(gp.node):
            if node.op_type == "Constant" and not node.domain and node.output:
                for attr in node.attribute:
                    if attr.name == "value":
                        lengths[node.output[0]] = math.prod(max(int(d), 0) for d in attr.t.dims)
                    elif attr.name == "value_ints":
                        lengths[node.output[0]] = len(attr.ints)
            label = f"the output of node {_node_label(node, index)!r} ({node.op_type}) of {where}"
            # Ops whose output rank is the element count of one of their inputs (their specs' rank_from_input).
            position = spec_of(node.op_type).rank_from_input
            if position is not None and len(node.input) > position:
                rank = lengths.get(node.input[position], 0)
                if rank > MAX_RANK:
                    refuse(rank, label)
            if node.op_type == "Unsqueeze":
                axes = [len(a.ints) for a in node.attribute if a.name == "axes"]
                axes += [lengths.get(node.input[1], 0)] if len(node.input) > 1 else []
                if axes and max(axes) > MAX_RANK:
                    refuse(max(axes), label)


def _field(message: Any, name: str) -> int:
    return message.DESCRIPTOR.fields_by_name[name].number


# The few fields of the wire format that lead from a model to its nested subgraphs: kind -> {field: kind}.
_WIRE_CHILDREN = {
    "model": {_field(ModelProto, "graph"): "graph", _field(ModelProto, "functions"): "function"},
    "graph": {_field(GraphProto, "node"): "node"},
    "function": {_field(onnx.FunctionProto, "node"): "node"},
    "node": {_field(NodeProto, "attribute"): "attr"},
    "attr": {_field(AttributeProto, "g"): "graph", _field(AttributeProto, "graphs"): "graph"},
}
_WIRE_NODE_NAME, _WIRE_NODE_OP = _field(NodeProto, "name"), _field(NodeProto, "op_type")


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int] | None:
    value, shift = 0, 0
    while pos < end and shift < 70:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    return None


def wire_too_deep(data: bytes) -> tuple[str, ...] | None:
    """Where protobuf refused the bytes: the node path of subgraphs nested over MAX_SUBGRAPH_DEPTH, found by
    scanning the wire format iteratively (protobuf's parser stops at 100 nested messages); None if none."""
    # frame: kind, start, end, subgraph depth, node path, index of a node in its graph
    stack: list[tuple[str, int, int, int, tuple[str, ...], int]] = [("model", 0, len(data), 0, (), 0)]
    while stack:
        kind, pos, end, depth, path, index = stack.pop()
        children: list[tuple[str, int, int]] = []
        name, op = "", ""
        while pos < end:
            key = _varint(data, pos, end)
            if key is None:
                break
            (field, wire), pos = divmod(key[0], 8), key[1]
            if wire == 0:
                skipped = _varint(data, pos, end)
                if skipped is None:
                    break
                pos = skipped[1]
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            elif wire == 2:
                size = _varint(data, pos, end)
                if size is None or size[1] + size[0] > end:
                    break
                start, pos = size[1], size[1] + size[0]
                if field in _WIRE_CHILDREN.get(kind, {}):
                    children.append((_WIRE_CHILDREN[kind][field], start, pos))
                elif kind == "node" and field in (_WIRE_NODE_NAME, _WIRE_NODE_OP):
                    text = data[start:pos].decode("utf-8", errors="replace")
                    name, op = (text, op) if field == _WIRE_NODE_NAME else (name, text)
            else:
                break  # groups are not part of ONNX: stop scanning this message
        if kind == "node":
            path = (*path, name or f"{op}_{index}")
        for i, (child, start, stop) in enumerate(children):
            inner = depth + 1 if kind == "attr" else depth
            if inner > MAX_SUBGRAPH_DEPTH:
                return path
            stack.append((child, start, stop, inner, path, i))
    return None


class _Scope:
    """One graph under check: the names it defines, which node writes each, where it sits in the model."""

    def __init__(self, gp: GraphProto, label: str, parent: _Scope | None, owner: int,
                 locator: tuple[tuple[int, int, int], ...]) -> None:
        self.gp, self.label, self.parent, self.owner, self.locator = gp, label, parent, owner, locator
        self.defined: set[str] = set()  # graph inputs and initializers
        self.producers: dict[str, int] = {}  # tensor -> index of the node that writes it
        self.captured: dict[int, set[str]] = {}  # node index -> outer names its subgraphs read

    def visible(self, name: str) -> bool:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.defined or name in scope.producers:
                return True
            scope = scope.parent
        return False


def check_graphs(proto: ModelProto, model: str) -> list[tuple[tuple[tuple[int, int, int], ...], list[int]]]:
    """Validate every graph as ONNX's checker would; returns (locator, order) for each graph whose nodes
    must be reordered to run in topological order (empty when every graph already is)."""
    scopes: list[_Scope] = []
    stack = [_Scope(proto.graph, proto.graph.name or model, None, -1, ())]
    while stack:  # parents are listed before their subgraphs
        scope = stack.pop()
        scopes.append(scope)
        _define(scope, model)
        for index, node in enumerate(scope.gp.node):
            for a, attr in enumerate(node.attribute):
                if attr.type not in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
                    continue
                subs = [(-1, attr.g)] if attr.type == AttributeProto.GRAPH else list(enumerate(attr.graphs))
                for g, sub in subs:
                    label = f"{scope.label}/{_node_label(node, index)}.{attr.name}"
                    stack.append(_Scope(sub, label, scope, index, (*scope.locator, (index, a, g))))
    for scope in reversed(scopes):  # subgraphs before their parents: what each node captures
        local = scope.defined | scope.producers.keys()
        free: set[str] = set()
        for index, node in enumerate(scope.gp.node):
            free.update(n for n in node.input if n and n not in local)
            free.update(scope.captured.get(index, set()) - local)
        free.update(o.name for o in scope.gp.output if o.name not in local)
        if scope.parent is not None:
            scope.parent.captured.setdefault(scope.owner, set()).update(free)
    reorders = []
    for scope in scopes:
        order = _topological_order(scope, model)
        if order != list(range(len(order))):
            reorders.append((scope.locator, order))
    return reorders


def _define(scope: _Scope, model: str) -> None:
    """Collect a graph's names, refusing a second producer of a tensor and reads of unknown tensors."""
    gp, where = scope.gp, f"graph '{scope.label}'"
    inputs = {vi.name for vi in gp.input if vi.name}
    initializers = {t.name for t in gp.initializer} | {s.values.name for s in gp.sparse_initializer}
    scope.defined = inputs | initializers
    for index, node in enumerate(gp.node):
        for out in node.output:
            if not out:
                continue
            if out in scope.producers:
                first = scope.producers[out]
                other = gp.node[first]
                raise ModelLoadError(
                    f"model '{model}': nodes '{_node_label(other, first)}' ({other.op_type}) and "
                    f"'{_node_label(node, index)}' ({node.op_type}) in {where} both write tensor '{out}'; "
                    "a tensor must have exactly one producer"
                )
            if out in scope.defined:
                what = "an initializer" if out in initializers else "a graph input"
                raise ModelLoadError(
                    f"model '{model}': node '{_node_label(node, index)}' ({node.op_type}) in {where} writes "
                    f"tensor '{out}', which is {what} of that graph"
                )
            scope.producers[out] = index
    scoped = " or an enclosing" if scope.parent is not None else ""
    for index, node in enumerate(gp.node):
        for name in node.input:
            if name and not scope.visible(name):
                raise ModelLoadError(
                    f"model '{model}': node '{_node_label(node, index)}' ({node.op_type}) in {where} reads "
                    f"tensor '{name}', which no node, graph input or initializer of this{scoped} graph produces"
                )
    for out in gp.output:
        if not out.name or not scope.visible(out.name):
            raise ModelLoadError(
                f"model '{model}': output '{out.name}' of {where} is produced by no node, graph input or "
                f"initializer of this{scoped} graph"
            )


def _topological_order(scope: _Scope, model: str) -> list[int]:
    """Kahn's algorithm over a graph's nodes, taking the earliest ready node first, so that a valid given
    order comes back unchanged; a cycle is refused, naming its nodes and tensors."""
    nodes = scope.gp.node
    count = len(nodes)
    needs: list[dict[int, str]] = []  # node -> {producer node: a tensor it reads from it}
    users: list[list[int]] = [[] for _ in range(count)]
    for index, node in enumerate(nodes):
        deps: dict[int, str] = {}
        for name in [*node.input, *sorted(scope.captured.get(index, ()))]:
            producer = scope.producers.get(name) if name else None
            if producer is not None and producer not in deps:
                deps[producer] = name
                users[producer].append(index)
        needs.append(deps)
    waiting = [len(d) for d in needs]
    ready = [i for i in range(count) if not waiting[i]]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for user in users[index]:
            waiting[user] -= 1
            if not waiting[user]:
                heapq.heappush(ready, user)
    if len(order) == count:
        return order
    # Every node left waits on another node left: walk back along such waits until one repeats.
    left = set(range(count)) - set(order)
    walk, seen, at = [], {}, min(left)
    while at not in seen:
        seen[at] = len(walk)
        walk.append(at)
        at = next(p for p in needs[at] if p in left)
    cycle = walk[seen[at]:][::-1]  # producers before their readers
    first = cycle.index(min(cycle))
    cycle = cycle[first:] + cycle[:first]  # from the node given first
    names = " -> ".join(f"'{_node_label(nodes[i], i)}'" for i in [*cycle, cycle[0]])
    tensors = ", ".join(f"'{needs[cycle[(k + 1) % len(cycle)]][i]}'" for k, i in enumerate(cycle))
    raise ModelLoadError(
        f"model '{model}': nodes {names} in graph '{scope.label}' form a cycle (through tensors {tensors})"
    )


def apply_orders(proto: ModelProto, reorders: list[tuple[tuple[tuple[int, int, int], ...], list[int]]]) -> None:
    """Reorder the nodes of the located graphs in place, subgraphs first (their locators use their
    parents' original node indices)."""
    for locator, order in sorted(reorders, key=lambda r: -len(r[0])):
        gp = proto.graph
        for node_index, attr_index, graph_index in locator:
            attr = gp.node[node_index].attribute[attr_index]
            gp = attr.g if graph_index < 0 else attr.graphs[graph_index]
        copies = []
        for index in order:
            node = NodeProto()
            node.CopyFrom(gp.node[index])
            copies.append(node)
        del gp.node[:]
        gp.node.extend(copies)
