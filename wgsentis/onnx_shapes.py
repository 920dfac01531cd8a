"""Shape inference for the importer: ONNX's own, with its data propagation bounded.

ONNX's data propagation (``infer_shapes(data_prop=True)``) evaluates the small integer computations that
exports do on shapes (Shape -> Gather -> Concat -> Reshape), so that Reshape targets and the like resolve.
It holds each value it evaluates as a list of dimensions (about 80 bytes each), and it builds that list for
any rank-1 value of known length that a propagating node (Add, Cast, Concat, Gather, Slice, Size, ...)
reads, whatever the length: ConstantOfShape([2**40]) feeding an Add, a graph input declared [2**40], a
Loop body's state all make it allocate until the process dies; Concat of one [65536] input 64 times holds
4M dimensions. So inference runs first without data propagation, and from those types an upper bound on
what propagation would hold is worked out for every value a propagating node reads: the length of a
rank-1 value that shape inference knows, the sum of its inputs' bounds for a propagating node's output,
unbounded where the length is not known yet (propagation itself may resolve it to anything).

Propagation then runs on a copy of the model in which each value bounded above ``MAX_PROPAGATED_LENGTH``
(or not bounded at all) is *isolated*: the propagating nodes that read it read a stand-in instead, a graph
input of its type with the length made unknown, which propagation cannot expand. The types that run gives
may bound a value that was unbounded before (propagation resolved its length): it is released, and the run
repeats until none is. A last run gives the types: values still isolated are read through ``Identity``
stand-ins, which pass their types (symbols included) on to their readers as a plain run would, with no
data and, as the run before showed, no known length to expand; those of a known length above the bound
are read through graph inputs whose symbolic length is replaced by that length in the results. A model
whose total passes ``PROPAGATION_BUDGET`` even so keeps the types inferred without propagation; a model
with nothing to isolate gets exactly what ``infer_shapes(data_prop=True)`` gives.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, TypeProto

# The longest rank-1 value data propagation may expand (a shape vector is a handful of elements), and the
# most elements it may hold over the whole model (about 80 MB).
MAX_PROPAGATED_LENGTH = 1 << 16
PROPAGATION_BUDGET = 1 << 20
# Runs that may release isolated values before the model keeps the types inferred without propagation.
MAX_ISOLATION_ROUNDS = 4

Locator = tuple[tuple[int, int, int], ...]  # (node, attribute, graph or -1) steps from the main graph
Key = tuple[Locator, str]  # a value: the graph that defines it, its name
Reader = tuple[Locator, int, int]  # a propagating node's input: (graph, node index, input index)


def infer_types(proto: ModelProto) -> dict[str, TypeProto]:
    """Types of the main graph's values (inputs, outputs, value_info, initializers) from ONNX's shape inference
    with bounded data propagation; the declared types where inference fails (it is best effort)."""
    try:
        plain = _infer(proto, data_prop=False)
    except Exception:
        return _types_of(proto)
    known: dict[Key, TypeProto] = {}  # what runs learned of isolated values' types
    previous: dict[Key, bytes] = {}  # the stand-ins' types in the run before, symbol names aside
    for _ in range(MAX_ISOLATION_ROUNDS + 1):
        plan = _plan(plain, known)
        if plan is None:
            return _types_of(plain)
        if not plan.isolated:
            try:
                return _types_of(_infer(proto, data_prop=True))
            except Exception:
                return _types_of(plain)
        # The last run: nothing isolated has an unknown length that a run could learn, or the run before
        # released nothing and learned nothing (its stand-ins had the types their values got, symbol names
        # aside, so Identity stand-ins pass on no dimension that run did not see, and none is long).
        now = {key: _signature(tp) for key, (tp, _) in plan.isolated.items()}
        last = now == previous or all(_length(tp) < math.inf for tp, _ in plan.isolated.values())
        copy, stand_ins, lengths = _isolate(proto, plan, last)
        try:
            inferred = _infer(copy, data_prop=True)
        except Exception:
            return _types_of(plain)
        if last:
            types = _types_of(inferred)
            for name in stand_ins:
                types.pop(name, None)
            for tp in types.values():
                _substitute(tp, lengths)
            return types
        found = {home: _typed(_graph_at(inferred, home)) for home, _ in plan.isolated}
        known.update({(home, name): found[home][name] for home, name in plan.isolated if name in found[home]})
        previous = now
    return _types_of(plain)


def _infer(proto: ModelProto, data_prop: bool) -> ModelProto:
    return onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=data_prop)


def _types_of(inferred: ModelProto) -> dict[str, TypeProto]:
    """The main graph's types: value_info, inputs, outputs, then initializers not declared otherwise."""
    gp = inferred.graph
    types = {vi.name: vi.type for vi in list(gp.value_info) + list(gp.input) + list(gp.output)}
    for init in gp.initializer:
        if init.name not in types:
            types[init.name] = _initializer_type(init)
    return types


