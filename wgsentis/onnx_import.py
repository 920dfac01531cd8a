"""ONNX ModelProto -> wgsentis Model: attribute decoding, opset selection, function expansion and
safe external data. Knows nothing of backends.

Before anything recursive runs (shape inference, function inlining, the conversion itself) the model's
nesting depth is checked (``onnx_checks.check_depth``) and its ``ir_version`` must be one the installed onnx
knows. Then ``onnx_checks.check_graphs`` validates every graph's structure and gives the topological order
the conversion follows, and ``onnx_shapes.infer_types`` gives the values' types (ONNX's shape inference, its
data propagation bounded). External data files are opened once, without following any symbolic link, and
the opened descriptor is what gets checked (a regular file with one hard link) and read.
"""

from __future__ import annotations

import errno
import math
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, TypeProto

from wgsentis import dtypes
from wgsentis.errors import ExternalDataError, ModelLoadError, UnsupportedOperatorError
from wgsentis.ir import Dim, Graph, Layer, TensorInfo
from wgsentis.backends.cpu import evaluate
from wgsentis.model import Model
from wgsentis.onnx_checks import MAX_SUBGRAPH_DEPTH as MAX_SUBGRAPH_DEPTH  # re-exported: the limit models meet
from wgsentis.onnx_checks import (
    apply_orders,
    check_depth,
    check_graphs,
    check_ranks,
    check_text,
    too_deep_error,
    wire_too_deep,
)
from wgsentis.onnx_contracts import check_contracts
from wgsentis.onnx_shapes import infer_types, infer_types_with
from wgsentis.passes import Optimizer
from wgsentis.run_control import default_memory_limit
from wgsentis.ops import registry
from wgsentis.rule_shapes import concrete
from wgsentis.rule_shapes import infer as infer_from_rules

MIN_OPSET = 1
MAX_OPSET = onnx.defs.onnx_opset_version()
PROTOBUF_LIMIT = (2 << 30) - 1  # the largest message protobuf parses: 2 GiB less one byte
# Bits per element of the sub-byte types whose external data length follows from their shape (packed, the last
# byte padded); 6-bit types are left to onnx's decoder.
_PACKED_BITS = {getattr(TensorProto, n): b for n, b in
                (("UINT4", 4), ("INT4", 4), ("FLOAT4E2M1", 4), ("UINT2", 2), ("INT2", 2)) if hasattr(TensorProto, n)}


def load_model(src: str | os.PathLike | bytes | ModelProto, *, name: str | None = None,
               base_dir: str | os.PathLike | None = None, optimize: bool = True) -> Model:
    """Import an ONNX model from a path, serialized bytes or a ModelProto.

    External data is read only from ``base_dir`` (the model's folder when loading from a path).
    """
    source = ""
    if isinstance(src, ModelProto):
        proto = src
    elif isinstance(src, bytes | bytearray | memoryview):
        proto = parse_bytes(bytes(src), "<bytes>")
    elif isinstance(src, str | os.PathLike):
        path = Path(src)
        source = str(path)
        try:
            if not path.is_file():
                raise ModelLoadError(f"model file '{path}' does not exist or is not a file")
            with path.open("rb") as file:
                check_wire_size(os.fstat(file.fileno()).st_size, str(path))  # before reading it all
                data = file.read()
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"model file '{path}' cannot be read: {exc}") from None
        proto = parse_bytes(data, str(path))
        base_dir = path.parent if base_dir is None else base_dir
    else:
        raise ModelLoadError(f"load_model expects a path, bytes or onnx.ModelProto, got {type(src).__name__}")
    model_name = name or (Path(source).stem if source else (proto.graph.name or "model"))
    return _import(proto, model_name, source, base_dir, optimize, owned=proto is not src)


def check_wire_size(size: int, label: str) -> None:
    """Refuse a serialized model past protobuf's 2 GiB limit, which protobuf reports only as "Wire format was
    corrupt": say what the limit is and how models that large are stored."""
    if size > PROTOBUF_LIMIT:
        raise ModelLoadError(
            f"model '{label}' is {size:,} bytes, past protobuf's 2 GiB limit ({PROTOBUF_LIMIT:,} bytes) on one "
            "serialized message; store its weights as external data (onnx.save_model(model, path, "
            "save_as_external_data=True, location='weights.bin')) and load the .onnx file beside them"
        )


