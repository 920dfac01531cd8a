"""The model ``prune()`` works on, as a private ModelProto with every tensor in memory (from a path, bytes, a
ModelProto or a wgsentis Model, which is written back as ONNX), and the pruned ModelProto checked and written out
(inline, or with external data beside it past protobuf's 2 GiB)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper, numpy_helper

from wgsentis.errors import InputError, ModelLoadError, PruneError
from wgsentis.ir import Graph
from wgsentis.model import Model

PROTOBUF_LIMIT = 2**31 - 1  # a ModelProto over this cannot be serialized in one piece: external data then


def proto_of(source: Any) -> ModelProto:
    """A private copy of the model as a ModelProto with every tensor in memory."""
    from wgsentis.onnx_import import parse_bytes, load_model

    if isinstance(source, Model):
        return export_model(source)
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


def export_model(model: Model) -> ModelProto:
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


def check_pruned(proto: ModelProto, path: Path | None) -> None:
    """Run the full ONNX checker on the pruned model (on its file where it is too big for one protobuf); a
    failure is a PruneError."""
    try:
        if path is not None and proto.ByteSize() > PROTOBUF_LIMIT:
            onnx.checker.check_model(str(path), full_check=True)
        else:
            onnx.checker.check_model(proto, full_check=True)
    except Exception as exc:
        raise PruneError(f"prune(): the pruned model of graph '{proto.graph.name}' fails the ONNX checker: "
                         f"{exc}") from None


def write_pruned(proto: ModelProto, output: str | os.PathLike, check: bool = True) -> Path:
    """Write the model to ``output`` (external data beside it past 2 GiB), checked first unless ``check`` is
    False; returns the path."""
    if not isinstance(output, str | os.PathLike):
        raise InputError(f"prune(output={output!r}): output must be a file path")
    path = Path(output)
    small = proto.ByteSize() <= PROTOBUF_LIMIT
    if small and check:  # checked before anything is written: a failing model is never left on disk
        check_pruned(proto, None)
    try:
        if small:
            onnx.save_model(proto, str(path))
        else:
            onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                            location=path.name + ".data", size_threshold=1024)
    except OSError as exc:
        raise InputError(f"prune(output='{path}'): cannot write the model there: {exc}") from None
    if not small and check:
        check_pruned(proto, path)
    return path