def _initializer_type(init: TensorProto) -> TypeProto:
    tp = TypeProto()
    tp.tensor_type.elem_type = init.data_type
    for d in init.dims:
        tp.tensor_type.shape.dim.add().dim_value = d
    return tp


def _typed(gp: GraphProto) -> dict[str, TypeProto]:
    return {vi.name: vi.type for vi in list(gp.value_info) + list(gp.input) + list(gp.output)
            if vi.HasField("type")}


def _length(tp: TypeProto | None) -> float:
    """The most elements data propagation builds for a value of this type when it has no data for it: the
    length of a rank-1 tensor, nothing for other ranks and non-tensors, inf where the rank or length is
    unknown (propagation may learn it)."""
    if tp is None or not tp.WhichOneof("value"):
        return math.inf
    if tp.WhichOneof("value") != "tensor_type":
        return 0
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return math.inf
    if len(tt.shape.dim) != 1:
        return 0
    dim = tt.shape.dim[0]
    return dim.dim_value if dim.HasField("dim_value") and dim.dim_value >= 0 else math.inf


@dataclass
class _Scope:
    """A graph being planned: its types, and the bounds that are not its values' rank-1 lengths."""

    loc: Locator
    gp: GraphProto
    types: dict[str, TypeProto]
    bounds: dict[str, float]  # initializers (their data is read) and propagating nodes' outputs (what they made)
    initializers: dict[str, TensorProto] = field(default_factory=dict)
    defined: set[str] | None = None  # every name the graph defines, gathered when an untyped value is read


@dataclass
class _Plan:
    """The values to isolate: (defining graph, name) -> (type, the propagating inputs that read it)."""

    isolated: dict[Key, tuple[TypeProto | None, list[Reader]]] = field(default_factory=dict)


def _plan(plain: ModelProto, known: dict[Key, TypeProto]) -> _Plan | None:
    """Bound what data propagation would hold for every value a propagating node reads, from the types of
    ``plain`` (inferred without propagation) and ``known``: the values to isolate, or None when even with
    them isolated the model's total passes PROPAGATION_BUDGET. Only the nodes inference walks are planned."""
    opsets = {("" if e.domain in ("", "ai.onnx") else e.domain): e.version for e in plain.opset_import}
    local_functions = {(f.domain, f.name) for f in plain.functions}
    schemas: dict[tuple[str, str], tuple[bool, bool]] = {}
    built: set[Key] = set()  # values counted already: propagation builds a value's elements once
    plan = _Plan()
    total = 0.0
    stack: list[tuple[GraphProto, Locator, list[_Scope]]] = [(plain.graph, (), [])]
    while stack:  # parents before their subgraphs, so what a subgraph reads from outside is planned
        gp, loc, outer = stack.pop()
        scope = _Scope(loc, gp, _typed(gp), {})
        scope.types.update({name: tp for (home, name), tp in known.items() if home == loc})
        for init in gp.initializer:  # its data is read as it is: integers up to rank 1, nothing else
            integer = init.data_type in (TensorProto.INT32, TensorProto.INT64)
            scope.bounds[init.name] = init.dims[0] if integer and len(init.dims) == 1 else 0
            scope.initializers[init.name] = init
        chain = [*outer, scope]
        for n, node in enumerate(gp.node):
            domain = "" if node.domain in ("", "ai.onnx") else node.domain
            if (node.op_type, domain) not in schemas:
                schemas[node.op_type, domain] = _schema_facts(node, domain, opsets.get(domain, 1), local_functions)
            reads, nests = schemas[node.op_type, domain]
            if nests:
                for a, attr in enumerate(node.attribute):
                    subs = ([(-1, attr.g)] if attr.HasField("g") else []) + list(enumerate(attr.graphs))
                    stack.extend((sub, (*loc, (n, a, g)), chain) for g, sub in subs)
            if not reads:
                continue
            made = 0.0  # a bound on what the node's propagation builds: the sum of what it reads
            for i, name in enumerate(node.input):
                home, tp, bound = _find(chain, name) if name else (None, None, 0.0)
                if home is None:
                    continue
                if bound > MAX_PROPAGATED_LENGTH:
                    plan.isolated.setdefault((home, name), (tp, []))[1].append((loc, n, i))
                    continue
                made += bound
                if (home, name) not in built:
                    built.add((home, name))
                    total += bound
            total += made
            if total > PROPAGATION_BUDGET:
                return None
            for out in node.output:
                if out:
                    scope.bounds[out] = max(made, _length(scope.types.get(out)))
    return plan