def parse_bytes(data: bytes, label: str) -> ModelProto:
    check_wire_size(len(data), label)
    proto = ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as exc:  # protobuf raises its own DecodeError family
        too_deep = wire_too_deep(data)
        if too_deep is not None:
            raise too_deep_error(label, too_deep) from None
        raise ModelLoadError(f"model '{label}' is not a valid ONNX protobuf: {exc}") from None
    if not proto.HasField("graph"):
        raise ModelLoadError(f"model '{label}' has no graph (is it an ONNX model file?)")
    return proto


def import_model(proto: ModelProto, *, name: str = "model", source: str = "",
                 base_dir: str | os.PathLike | None = None, optimize: bool = True) -> Model:
    """Convert a ModelProto to a Model (see ``load_model``). ``proto`` itself is never modified."""
    return _import(proto, name, source, base_dir, optimize, owned=False)


def _import(proto: ModelProto, name: str, source: str, base_dir: str | os.PathLike | None, optimize: bool,
            owned: bool) -> Model:
    """The import; ``owned``: proto was parsed here, so sorting may reorder its nodes in place."""
    if not proto.HasField("graph"):
        raise ModelLoadError(f"model '{name}' has no graph (is it an ONNX model?)")
    check_depth(proto, name)  # first: everything after this may recurse over the subgraphs
    check_text(proto, name)
    check_ranks(proto, name)  # before shape inference copies a huge rank into every value downstream
    if proto.ir_version > onnx.IR_VERSION:
        raise ModelLoadError(
            f"model '{name}' has IR version {proto.ir_version}, newer than the newest the installed onnx "
            f"{onnx.__version__} knows ({onnx.IR_VERSION}); upgrade onnx or export with an older IR version"
        )
    opsets: dict[str, int] = {}
    for entry in proto.opset_import:
        domain = "" if entry.domain in ("", "ai.onnx") else entry.domain
        opsets[domain] = int(entry.version)
    if not opsets:
        opsets[""] = 1  # IR version 1 models carry no opset_import: ONNX treats them as opset 1
    if opsets.get("", MIN_OPSET) > MAX_OPSET:
        raise ModelLoadError(
            f"model '{name}' uses default-domain opset {opsets['']}, newer than the newest this build "
            f"knows ({MAX_OPSET}); upgrade onnx or export with an older opset"
        )
    if proto.functions:
        try:
            proto = onnx.inliner.inline_local_functions(proto)
        except Exception as exc:
            raise ModelLoadError(f"model '{name}': could not inline its local functions: {exc}") from None
        owned = True
    reorders = check_graphs(proto, name)
    if reorders:
        if not owned:
            copy = ModelProto()
            copy.CopyFrom(proto)
            proto = copy
        apply_orders(proto, reorders)
    value_types = infer_types(proto)
    ctx = _ImportContext(name=name, opsets=opsets, base_dir=Path(base_dir) if base_dir else None,
                         value_types=value_types, ir_version=int(proto.ir_version))
    try:
        graph = ctx.graph(proto.graph, top_level=True)
    finally:
        ctx.close()
    _add_rule_shapes(proto, graph)
    check_contracts(graph, name)
    metadata = {p.key: p.value for p in proto.metadata_props}
    # Optimizing is a step of the import, not something a Model does to itself: the passes and the evaluator
    # they fold constants with (the CPU backend's) are handed in here.
    return Model(graph, opsets, name, source, metadata, optimizer=Optimizer(evaluate) if optimize else None)


# Rounds of the ops' shape rules and ONNX's inference after them (each round may reach one more contrib op).
RULE_SHAPE_ROUNDS = 3


def _add_rule_shapes(proto: ModelProto, graph: Graph) -> None:
    """Shapes ONNX's inference left unknown, from the ops' shape rules (``rule_shapes``), carried on through the
    ops after them by ONNX's inference again: into ``graph``'s value_info and outputs. A value keeps what it had
    unless the new info is concrete where the old was not."""
    declared: dict[str, TensorInfo] = {}
    for _ in range(RULE_SHAPE_ROUNDS):
        found = infer_from_rules(graph)
        if not found:
            return
        declared.update(found)
        typed = infer_types_with(proto, [onnx.helper.make_tensor_value_info(
            n, dtypes.NUMPY_TO_ONNX[info.dtype], list(info.shape)) for n, info in declared.items()
            if info.dtype in dtypes.NUMPY_TO_ONNX])
        learned = {n: type_to_info(n, t) for n, t in typed.items()}
        learned.update(found)
        better = {n: info for n, info in learned.items() if concrete(info) and not concrete(graph.value_info.get(n))}
        if not better:
            return
        graph.value_info.update(better)
        graph.outputs = [better.get(o.name, o) for o in graph.outputs]


