"""``prune()``: write a pruned copy of an ONNX model, from a sparsity plan (Sparsify-style recipes).

A plan is one level for every prunable layer, a dict ``{layer or node name: level}``, or a level with a
sensitivity budget from a loss profile (``{"level": 0.8, "loss_profile": ..., "keep_dense": 0.2}``: the
most sensitive ``keep_dense`` fraction of the prunable layers stays dense). Prunable layers are Conv,
ConvTranspose, Gemm and MatMul with a constant float weight (``flops.prunable_weight``).

Unstructured pruning zeroes the smallest-magnitude weight entries (``pruning.prune``); every shape stays.
Structured pruning removes whole output channels (the filters of lowest L2 norm) and follows each channel
to every reader: BatchNormalization parameters, elementwise ops and their per-channel constants, pools,
depthwise convs, Concat (offsets), Flatten/Reshape into Gemm/MatMul (the channel's block of columns) and
the readers' weights. Tensors joined elementwise (residual Add, Sum, SE Mul) must keep the *same*
channels, so their producers form one group that drops one channel set, chosen by the members' summed
normalized norms. Whatever cannot be traced safely (a graph output, Shape, Slice, a reshape that mixes
channels, a grouped conv, a subgraph capture, an unknown op) leaves the producers it reaches dense, so
the written model always has the original graph outputs' shapes. Result: ``PruneResult``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, ModelProto, NodeProto, TensorProto, helper, numpy_helper

from wgsentis.errors import InputError, ModelLoadError, PruneError
from wgsentis.ir import Graph, Layer
from wgsentis.model import Model
from wgsentis.profiler.flops import prunable_weight
from wgsentis.profiler.pruning import prune as magnitude_prune

PROTOBUF_LIMIT = 2**31 - 1  # a ModelProto over this cannot be serialized in one piece: external data then

# Shape-preserving, per-element ops: a channel of the output depends on the same channel of input 0 only.
UNARY = {"Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Gelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
         "Softplus", "Softsign", "Mish", "Clip", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Erf",
         "Floor", "Ceil", "Round", "Sign", "Identity", "Dropout", "Cast", "ThresholdedRelu", "Sin", "Cos",
         "Not", "IsNaN", "IsInf", "Shrink"}
BROADCAST = {"Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "Mean", "Pow", "PRelu", "Where", "Equal",
             "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Mod", "BitShift"}
POOLS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool"}
RELAYOUT = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}
REDUCE = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceL1", "ReduceL2", "ReduceProd",
          "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}


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


# -- the model as a ModelProto ----------------------------------------------------------------------------
def _proto_of(source: Any) -> ModelProto:
    """A private copy of the model as a ModelProto with every tensor in memory."""
    from wgsentis.onnx_import import parse_bytes, load_model

    if isinstance(source, Model):
        return _export(source)
    if isinstance(source, ModelProto):
        proto = ModelProto()
        proto.CopyFrom(source)
        base: str | None = None
    elif isinstance(source, bytes | bytearray | memoryview):
        proto, base = parse_bytes(bytes(source), "<bytes>"), None
    elif isinstance(source, str | os.PathLike):
        path = Path(source)
        try:
            if not path.is_file():
                raise ModelLoadError(f"model file '{path}' does not exist or is not a file")
            data = path.read_bytes()
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"model file '{path}' cannot be read: {exc}") from None
        proto, base = parse_bytes(data, str(path)), str(path.parent)
    else:
        raise InputError(f"prune(model_or_path=...): expected a path, bytes, onnx.ModelProto or wgsentis Model, "
                         f"got {type(source).__name__}")
    external = [t for t in proto.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    if external:  # read through the importer: external data only from inside the model folder, checked
        model = load_model(source if base else proto, base_dir=base, optimize=False)
        for t in external:
            t.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(model.imported.constants[t.name]), t.name))
    return proto


def _export(model: Model) -> ModelProto:
    """The imported graph of a wgsentis Model, back as a ModelProto (the importer keeps no protobuf)."""
    try:
        graph = _export_graph(model.imported, model.opsets)
    except (TypeError, ValueError, KeyError) as exc:
        raise InputError(f"prune(model_or_path=...): model '{model.name}' cannot be written back as ONNX "
                         f"({exc}); pass its file or ModelProto instead") from None
    opsets = [helper.make_opsetid(d, v) for d, v in model.opsets.items()]
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="wgsentis")
    # The oldest IR version the opsets allow (at least 7): runtimes lag behind onnx's newest.
    proto.ir_version = min(onnx.IR_VERSION, max(helper.find_min_ir_version_for(opsets, ignore_unknown=True), 7))
    if model.metadata:
        helper.set_model_props(proto, dict(model.metadata))
    return proto


def _value_info(info: Any) -> onnx.ValueInfoProto:
    if info.kind != "tensor" or info.dtype is None:
        return helper.make_empty_tensor_value_info(info.name) if info.kind == "tensor" else \
            helper.make_value_info(info.name, onnx.TypeProto())
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype))
    shape = None if info.shape is None else [d if isinstance(d, int | str) else None for d in info.shape]
    return helper.make_tensor_value_info(info.name, elem, shape)


def _export_graph(graph: Graph, opsets: dict[str, int]) -> onnx.GraphProto:
    nodes = []
    for layer in graph.layers:
        attrs = []
        for key, value in layer.attrs.items():
            if isinstance(value, np.ndarray):
                attrs.append(helper.make_attribute(key, numpy_helper.from_array(value)))
            elif isinstance(value, Graph):
                attrs.append(helper.make_attribute(key, _export_graph(value, opsets)))
            elif isinstance(value, list) and value and isinstance(value[0], np.ndarray):
                attrs.append(helper.make_attribute(key, [numpy_helper.from_array(v) for v in value]))
            elif isinstance(value, list) and value and isinstance(value[0], Graph):
                attrs.append(helper.make_attribute(key, [_export_graph(v, opsets) for v in value]))
            elif isinstance(value, list) and not value:  # an empty list has no type of its own: ask the schema
                schema = onnx.defs.get_schema(layer.op_type, layer.opset or opsets.get(layer.domain, 1),
                                              layer.domain)
                attrs.append(helper.make_attribute(key, value, attr_type=schema.attributes[key].type))
            else:
                attrs.append(helper.make_attribute(key, value))
        node = helper.make_node(layer.op_type, layer.inputs, layer.outputs, name=layer.name, domain=layer.domain)
        node.attribute.extend(attrs)
        nodes.append(node)
    inits = [numpy_helper.from_array(np.ascontiguousarray(v), n) for n, v in graph.constants.items()]
    return helper.make_graph(nodes, graph.name, [_value_info(t) for t in graph.inputs],
                             [_value_info(t) for t in graph.outputs], inits)


# -- constants: initializers and Constant nodes, read and written in place ---------------------------------
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
            for name in [*node.input, *_captured(node)]:
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


def _captured(node: NodeProto) -> set[str]:
    """Outer names read inside a node's subgraphs."""
    names: set[str] = set()
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            local = {i.name for i in g.input} | {t.name for t in g.initializer}
            local |= {o for n in g.node for o in n.output}
            for n in g.node:
                names |= {i for i in [*n.input, *_captured(n)] if i and i not in local}
            names |= {o.name for o in g.output if o.name not in local}
    return names