def _schema_facts(node: NodeProto, domain: str, opset: int, local_functions: set[tuple[str, str]]
                  ) -> tuple[bool, bool]:
    """(whether data propagation reads the node's inputs' data, whether inference walks its subgraphs): its
    schema has a propagation function (Shape's reads only its input's rank) or inference expands a function
    body that may; its schema takes graph attributes. Nodes without a schema are not inferred, except calls
    of model-local functions, whose bodies are."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, domain)
    except onnx.defs.SchemaError:
        return (node.domain, node.op_type) in local_functions, False
    body = schema.has_function or schema.has_context_dependent_function
    reads = node.op_type != "Shape" and (
        schema.has_data_propagation_function or (body and not schema.has_type_and_shape_inference_function))
    nests = any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in schema.attributes.values())
    return reads, nests


def _find(chain: list[_Scope], name: str) -> tuple[Locator | None, TypeProto | None, float]:
    """Where a name read in the innermost graph of ``chain`` is defined, its type and its bound (inf for an
    untyped value); (None, None, 0) for a name that no graph defines."""
    for scope in reversed(chain):
        if name in scope.bounds:
            if name not in scope.types and name in scope.initializers:
                scope.types[name] = _initializer_type(scope.initializers[name])
            return scope.loc, scope.types.get(name), scope.bounds[name]
        if name in scope.types:
            return scope.loc, scope.types[name], _length(scope.types[name])
    for scope in reversed(chain):
        if scope.defined is None:
            scope.defined = _defined(scope.gp)
        if name in scope.defined:
            return scope.loc, None, math.inf
    return None, None, 0.0


def _defined(gp: GraphProto) -> set[str]:
    names = {vi.name for vi in gp.input} | {i.name for i in gp.initializer}
    names.update(out for node in gp.node for out in node.output)
    return names


def _every_graph(model: ModelProto) -> Iterator[GraphProto]:
    stack = [model.graph]
    while stack:
        gp = stack.pop()
        yield gp
        for node in gp.node:
            for attr in node.attribute:
                stack.extend(([attr.g] if attr.HasField("g") else []) + list(attr.graphs))


def _graph_at(model: ModelProto, loc: Locator) -> GraphProto:
    gp = model.graph
    for node, attr, graph in loc:
        holder = gp.node[node].attribute[attr]
        gp = holder.g if graph < 0 else holder.graphs[graph]
    return gp


def _fresh(taken: set[str], stem: str) -> str:
    n = 0
    while f"{stem}{n}" in taken:
        n += 1
    taken.add(f"{stem}{n}")
    return f"{stem}{n}"


def _isolate(proto: ModelProto, plan: _Plan, last: bool) -> tuple[ModelProto, set[str], dict[str, int]]:
    """A copy of ``proto`` whose propagating nodes read each isolated value through a stand-in; returns it,
    the stand-ins' names and the symbols standing for lengths known above the bound (symbol -> length)."""
    copy = ModelProto()
    copy.CopyFrom(proto)
    names: set[str] = set()
    symbols: set[str] = set()
    for gp in _every_graph(copy):
        names |= _defined(gp)
        for vi in list(gp.input) + list(gp.output) + list(gp.value_info):
            _collect_symbols(vi.type, symbols)
    stand_ins: set[str] = set()
    lengths: dict[str, int] = {}
    through_identity: dict[Locator, dict[str, str]] = {}  # graph -> {value: its Identity stand-in}
    for (home, name), (tp, readers) in plan.isolated.items():
        stand_in = _fresh(names, f"{name}__isolated")
        stand_ins.add(stand_in)
        length = _length(tp)
        if last and length == math.inf:
            through_identity.setdefault(home, {})[name] = stand_in
        else:
            vi = copy.graph.input.add()
            vi.name = stand_in
            if tp is not None:
                vi.type.CopyFrom(tp)
                shape = tp.tensor_type.shape if tp.HasField("tensor_type") else None
                if shape is not None and tp.tensor_type.HasField("shape") and len(shape.dim) == 1:
                    symbol = _fresh(symbols, "isolated_length_")  # the length unknown here, known in the results
                    if length < math.inf:
                        lengths[symbol] = int(length)
                    vi.type.tensor_type.shape.dim[0].dim_param = symbol
        for loc, n, i in readers:
            _graph_at(copy, loc).node[n].input[i] = stand_in
    for home in sorted(through_identity, key=len, reverse=True):  # subgraphs first: their locators stay valid
        gp = _graph_at(copy, home)
        wanted = through_identity[home]
        given = {vi.name for vi in gp.input} | {i.name for i in gp.initializer}
        nodes = [onnx.helper.make_node("Identity", [v], [s]) for v, s in wanted.items() if v in given]
        for node in gp.node:
            nodes.append(NodeProto())
            nodes[-1].CopyFrom(node)
            nodes.extend(onnx.helper.make_node("Identity", [o], [wanted[o]]) for o in node.output if o in wanted)
        del gp.node[:]
        gp.node.extend(nodes)
    return copy, stand_ins, lengths