def type_to_info(name: str, tp: TypeProto | None) -> TensorInfo:
    """TensorInfo of a TypeProto: tensors, sequences and optionals (their element's dtype/shape)."""
    if tp is None:
        return TensorInfo(name, None, None)
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        tt = tp.tensor_type
        dtype = dtypes.ONNX_TO_NUMPY.get(tt.elem_type)
        shape: tuple[Dim, ...] | None = None
        if tt.HasField("shape"):
            shape = tuple(_dim(d) for d in tt.shape.dim)
        return TensorInfo(name, dtype, shape)
    if which == "sequence_type":
        inner = type_to_info(name, tp.sequence_type.elem_type)
        return TensorInfo(name, inner.dtype, inner.shape, kind="sequence")
    if which == "optional_type":
        inner = type_to_info(name, tp.optional_type.elem_type)
        return TensorInfo(name, inner.dtype, inner.shape, kind="optional")
    if which == "map_type":  # its dtype: the values' (the keys are int64 or strings)
        return TensorInfo(name, type_to_info(name, tp.map_type.value_type).dtype, None, kind="map",
                          key_dtype=dtypes.ONNX_TO_NUMPY.get(tp.map_type.key_type))
    return TensorInfo(name, None, None)


def _default_info(vi: onnx.ValueInfoProto, default: np.ndarray) -> TensorInfo:
    """The TensorInfo of a graph input that an initializer gives a default: as declared, its dtype and shape
    taken from the initializer where the declaration leaves them out."""
    info = type_to_info(vi.name, vi.type)
    return TensorInfo(vi.name, info.dtype if info.dtype is not None else default.dtype,
                      info.shape if vi.type.HasField("tensor_type") else tuple(default.shape), info.kind)


def _dim(d: onnx.TensorShapeProto.Dimension) -> Dim:
    """A dimension: its size, its symbol, or None where exporters wrote -1, '?' or nothing."""
    if d.HasField("dim_value"):
        return int(d.dim_value) if d.dim_value >= 0 else None
    return d.dim_param if d.dim_param and d.dim_param != "?" else None