FOLDABLE = {"Reshape", "Unsqueeze", "Squeeze", "Identity", "Cast", "Flatten", "Transpose", "Mul", "Add", "Sub",
            "Div", "Sqrt", "Neg", "Concat"}


def _fold_constants(proto: ModelProto) -> int:
    """Replace each node in FOLDABLE whose inputs are all constants by a Constant node of its value (same
    name, same output): exporters often reshape a stored bias or weight in the graph, which would hide it
    from pruning. Returns how many nodes were folded."""
    from onnx.reference import ReferenceEvaluator

    consts = Constants(proto)
    opset = _opset(proto)
    folded = 0
    for node in proto.graph.node:
        if node.op_type not in FOLDABLE or node.domain not in ("", "ai.onnx") or len(node.output) != 1 \
                or not node.input or _captured(node):
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


def _node_names(proto: ModelProto) -> list[str]:
    """The layer name of each top-level node, as the importer gives it (what profiles report)."""
    used: set[str] = set()
    fresh = 0
    names = []
    for i, node in enumerate(proto.graph.node):
        name = node.name or f"{node.op_type}_{i}"
        if name in used:
            fresh += 1
            name = f"{name}__{fresh}"
        used.add(name)
        names.append(name)
    return names


# -- the plan ---------------------------------------------------------------------------------------------
def _check_level(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating) \
            or not math.isfinite(float(value)) or not 0.0 <= float(value) < 1.0:
        raise InputError(f"prune(plan=...): {where} is {value!r}; a sparsity level must be a number in [0, 1)")
    return float(value)


def _loss_layers(profile: Any) -> list[dict[str, Any]]:
    data = profile
    for attr in ("to_dict", "data"):  # a LossProfile object: its JSON document
        if not isinstance(data, dict) and hasattr(data, attr):
            data = getattr(data, attr)
            data = data() if callable(data) else data
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        raise InputError("prune(plan={'loss_profile': ...}): expected a loss profile (or its dict) with a "
                         f"'layers' list, got {type(profile).__name__}")
    return [e for e in layers if isinstance(e, dict)]