def _signature(tp: TypeProto | None) -> bytes:
    """A type's bytes with its symbols' names cleared: what it says of ranks, sizes and element types."""
    if tp is None:
        return b""
    copy = TypeProto()
    copy.CopyFrom(tp)
    stack = [copy]
    while stack:
        t = stack.pop()
        which = t.WhichOneof("value")
        if which in ("tensor_type", "sparse_tensor_type"):
            for d in getattr(t, which).shape.dim:
                d.ClearField("dim_param")
        elif which in ("sequence_type", "optional_type"):
            stack.append(getattr(t, which).elem_type)
        elif which == "map_type":
            stack.append(t.map_type.value_type)
    return copy.SerializeToString(deterministic=True)


def _collect_symbols(tp: TypeProto | None, into: set[str]) -> None:
    while tp is not None:
        which = tp.WhichOneof("value")
        if which in ("tensor_type", "sparse_tensor_type"):
            into.update(d.dim_param for d in getattr(tp, which).shape.dim if d.dim_param)
            return
        tp = (tp.sequence_type.elem_type if which == "sequence_type"
              else tp.optional_type.elem_type if which == "optional_type" else None)


def _substitute(tp: TypeProto, lengths: dict[str, int]) -> None:
    """Replace the stand-ins' length symbols by the lengths they stand for."""
    while tp is not None:
        which = tp.WhichOneof("value")
        if which in ("tensor_type", "sparse_tensor_type"):
            for d in getattr(tp, which).shape.dim:
                if d.dim_param in lengths:
                    d.dim_value = lengths[d.dim_param]
            return
        tp = (tp.sequence_type.elem_type if which == "sequence_type"
              else tp.optional_type.elem_type if which == "optional_type" else None)


# Initializers up to this many elements keep their values in the copy ``infer_types_with`` infers on (data
# propagation reads shape constants); larger ones become typed graph inputs, so no weight is copied.
LIGHT_COPY_ELEMENTS = 1 << 12


def infer_types_with(proto: ModelProto, declared: list[onnx.ValueInfoProto]) -> dict[str, TypeProto]:
    """``infer_types`` with ``declared`` added to the main graph's value_info (types found elsewhere: the ops' shape
    rules), on a copy of ``proto`` that holds its nodes and small initializers but not its weights; ``proto`` is
    not modified."""
    light = ModelProto()
    light.ir_version = max(proto.ir_version, 4)  # (initializers given as inputs need IR 4)
    light.opset_import.extend(proto.opset_import)
    graph = light.graph
    graph.name = proto.graph.name
    graph.node.extend(proto.graph.node)
    graph.input.extend(proto.graph.input)
    graph.output.extend(proto.graph.output)
    graph.value_info.extend(proto.graph.value_info)
    graph.value_info.extend(declared)
    inputs = {vi.name for vi in proto.graph.input}
    for init in proto.graph.initializer:
        if math.prod(init.dims) <= LIGHT_COPY_ELEMENTS and init.data_location != TensorProto.EXTERNAL:
            graph.initializer.append(init)
        elif init.name not in inputs:
            graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    graph.sparse_initializer.extend(proto.graph.sparse_initializer)
    return infer_types(light)