class _ImportContext:
    """State shared while converting a model's graphs: names, opsets, types, external data folder."""

    def __init__(self, name: str, opsets: dict[str, int], base_dir: Path | None,
                 value_types: dict[str, TypeProto], ir_version: int) -> None:
        self.model_name = name
        self.opsets = opsets
        self.base_dir = base_dir
        self.value_types = value_types
        self.used_names: set[str] = set()
        self.fresh = 0
        self.external: dict[str, tuple[int, int]] = {}  # location -> (open descriptor, size) for this import
        # From IR version 4 on, an initializer also listed as a graph input is a default a run may override
        # (ONNX's rule, and ONNX Runtime's); before it, exporters listed every weight as an input, and both
        # treat them as constants.
        self.ir_version = ir_version

    def close(self) -> None:
        """Close the external data files this import opened."""
        while self.external:
            fd, _ = self.external.popitem()[1]
            os.close(fd)

    # -- graphs -----------------------------------------------------------------------------
    def graph(self, gp: GraphProto, top_level: bool = False) -> Graph:
        constants: dict[str, np.ndarray] = {}
        for init in gp.initializer:
            constants[init.name] = self.tensor(init, f"initializer '{init.name}'")
        for sparse in gp.sparse_initializer:
            constants[sparse.values.name] = self.sparse_tensor(sparse, f"sparse initializer '{sparse.values.name}'")
        for vi in gp.value_info:
            self.value_types.setdefault(vi.name, vi.type)
        inputs = [type_to_info(vi.name, vi.type) for vi in gp.input if vi.name not in constants]
        overridable = [_default_info(vi, constants[vi.name]) for vi in gp.input
                       if vi.name in constants] if top_level and self.ir_version >= 4 else []
        outputs = [type_to_info(vi.name, self.value_types.get(vi.name, vi.type)) for vi in gp.output]
        if top_level:
            for out in outputs:
                if not out.name:
                    raise ModelLoadError(f"model '{self.model_name}': a graph output has an empty name")
        layers: list[Layer] = []
        for index, node in enumerate(gp.node):
            layers.extend(self.node(node, index))
        value_info = {
            n: type_to_info(n, t) for n, t in self.value_types.items()
        } if top_level else {vi.name: type_to_info(vi.name, vi.type) for vi in gp.value_info}
        return Graph(name=gp.name or self.model_name, inputs=inputs, outputs=outputs,
                     constants=constants, layers=layers, value_info=value_info, overridable=overridable)

    def node(self, node: NodeProto, index: int) -> list[Layer]:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        node_name = node.name or f"{node.op_type}_{index}"
        if node_name in self.used_names:
            self.fresh += 1
            node_name = f"{node_name}__{self.fresh}"
        self.used_names.add(node_name)
        if domain not in self.opsets:
            raise UnsupportedOperatorError(node.op_type, domain, 0, node_name,
                                           f"the model imports no opset for domain '{domain}'")
        opset = self.opsets[domain]
        impl = registry.lookup(node.op_type, domain, opset)
        if impl is None:
            expanded = self.expand_function(node, node_name, domain, opset)
            if expanded is not None:
                return expanded
            detail = "no kernel is registered"
            known = registry.supported_ops().get((domain, node.op_type))
            if known:
                detail = f"kernels exist from opset {known[0]} on, the model uses {opset}"
            raise UnsupportedOperatorError(node.op_type, domain, opset, node_name, detail)
        attrs = {a.name: self.attribute(a, node_name) for a in node.attribute}
        unknown = [a for a in attrs if a not in impl.attr_names] if not impl.takes_any_attr else []
        if unknown:
            raise UnsupportedOperatorError(node.op_type, domain, opset, node_name,
                                           f"attribute(s) {', '.join(unknown)} not supported")
        n_in = len(node.input)
        while n_in and node.input[n_in - 1] == "":
            n_in -= 1
        least = impl.min_inputs
        try:  # the spec's arity too (a variadic input needs one value)
            least = max(least, onnx.defs.get_schema(node.op_type, opset, domain).min_input)
        except onnx.defs.SchemaError:
            pass
        if n_in < least or (impl.max_inputs is not None and n_in > impl.max_inputs):
            expected = f"{least}..{impl.max_inputs if impl.max_inputs is not None else 'any'}"
            raise ModelLoadError(
                f"model '{self.model_name}': node '{node_name}' ({node.op_type}) has {n_in} inputs, "
                f"expected {expected}"
            )
        return [Layer(name=node_name, op_type=node.op_type, inputs=list(node.input)[:n_in],
                      outputs=list(node.output), attrs=attrs, domain=domain, opset=opset)]

    def expand_function(self, node: NodeProto, node_name: str, domain: str, opset: int) -> list[Layer] | None:
        """Replace a node by its ONNX function body, when the schema defines one."""
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, domain)
        except onnx.defs.SchemaError:
            return None
        body: onnx.FunctionProto | None = None
        if schema.has_function:
            body = onnx.FunctionProto()
            body.ParseFromString(schema.get_function_with_opset_version(schema.since_version))
        elif schema.has_context_dependent_function:
            types = [self.value_types.get(i) if i else TypeProto() for i in node.input]
            if any(t is None for t in types):
                return None
            raw = schema.get_context_dependent_function_with_opset_version(
                schema.since_version, node.SerializeToString(), [t.SerializeToString() for t in types])
            if not raw:
                return None
            body = onnx.FunctionProto()
            body.ParseFromString(raw)
        if body is None or not body.node:
            return None
        for imp in body.opset_import:
            d = "" if imp.domain in ("", "ai.onnx") else imp.domain
            if self.opsets.get(d, imp.version) != imp.version and d != "":
                return None
        return self.inline(node, node_name, body)

    def inline(self, node: NodeProto, node_name: str, body: onnx.FunctionProto) -> list[Layer]:
        """Inline a function body: rename its values, bind attribute references, import its nodes."""
        rename: dict[str, str] = {"": ""}
        for formal, actual in zip(body.input, node.input, strict=False):
            rename[formal] = actual
        for formal in body.input[len(node.input):]:
            rename[formal] = ""
        for formal, actual in zip(body.output, node.output, strict=False):
            rename[formal] = actual
        given = {a.name: a for a in node.attribute}
        defaults = {a.name: a for a in body.attribute_proto}
        layers: list[Layer] = []
        for i, inner in enumerate(body.node):
            clone = NodeProto()
            clone.CopyFrom(inner)
            clone.name = f"{node_name}/{inner.name or inner.op_type + str(i)}"
            for lst in (clone.input, clone.output):
                for k, value in enumerate(lst):
                    if value not in rename:
                        rename[value] = f"{node_name}/{value}"
                    lst[k] = rename[value]
            kept = []
            for attr in clone.attribute:
                if attr.ref_attr_name:
                    source = given.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
                    if source is None:
                        continue
                    bound = AttributeProto()
                    bound.CopyFrom(source)
                    bound.name = attr.name
                    kept.append(bound)
                else:
                    kept.append(attr)
            del clone.attribute[:]
            clone.attribute.extend(kept)
            layers.extend(self.node(clone, i))
        return layers

    # -- attributes and tensors -------------------------------------------------------------
    def attribute(self, attr: AttributeProto, node_name: str) -> Any:
        kind = attr.type
        where = f"attribute '{attr.name}' of node '{node_name}'"
        if kind == AttributeProto.FLOAT:
            return float(attr.f)
        if kind == AttributeProto.INT:
            return int(attr.i)
        if kind == AttributeProto.STRING:
            return attr.s.decode("utf-8", errors="replace")
        if kind == AttributeProto.TENSOR:
            return self.tensor(attr.t, where)
        if kind == AttributeProto.SPARSE_TENSOR:
            return self.sparse_tensor(attr.sparse_tensor, where)
        if kind == AttributeProto.GRAPH:
            return self.graph(attr.g)
        if kind == AttributeProto.FLOATS:
            return [float(v) for v in attr.floats]
        if kind == AttributeProto.INTS:
            return [int(v) for v in attr.ints]
        if kind == AttributeProto.STRINGS:
            return [s.decode("utf-8", errors="replace") for s in attr.strings]
        if kind == AttributeProto.TENSORS:
            return [self.tensor(t, where) for t in attr.tensors]
        if kind == AttributeProto.GRAPHS:
            return [self.graph(g) for g in attr.graphs]
        if kind == AttributeProto.TYPE_PROTO:
            return attr.tp
        if kind == AttributeProto.TYPE_PROTOS:
            return list(attr.type_protos)
        raise ModelLoadError(f"model '{self.model_name}': {where} has unknown type {kind}")

    def tensor(self, tp: TensorProto, where: str) -> np.ndarray:
        if tp.data_type not in dtypes.ONNX_TO_NUMPY:
            raise ModelLoadError(
                f"model '{self.model_name}': {where} has unsupported element type "
                f"{dtypes.onnx_type_name(tp.data_type)}"
            )
        if any(d < 0 for d in tp.dims):
            raise ModelLoadError(f"model '{self.model_name}': {where} has negative dims {list(tp.dims)}")
        if tp.data_location == TensorProto.EXTERNAL:
            tp = self.read_external(tp, where)
        try:
            array = onnx.numpy_helper.to_array(tp)
        except Exception as exc:
            raise ModelLoadError(f"model '{self.model_name}': {where} could not be decoded: {exc}") from None
        if array.dtype == object:
            array = np.array([v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v
                              for v in array.ravel()], dtype=object).reshape(array.shape)
        return array

    def sparse_tensor(self, sp: onnx.SparseTensorProto, where: str) -> np.ndarray:
        if any(d < 0 for d in sp.dims):
            raise ModelLoadError(f"model '{self.model_name}': {where} has negative dims {list(sp.dims)}")
        values = self.tensor(sp.values, f"{where} values")
        indices = self.tensor(sp.indices, f"{where} indices").astype(np.int64)
        nbytes, limit = math.prod(sp.dims) * values.dtype.itemsize, default_memory_limit()
        if nbytes > limit:  # densifying allocates all of it: refuse before numpy's MemoryError
            raise ModelLoadError(
                f"model '{self.model_name}': {where} of dims {list(sp.dims)} ({values.dtype.name}) needs "
                f"{nbytes:,} bytes once dense, over the limit of {limit:,} bytes (half this machine's memory)"
            )
        dense = np.zeros(tuple(sp.dims), dtype=values.dtype)
        try:
            if indices.size and indices.min() < 0:
                raise IndexError(f"negative index {indices.min()}")
            if indices.ndim == 1:
                dense.reshape(-1)[indices] = values
            else:
                dense[tuple(indices.T)] = values
        except (IndexError, ValueError) as exc:
            raise ModelLoadError(
                f"model '{self.model_name}': {where} indices do not fit its dims {list(sp.dims)}: {exc}"
            ) from None
        return dense

    def read_external(self, tp: TensorProto, where: str) -> TensorProto:
        """Read external data only from inside the model folder, checking offsets and lengths against the
        descriptor actually opened."""
        info = {e.key: e.value for e in tp.external_data}
        location = info.get("location", "")
        if self.base_dir is None:
            raise ExternalDataError(
                f"model '{self.model_name}': {where} refers to external data '{location}' but the model "
                "was not loaded from a file; pass base_dir="
            )
        if not location or "\0" in location or os.path.isabs(location) or ".." in Path(location).parts:
            raise ExternalDataError(
                f"model '{self.model_name}': {where} external data location '{location}' must be a relative "
                "path inside the model's folder"
            )
        fd, size = self.open_external(location, where)
        try:
            offset = int(info.get("offset", 0))
            length = int(info["length"]) if "length" in info else size - offset
        except ValueError:
            raise ExternalDataError(f"model '{self.model_name}': {where} has a non-integer offset/length") from None
        if offset < 0 or length < 0 or offset + length > size:
            raise ExternalDataError(
                f"model '{self.model_name}': {where} asks for bytes {offset}..{offset + length} of "
                f"'{location}', which has {size}"
            )
        expected = math.prod(tp.dims) * dtypes.ONNX_TO_NUMPY[tp.data_type].itemsize
        if tp.data_type in _PACKED_BITS:
            expected = -(-math.prod(tp.dims) * _PACKED_BITS[tp.data_type] // 8)
        sized = tp.data_type != TensorProto.STRING and (
            tp.data_type not in dtypes.PACKED_TYPES or tp.data_type in _PACKED_BITS)
        if sized and length != expected:
            raise ExternalDataError(
                f"model '{self.model_name}': {where} has {length} bytes of external data, its shape "
                f"{list(tp.dims)} needs {expected}"
            )
        chunks, done = [], 0
        while done < length:
            chunk = os.pread(fd, length - done, offset + done)
            if not chunk:
                raise ExternalDataError(
                    f"model '{self.model_name}': {where} external data '{location}' ended at byte "
                    f"{offset + done} while reading bytes {offset}..{offset + length} (the file shrank)"
                )
            chunks.append(chunk)
            done += len(chunk)
        loaded = TensorProto()
        loaded.CopyFrom(tp)
        del loaded.external_data[:]
        loaded.data_location = TensorProto.DEFAULT
        loaded.raw_data = b"".join(chunks)
        return loaded

    def open_external(self, location: str, where: str) -> tuple[int, int]:
        """Open an external data file once per import, relative to the model folder, following no symbolic
        link on the way; returns (descriptor, size) once fstat on that descriptor shows a regular file with
        a single hard link (a second link may be a file from anywhere on the same file system)."""
        parts = Path(location).parts
        key = "/".join(parts)
        if key in self.external:
            return self.external[key]
        assert self.base_dir is not None
        base = self.base_dir.resolve()

        def refuse(reason: str) -> ExternalDataError:
            return ExternalDataError(f"model '{self.model_name}': {where} external data '{location}' {reason}")

        try:
            target = (base / location).resolve()  # only for the message: the open below is what enforces
        except (OSError, RuntimeError):  # a link loop, a name too long: the open below says which
            target = base
        if base != target and base not in target.parents:
            raise refuse(f"resolves outside the model folder '{base}'; refusing a symbolic link out of it")
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # NONBLOCK: a FIFO must not hang
        try:
            fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise refuse(f"cannot be read: the model folder '{base}' cannot be opened ({exc.strerror})") from None
        try:
            for i, part in enumerate(parts):
                last = i == len(parts) - 1
                try:
                    opened = os.open(part, flags if last else flags | os.O_DIRECTORY, dir_fd=fd)
                except FileNotFoundError:
                    raise refuse("is missing") from None
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, fd):  # O_NOFOLLOW met a link
                        if last:
                            raise refuse("is a symbolic link; refusing to follow a link out of the model "
                                         "folder") from None
                        raise refuse(f"goes through the symbolic link '{'/'.join(parts[:i + 1])}'; refusing to "
                                     "follow a link out of the model folder") from None
                    raise refuse(f"cannot be opened ({exc.strerror})") from None
                os.close(fd)
                fd = opened
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise refuse("is not a regular file")
            if info.st_nlink != 1:
                raise refuse(f"is a hard link ({info.st_nlink} links); refusing a file that may live outside "
                             "the model folder")
        except BaseException:
            os.close(fd)
            raise
        self.external[key] = (fd, info.st_size)
        return self.external[key]


def _is_link(name: str, dir_fd: int) -> bool:
    """Whether ``name`` in the open directory ``dir_fd`` is a symbolic link (only to word a refusal)."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