def _levels(plan: Any, prunable: dict[str, tuple[int, str]], names: list[str],
            proto: ModelProto) -> dict[str, float]:
    """Level per prunable layer name (a dict with 'level', 'loss_profile' or 'keep_dense' keys, none of them a
    layer name, is the loss-profile plan)."""
    if isinstance(plan, dict) and ("loss_profile" in plan or "keep_dense" in plan or "level" in plan) \
            and not set(plan) & set(names):
        unknown = set(plan) - {"level", "loss_profile", "keep_dense"}
        if unknown:
            raise InputError(f"prune(plan=...): unknown key(s) {sorted(unknown)} in a loss-profile plan "
                             "(keys: level, loss_profile, keep_dense)")
        if "level" not in plan:
            raise InputError("prune(plan=...): a loss-profile plan needs plan['level']")
        level = _check_level(plan["level"], "plan['level']")
        keep = plan.get("keep_dense", 0.0)
        if isinstance(keep, bool) or not isinstance(keep, int | float) or not 0.0 <= float(keep) <= 1.0:
            raise InputError(f"prune(plan=...): plan['keep_dense'] is {keep!r}; it must be a fraction in [0, 1]")
        if "loss_profile" not in plan:
            raise InputError("prune(plan=...): plan['keep_dense'] needs plan['loss_profile'] to rank the layers")
        by_weight = {w: n for n, (_, w) in prunable.items()}
        scores: dict[str, float] = {}
        for e in _loss_layers(plan["loss_profile"]):
            s = e.get("sensitivity")
            if not isinstance(s, int | float) or isinstance(s, bool) or not math.isfinite(float(s)):
                continue
            name = e.get("name") if e.get("name") in prunable else next(
                (by_weight[w] for w in e.get("weight_names") or [] if w in by_weight), None)
            if name is not None:
                scores[name] = max(scores.get(name, -math.inf), float(s))
        # The most sensitive fraction of all prunable layers stays dense; layers the loss profile did not
        # score are pruned at the level (it measured nothing against them).
        n_keep = min(round(float(keep) * len(prunable)), len(scores))
        dense = set(sorted(scores, key=lambda n: -scores[n])[:n_keep])
        return {n: 0.0 if n in dense else level for n in prunable}
    if isinstance(plan, dict):
        levels = dict.fromkeys(prunable, 0.0)
        by_output = {o: names[i] for i, node in enumerate(proto.graph.node) for o in node.output}
        ops = {names[i]: node.op_type for i, node in enumerate(proto.graph.node)}
        for key, value in plan.items():
            if not isinstance(key, str):
                raise InputError(f"prune(plan=...): layer names must be strings, got {key!r}")
            name = key if key in ops else by_output.get(key, key)
            if name not in ops:
                hint = ", ".join(list(prunable)[:6])
                raise InputError(f"prune(plan=...): no layer or node named '{key}' in the model "
                                 f"(prunable layers include: {hint})")
            if name not in prunable:
                raise InputError(f"prune(plan=...): layer '{key}' ({ops[name]}) has no prunable weight (only Conv, "
                                 "ConvTranspose, Gemm and MatMul with a constant float weight can be pruned)")
            levels[name] = _check_level(value, f"the level of layer '{key}'")
        return levels
    return dict.fromkeys(prunable, _check_level(plan, "the level"))


# -- structured pruning: following channels through the graph ---------------------------------------------
@dataclass(frozen=True)
class Chan:
    """Where a tensor's channels are: along ``axis`` of a ``rank``-D tensor, each channel ``block``
    consecutive entries, in segments of (space id, channels) laid end to end."""

    rank: int
    axis: int
    block: int
    segs: tuple[tuple[int, int], ...]

    @property
    def size(self) -> int:
        return sum(n for _, n in self.segs) * self.block


@dataclass
class Space:
    """One channel set: a producer's output channels (or a fixed set: graph input, untraced producer)."""

    size: int
    node: int | None = None  # the producing node (None: not prunable)
    weight_dim: int = 0


class Tracer:
    """Forward pass over the graph building channel spaces, groups (union-find) and the edits to make."""

    def __init__(self, proto: ModelProto, consts: Constants, levels: dict[str, float], names: list[str]) -> None:
        self.proto, self.consts, self.names = proto, consts, names
        self.levels = levels
        self.spaces: list[Space] = []
        self.parent: list[int] = []
        self.frozen: dict[int, str] = {}  # root -> why its channels must all stay
        self.chan: dict[str, Chan] = {}
        self.slices: list[tuple[int, int, int, Chan]] = []  # (node, input index, dim, chan of that dim)
        self.groups_attr: list[tuple[int, Chan]] = []  # depthwise convs: group = channels kept
        self.reshapes: list[tuple[int, int, Chan]] = []  # (node, output axis, chan out)
        self.shapes = self._shapes()

    def _shapes(self) -> dict[str, list[Any]]:
        try:
            inferred = onnx.shape_inference.infer_shapes(self.proto, data_prop=True)
        except Exception:  # shapes are a help: without them fewer channels can be traced, nothing breaks
            inferred = self.proto
        g = inferred.graph
        out: dict[str, list[Any]] = {}
        for vi in [*g.input, *g.value_info, *g.output]:
            t = vi.type.tensor_type
            if vi.type.HasField("tensor_type") and t.HasField("shape"):
                out[vi.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                for d in t.shape.dim]
        for name, v in self.consts.values.items():
            out.setdefault(name, list(v.shape))
        return out

    def shape(self, name: str) -> list[Any] | None:
        v = self.consts.get(name)
        return list(v.shape) if v is not None else self.shapes.get(name)

    # union-find over spaces
    def new_space(self, size: int, node: int | None = None, dim: int = 0, frozen: str | None = None) -> int:
        self.spaces.append(Space(size, node, dim))
        self.parent.append(len(self.parent))
        if frozen:
            self.frozen[len(self.parent) - 1] = frozen
        return len(self.parent) - 1

    def root(self, s: int) -> int:
        while self.parent[s] != s:
            self.parent[s] = self.parent[self.parent[s]]
            s = self.parent[s]
        return s

    def freeze(self, chan: Chan | None, why: str) -> None:
        if chan is None:
            return
        for s, _ in chan.segs:
            self.frozen.setdefault(self.root(s), why)

    def union(self, a: int, b: int) -> None:
        ra, rb = self.root(a), self.root(b)
        if ra == rb:
            return
        self.parent[rb] = ra
        if rb in self.frozen:
            self.frozen.setdefault(ra, self.frozen.pop(rb))
        if self.spaces[ra].size != self.spaces[rb].size:
            self.frozen.setdefault(ra, "joined elementwise with a tensor of another channel count")

    def output_chan(self, node: NodeProto, chan: Chan) -> None:
        for o in node.output:
            if o:
                self.chan[o] = chan

    # the pass
    def run(self) -> None:
        graph = self.proto.graph
        init_names = set(self.consts.inits)
        for vi in graph.input:
            if vi.name in init_names:
                continue
            shape = self.shapes.get(vi.name)
            if shape and len(shape) >= 2 and isinstance(shape[1], int) and shape[1] > 0:
                self.chan[vi.name] = Chan(len(shape), 1, 1, ((self.new_space(shape[1], frozen="graph input"),
                                                              shape[1]),))
        for i, node in enumerate(graph.node):
            ins = [n for n in [*node.input, *_captured(node)] if n in self.chan]
            if not ins and not self._is_producer(node):
                continue
            marks = (len(self.slices), len(self.groups_attr), len(self.reshapes), len(self.spaces))
            try:
                ok = self.visit(i, node)
            except (ValueError, IndexError, KeyError, TypeError, ZeroDivisionError):
                ok = False  # an unusual attribute or shape: treat like an op we do not know
            if not ok:  # undo what the visit recorded before it gave up, and keep what it reached dense
                del self.slices[marks[0]:], self.groups_attr[marks[1]:], self.reshapes[marks[2]:]
                why = f"reaches {node.op_type} '{self.names[i]}', which cannot follow removed channels"
                for s in range(marks[3], len(self.spaces)):
                    self.frozen.setdefault(self.root(s), why)
                for n in ins:
                    self.freeze(self.chan[n], why)
                for o in node.output:
                    self.chan.pop(o, None)
            if _captured(node) & set(self.chan):
                for n in _captured(node) & set(self.chan):
                    self.freeze(self.chan[n], f"read inside a subgraph of '{self.names[i]}'")
        for out in graph.output:
            if out.name in self.chan:
                self.freeze(self.chan[out.name], "reaches a graph output, whose shape must stay")

    def _is_producer(self, node: NodeProto) -> bool:
        """A Conv, Gemm or MatMul with a constant weight: it may start a channel space."""
        return node.op_type in ("Conv", "Gemm", "MatMul") and len(node.input) > 1 \
            and self.consts.get(node.input[1]) is not None

    def visit(self, i: int, node: NodeProto) -> bool:
        op = node.op_type
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        x = self.chan.get(node.input[0]) if node.input else None
        if op in ("Conv", "Gemm", "MatMul"):
            return self._weighted(i, node, attrs, x)
        if op == "BatchNormalization" or op == "InstanceNormalization":
            if x is None or x.axis != 1 or x.block != 1 or any(n in self.chan for n in node.input[1:]):
                return False
            if len([o for o in node.output if o]) > 1:
                return False  # training-mode outputs
            for k in range(1, len(node.input)):
                v = self.consts.get(node.input[k])
                if v is None or v.shape != (x.size,):
                    return False
                self.slices.append((i, k, 0, x))
            self.output_chan(node, x)
            return True
        if op in UNARY:
            if x is None or any(n in self.chan for n in node.input[1:]):
                return False
            self.output_chan(node, x)
            return True
        if op in BROADCAST:
            return self._broadcast(i, node)
        if op in POOLS:
            if x is None or x.axis != 1 or x.block != 1 or (len(node.output) > 1 and node.output[1]):
                return False
            self.output_chan(node, Chan(x.rank, 1, 1, x.segs))
            return True
        if op == "Concat":
            return self._concat(node, attrs)
        if op in RELAYOUT:
            return self._relayout(i, node, x)
        if op == "Transpose":
            if x is None:
                return False
            perm = attrs.get("perm") or list(reversed(range(x.rank)))
            self.output_chan(node, Chan(x.rank, list(perm).index(x.axis), x.block, x.segs))
            return True
        if op in ("Softmax", "LogSoftmax", "Hardmax"):
            if x is None:
                return False
            opset = _opset(self.proto)
            axis = attrs.get("axis", -1 if opset >= 13 else 1) % x.rank
            if (x.axis >= axis) if opset < 13 else (x.axis == axis):
                return False  # normalizes across the channels
            self.output_chan(node, x)
            return True
        if op in REDUCE:
            return self._reduce(node, attrs, x)
        if op == "Pad":
            return self._pad(node, attrs, x)
        if op in ("Resize", "Upsample"):
            return self._resize(node, attrs, x)
        return False

    def _weighted(self, i: int, node: NodeProto, attrs: dict[str, Any], x: Chan | None) -> bool:
        op = node.op_type
        w = self.consts.get(node.input[1]) if len(node.input) > 1 else None
        if any(n in self.chan for n in node.input[1:]) or w is None:
            return False
        if op == "Conv":
            group = attrs.get("group", 1)
            if group != 1:  # depthwise (one filter per channel) follows its input's channels; others cannot
                if x is None or x.axis != 1 or x.block != 1 or not (group == x.size == w.shape[0]
                                                                      and w.shape[1] == 1):
                    return False
                self.slices.append((i, 1, 0, x))
                if len(node.input) > 2 and node.input[2]:
                    self.slices.append((i, 2, 0, x))
                self.groups_attr.append((i, x))
                self.output_chan(node, x)
                return True
            if x is not None:
                if x.axis != 1 or x.block != 1 or w.shape[1] != x.size:
                    return False
                self.slices.append((i, 1, 1, x))
            rank = x.rank if x is not None else len(self.shape(node.input[0]) or [0] * w.ndim)
            out = self.new_space(w.shape[0], i, 0)
            chan = Chan(rank, 1, 1, ((out, w.shape[0]),))
            self.slices.append((i, 1, 0, chan))
            if len(node.input) > 2 and node.input[2]:
                self.slices.append((i, 2, 0, chan))
            self.output_chan(node, chan)
            return True
        if w.ndim != 2 or w.dtype.kind != "f":
            return False
        if op == "Gemm":
            if attrs.get("transA", 0) and x is not None:
                return False
            in_dim, out_dim = (1, 0) if attrs.get("transB", 0) else (0, 1)
            if x is not None:
                if x.rank != 2 or x.axis != 1 or x.size != w.shape[in_dim]:
                    return False
                self.slices.append((i, 1, in_dim, x))
            chan = Chan(2, 1, 1, ((self.new_space(w.shape[out_dim], i, out_dim), w.shape[out_dim]),))
            self.slices.append((i, 1, out_dim, chan))
            if len(node.input) > 2 and node.input[2]:
                if not self._const_operand(i, 2, chan):
                    return False
            self.output_chan(node, chan)
            return True
        # MatMul x @ W
        if x is not None:
            if x.axis != x.rank - 1 or x.size != w.shape[0]:
                return False
            self.slices.append((i, 1, 0, x))
        rank = x.rank if x is not None else len(self.shape(node.input[0]) or [])
        if rank < 2:
            return False
        chan = Chan(rank, rank - 1, 1, ((self.new_space(w.shape[1], i, 1), w.shape[1]),))
        self.slices.append((i, 1, 1, chan))
        self.output_chan(node, chan)
        return True

    def _const_operand(self, i: int, k: int, chan: Chan, out_rank: int | None = None) -> bool:
        """A constant operand broadcast against ``chan``: sliced along the channel axis where it has one."""
        v = self.consts.get(self.proto.graph.node[i].input[k])
        if v is None:
            return False
        rank = out_rank if out_rank is not None else chan.rank
        pos = chan.axis - (rank - v.ndim)
        if pos < 0 or v.shape[pos] == 1:
            return True
        if v.shape[pos] != chan.size:
            return False
        self.slices.append((i, k, pos, chan))
        return True

    def _broadcast(self, i: int, node: NodeProto) -> bool:
        tracked = [(k, self.chan[n]) for k, n in enumerate(node.input) if n in self.chan]
        shapes = [self.shape(n) for n in node.input]
        if any(s is None for s in shapes):
            return False
        rank = max(len(s) for s in shapes)
        axis = {c.axis + rank - c.rank for _, c in tracked}
        blocks = {c.block for _, c in tracked}
        sizes = {c.size for _, c in tracked}
        if len(axis) != 1 or len(blocks) != 1 or len(sizes) != 1:
            return False
        first = tracked[0][1]
        out = Chan(rank, axis.pop(), first.block, first.segs)
        for _, c in tracked[1:]:  # joined elementwise: the same channels must go on both sides
            if [n for _, n in c.segs] != [n for _, n in first.segs]:
                return False
            for (a, _), (b, _) in zip(first.segs, c.segs, strict=True):
                self.union(a, b)
        for k, n in enumerate(node.input):
            if n in self.chan or not n:
                continue
            if self.consts.get(n) is not None:
                if not self._const_operand(i, k, out, rank):
                    return False
                continue
            pos = out.axis - (rank - len(shapes[k]))
            if pos >= 0 and shapes[k][pos] != 1:
                return False  # a computed operand with channels we cannot slice
        self.output_chan(node, out)
        return True

    def _concat(self, node: NodeProto, attrs: dict[str, Any]) -> bool:
        shapes = [self.shape(n) for n in node.input]
        if any(s is None for s in shapes):
            return False
        rank = len(shapes[0])
        axis = attrs.get("axis", 1) % rank
        segs: list[tuple[int, int]] = []
        block = None
        for n, s in zip(node.input, shapes, strict=True):
            c = self.chan.get(n)
            if c is None:
                if not isinstance(s[axis], int) or s[axis] <= 0:
                    return False
                segs.append((self.new_space(s[axis], frozen="concatenated with an untraced tensor"), s[axis]))
                b = 1
            else:
                if c.axis != axis or c.rank != rank:
                    return False
                segs += list(c.segs)
                b = c.block
            if block is not None and b != block:
                return False
            block = b
        self.output_chan(node, Chan(rank, axis, block or 1, tuple(segs)))
        return True

    def _relayout(self, i: int, node: NodeProto, x: Chan | None) -> bool:
        """Reshape/Flatten/Squeeze/Unsqueeze that keep each channel's entries together along one output axis."""
        if x is None or any(n in self.chan for n in node.input[1:]):
            return False
        src, dst = self.shape(node.input[0]), self.shapes.get(node.output[0])
        if src is None or dst is None:
            return False
        run = x.block * _prod(src[x.axis + 1:])
        if run is None:
            return False
        for a in range(len(dst)):
            if not _same_prefix(src[:x.axis], dst[:a]):
                continue
            tail = _prod(dst[a + 1:])
            if tail and run % tail == 0 and dst[a] == x.size // x.block * (run // tail):
                chan = Chan(len(dst), a, run // tail, x.segs)
                if node.op_type == "Reshape":
                    shape = self.consts.get(node.input[1])
                    if shape is None or len(shape) != len(dst):
                        return False
                    self.reshapes.append((i, a, chan))
                self.output_chan(node, chan)
                return True
        return False

    def _reduce(self, node: NodeProto, attrs: dict[str, Any], x: Chan | None) -> bool:
        if x is None:
            return False
        axes = attrs.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            v = self.consts.get(node.input[1])
            axes = None if v is None else [int(a) for a in v.reshape(-1)]
        if not axes:
            return False
        axes = [a % x.rank for a in axes]
        if x.axis in axes:
            return False
        keep = attrs.get("keepdims", 1)
        axis = x.axis if keep else x.axis - sum(a < x.axis for a in axes)
        self.output_chan(node, Chan(x.rank if keep else x.rank - len(axes), axis, x.block, x.segs))
        return True

    def _pad(self, node: NodeProto, attrs: dict[str, Any], x: Chan | None) -> bool:
        if x is None or any(n in self.chan for n in node.input[1:]) or (len(node.input) > 3 and node.input[3]):
            return False
        pads = attrs.get("pads")
        if pads is None:
            v = self.consts.get(node.input[1]) if len(node.input) > 1 else None
            pads = None if v is None else [int(p) for p in v.reshape(-1)]
        if pads is None or pads[x.axis] or pads[x.axis + x.rank]:
            return False
        self.output_chan(node, x)
        return True

    def _resize(self, node: NodeProto, attrs: dict[str, Any], x: Chan | None) -> bool:
        if x is None or x.block != 1 or any(n in self.chan for n in node.input[1:]):
            return False
        if node.op_type == "Resize" and len(node.input) > 3 and node.input[3]:
            return False  # sizes would name the channel count
        scales = attrs.get("scales")
        if scales is None:
            k = 1 if node.op_type == "Upsample" or _opset(self.proto) < 11 else 2
            v = self.consts.get(node.input[k]) if len(node.input) > k else None
            scales = None if v is None else [float(s) for s in v.reshape(-1)]
        if not scales or len(scales) != x.rank or scales[x.axis] != 1.0:
            return False
        self.output_chan(node, x)
        return True


def _opset(proto: ModelProto) -> int:
    return next((e.version for e in proto.opset_import if e.domain in ("", "ai.onnx")), 1)


def _prod(dims: list[Any]) -> int | None:
    out = 1
    for d in dims:
        if not isinstance(d, int) or d <= 0:
            return None
        out *= d
    return out


def _same_prefix(a: list[Any], b: list[Any]) -> bool:
    if a == b and all(d is not None for d in a):
        return True
    pa, pb = _prod(a), _prod(b)
    return pa is not None and pa == pb


def _structured(proto: ModelProto, consts: Constants, levels: dict[str, float], names: list[str],
                prunable: dict[str, tuple[int, str]], report: dict[str, LayerPruning]) -> None:
    tracer = Tracer(proto, consts, levels, names)
    tracer.run()
    nodes = proto.graph.node
    # Members of each group; the group's level is its least member's (a layer kept dense keeps its group).
    members: dict[int, list[int]] = {}
    for s, space in enumerate(tracer.spaces):
        if space.node is not None:
            members.setdefault(tracer.root(s), []).append(s)
    kept: dict[int, np.ndarray] = {}
    for root, group in members.items():
        level = min(levels.get(names[tracer.spaces[s].node], 0.0) for s in group)
        size = tracer.spaces[root].size
        drop = min(round(level * size), size - 1)
        if root in tracer.frozen or drop <= 0:
            continue
        score = np.zeros(size)
        for s in group:  # summed normalized L2 norms of the members' filters
            sp = tracer.spaces[s]
            w = consts.get(nodes[sp.node].input[1]).astype(np.float64)
            axes = tuple(d for d in range(w.ndim) if d != sp.weight_dim)
            norms = np.sqrt((w * w).sum(axis=axes))
            score += norms / (norms.mean() or 1.0)
        keep = np.sort(np.argsort(score, kind="stable")[drop:])
        for s in [s for s in range(len(tracer.spaces)) if tracer.root(s) == root]:
            kept[s] = keep

    def index(chan: Chan) -> np.ndarray | None:
        if not any(s in kept for s, _ in chan.segs):
            return None
        parts, offset = [], 0
        for s, n in chan.segs:
            ch = kept.get(s, np.arange(n))
            parts.append(((offset + ch)[:, None] * chan.block + np.arange(chan.block)[None, :]).reshape(-1))
            offset += n
        return np.concatenate(parts)

    edits: dict[tuple[int, int], list[tuple[int, np.ndarray]]] = {}
    for i, k, dim, chan in tracer.slices:
        idx = index(chan)
        if idx is not None:
            edits.setdefault((i, k), []).append((dim, idx))
    for (i, k), cuts in edits.items():
        value = consts.get(nodes[i].input[k])
        for dim, idx in cuts:
            value = np.take(value, idx, axis=dim)
        consts.write(nodes[i], k, value)
    for i, chan in tracer.groups_attr:
        idx = index(chan)
        if idx is not None:
            for a in nodes[i].attribute:
                if a.name == "group":
                    a.i = len(idx)
    for i, axis, chan in tracer.reshapes:
        idx = index(chan)
        shape = consts.get(nodes[i].input[1])
        if idx is not None and shape[axis] != -1:
            shape = shape.copy()
            shape[axis] = len(idx)
            consts.write(nodes[i], 1, shape)
    by_node = {s.node: s for s in tracer.spaces if s.node is not None}
    for name, (i, _) in prunable.items():
        entry = report[name]
        space = next((s for s, sp in enumerate(tracer.spaces) if sp.node == i), None)
        if space is None:
            group = next((a.i for a in nodes[i].attribute if a.name == "group"), 1)
            depthwise = next((c for j, c in tracer.groups_attr if j == i), None)
            if depthwise is not None:
                idx = index(depthwise)
                entry.channels = depthwise.size
                entry.kept_indices = list(range(depthwise.size)) if idx is None else [int(c) for c in idx]
                entry.kept_channels = len(entry.kept_indices)
                if entry.level > 0 and idx is None:
                    entry.dense_reason = "its output channels follow its input's (depthwise), which stay"
            elif entry.level > 0:
                entry.dense_reason = (f"a grouped convolution (group={group})" if group > 1 else
                                      f"its {nodes[i].op_type} output channels could not be traced")
            continue
        entry.channels = by_node[i].size
        entry.kept_channels = len(kept[space]) if space in kept else entry.channels
        entry.kept_indices = [int(c) for c in kept[space]] if space in kept else list(range(entry.channels))
        if entry.level > 0 and space not in kept:
            root = tracer.root(space)
            entry.dense_reason = tracer.frozen.get(root) or "a layer joined elementwise with it is kept dense"


def _sparsity_of(before: dict[str, int], proto: ModelProto, consts: Constants,
                 prunable: dict[str, tuple[int, str]], structured: bool, report: dict[str, LayerPruning]) -> None:
    for name, (i, _) in prunable.items():
        node = proto.graph.node[i]
        layer = Layer(name, node.op_type, list(node.input), list(node.output))
        weight = prunable_weight(layer, {n: consts.get(n) for n in node.input if consts.get(n) is not None})
        if weight is None:
            continue
        w = consts.get(weight)
        if structured:
            report[name].sparsity = round(1.0 - w.size / before[name], 6)
        else:
            report[name].sparsity = round(float(np.count_nonzero(w == 0)) / max(w.size, 1), 6)


# -- the entry point --------------------------------------------------------------------------------------
def prune(model_or_path: Any, plan: float | dict[str, Any], structured: bool = False,
          output: str | os.PathLike | None = None) -> PruneResult:
    """Prune a model (path, bytes, ModelProto or wgsentis Model) by ``plan``; returns a ``PruneResult``.

    ``plan``: a level in [0, 1) for every prunable layer; ``{layer or node name: level}``; or
    ``{"level": L, "loss_profile": <loss profile or its dict>, "keep_dense": F}`` (the most sensitive
    fraction F of the prunable layers, by the loss profile's ``sensitivity``, stays dense). ``structured``:
    remove the weakest output channels (and the inputs that read them) instead of zeroing entries.
    ``output``: also write the model there (inline; external data beside it when over 2 GiB).
    """
    if not isinstance(structured, bool):
        raise InputError(f"prune(structured={structured!r}): structured must be True or False")
    proto = _proto_of(model_or_path)
    if proto.ir_version < 4:
        # Before IR 4 every initializer had to be a graph input too; from 4 on that is optional and means the
        # same (an overridable default), so the pruned copies' new initializers need no input entries.
        proto.ir_version = 4
    original = ModelProto()
    original.CopyFrom(proto)
    _fold_constants(proto)
    names = _node_names(proto)
    consts = Constants(proto)
    arrays = consts.arrays()
    prunable: dict[str, tuple[int, str]] = {}
    for i, node in enumerate(proto.graph.node):
        layer = Layer(names[i], node.op_type, list(node.input), list(node.output))
        weight = prunable_weight(layer, arrays)
        if weight is not None:
            prunable[names[i]] = (i, weight)
    levels = _levels(plan, prunable, names, proto)
    report = {n: LayerPruning(n, proto.graph.node[i].op_type, w, levels[n], 0.0) for n, (i, w) in prunable.items()}
    if not any(levels.values()):  # nothing to prune: the model exactly as given (nothing folded either)
        return PruneResult(original, structured, report, _write(original, output, check=False) if output else None)
    before = {n: int(arrays[w].size) for n, (_, w) in prunable.items()}
    if structured:
        _structured(proto, consts, levels, names, prunable, report)
        # Intermediate shapes changed: stale annotations would contradict them (ORT checks them).
        del proto.graph.value_info[:]
    else:
        for name, (i, weight) in prunable.items():
            if levels[name] > 0:
                node = proto.graph.node[i]
                k = list(node.input).index(weight)
                consts.write(node, k, magnitude_prune(consts.get(weight), levels[name]))
    _sparsity_of(before, proto, consts, prunable, structured, report)
    consts.finish()  # last: it may remove Constant nodes, which renumbers the nodes
    path = _write(proto, output) if output is not None else None
    if path is None:
        _check(proto, None)
    return PruneResult(proto, structured, report, path)


def _check(proto: ModelProto, path: Path | None) -> None:
    try:
        if path is not None and proto.ByteSize() > PROTOBUF_LIMIT:
            onnx.checker.check_model(str(path), full_check=True)
        else:
            onnx.checker.check_model(proto, full_check=True)
    except Exception as exc:
        raise PruneError(f"prune(): the pruned model of graph '{proto.graph.name}' fails the ONNX checker: "
                         f"{exc}") from None


def _write(proto: ModelProto, output: str | os.PathLike, check: bool = True) -> Path:
    if not isinstance(output, str | os.PathLike):
        raise InputError(f"prune(output={output!r}): output must be a file path")
    path = Path(output)
    small = proto.ByteSize() <= PROTOBUF_LIMIT
    if small and check:  # checked before anything is written: a failing model is never left on disk
        _check(proto, None)
    try:
        if small:
            onnx.save_model(proto, str(path))
        else:
            onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                            location=path.name + ".data", size_threshold=1024)
    except OSError as exc:
        raise InputError(f"prune(output='{path}'): cannot write the model there: {exc}") from None
    if not small and check:
        _check(proto, path)
    return path


# -- compare: the estimated speedup of a pruned model against the measured one ----------------------------
def _estimated_ms(entry: dict[str, Any], removed: float) -> float | None:
    """A dense layer's estimated time once ``removed`` of its FLOPs are gone: from the profile's own
    ``estimated_ms`` (level -> ms) where present, read at level = ``removed`` (linear between levels, as
    the rule is); else compute-bound layers take time * (1 - removed) and the others keep their time."""
    ms = entry.get("time_ms")
    if ms is None:
        return None
    given = entry.get("estimated_ms")
    if isinstance(given, dict):
        points = sorted((float(k), float(v)) for k, v in given.items() if v is not None)
        points = [(0.0, float(ms)), *[p for p in points if p[0] > 0]]
        if len(points) > 1:
            (x0, y0), (x1, y1) = points[-2], points[-1]
            if removed > x1:  # past the last level: the same straight line
                return max(0.0, y1 + (y1 - y0) / (x1 - x0) * (removed - x1))
            return float(np.interp(removed, [p[0] for p in points], [p[1] for p in points]))
    return ms * (1.0 - removed) if entry.get("bound") == "compute" else ms


def speedup_lines(dense: dict[str, Any], pruned: dict[str, Any]) -> list[str]:
    """Lines for ``compare``: per layer (matched by name) and in total, the speedup of ``pruned`` over
    ``dense`` as estimated from the dense profile and the FLOPs pruning removed, beside the measured one.
    Empty unless both profiles are timed on the same backend and share layer names."""
    if dense.get("ms_per_batch") is None or pruned.get("ms_per_batch") is None \
            or dense.get("backend") != pruned.get("backend"):
        return []
    after = {e["name"]: e for e in pruned.get("layers") or []}
    layers = dense.get("layers") or []
    if not any(e["name"] in after for e in layers):
        return []

    def ratio(a: float | None, b: float | None) -> str:
        return "-" if not a or not b else f"{a / b:.2f}x"

    head = (f"\nspeedup of {pruned['name']} vs {dense['name']} (estimated: from {dense['name']}'s profile and the "
            "FLOPs removed; measured: time ratio)")
    lines = [head, f"{'layer':<34}{'dense ms':>10}{'pruned ms':>10}{'FLOPs -%':>9}{'estimated':>10}{'measured':>10}"]
    saved = 0.0
    for e in layers:
        p = after.get(e["name"])
        removed = 0.0
        if p is not None and e.get("flops"):
            removed = min(max(1.0 - p["flops"] / e["flops"], 0.0), 1.0)
        est = _estimated_ms(e, removed)
        if est is not None:
            saved += (e["time_ms"] or 0.0) - est
        if p is None:
            continue
        lines.append(f"{e['name'][:33]:<34}{_fmt(e.get('time_ms')):>10}{_fmt(p.get('time_ms')):>10}"
                     f"{100 * removed:>9.1f}{ratio(e.get('time_ms'), est):>10}"
                     f"{ratio(e.get('time_ms'), p.get('time_ms')):>10}")
    ms = dense["ms_per_batch"]
    rows = dense.get("time_sum_ms") or sum(e.get("time_ms") or 0.0 for e in layers)
    # As the profile's pruned views do: the saved share of the rows comes off ms_per_batch.
    est_ms = ms * (1.0 - min(1.0, saved / rows)) if rows else ms
    flops_d, flops_p = dense["flops_profile"]["total_flops"], pruned["flops_profile"]["total_flops"]
    removed_total = 100 * (1 - flops_p / flops_d) if flops_d else 0.0
    lines.append(f"{'ms/batch (total)':<34}{ms:>10.3f}{pruned['ms_per_batch']:>10.3f}{removed_total:>9.1f}"
                 f"{ratio(ms, est_ms):>10}{ratio(ms, pruned['ms_per_batch']):>10}")
    return lines


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
