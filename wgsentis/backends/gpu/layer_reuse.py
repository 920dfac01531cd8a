"""Layers a new input size leaves as they were: their steps recorded again without running their builders.

A decoder step with a longer cache, or an encoder fed a longer sentence, changes the shapes of a few layers
(attention over the cache, what reads the sequence length); most of its hundreds of layers see the same
arguments as in the recording before. Tracing a plan for the new size ran every layer's builder again all the
same (its broadcasting analysis, pipeline key, parameter packing: most of a new size's host time). Here a GPU
layer traced once leaves a ``LayerTemplate``: its steps with each buffer they bind named by where it came from
(the layer's own allocations in the order its builder made them, an argument's, a constant's) and the
parameter words of each dispatch. When a later trace reaches the layer with the same ``arguments_key`` (the
same shapes, dtypes, views, int64 bounds and aliasing of its device arguments, the same constants, the same
small host values), the template is stamped onto the new recording: new allocations of the same sizes (counted
by the memory budget like a builder's), new uniform slots holding the same words, the same pipelines. The
result is what the builder would have recorded, since a builder's steps are a function of exactly those
arguments and the layer's attributes.

Only layers that need nothing else are templated: dispatches binding storage buffers, one parameter block and
textures (the program's scratch slots, asked for again in the same order and size, or constant ones), buffer
copies and copies into a scratch texture; on gpu-pixel, draws into the layer's own texture tensors reading its
arguments', its own or the program's constant textures, with one parameter block (a tensor's layout in its
texture is part of the key, and a stamped layer's new textures have the layouts its builder chose). Left to their
builders: fault slots (index checks), control flow, chunked tensors, narrowing after the builder, a builder that
stepped the recording's clock, textures of unknown origin, and run inputs with host copies (placement may read
their values). Traces only: a recorded run binds its steps as it goes.

A template of an op whose builder reads of its weights only their shapes (WEIGHT_SHAPED_OPS: MatMul, Gemm) also stands
for layers of its kind whose weights are other arrays of those shapes: while it builds, the program's
ConstantStore notes what each constant it asks for is made from (its trail), and the template names each constant
it binds by that chain from the layer's arguments (a weight, its repacked form, that form's texture), found again
from the stamped layer's weights among what the program keeps; a constant of no such chain keeps the template to
its own weights, and one not made yet for the other weights leaves that layer to its builder.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from wgsentis.backends.gpu.memory import HostValueAllocation, UniformArena
from wgsentis.backends.gpu.steps import Copy, Dispatch, Draw, TextureCopy
from wgsentis.backends.gpu.tensors import Allocation, GTensor, GTexture

# Host arguments (shape vectors, axes, indices computed on the host) up to this many elements key a template
# by their bytes; a larger host argument leaves the layer to its builder.
HOST_KEY_ELEMENTS = 64

# Ops whose builders read of a weight (a constant argument past HOST_KEY_ELEMENTS) its shape and dtype and
# derive what they upload from it through the ConstantStore (ConstantStore.trail), never branching on its values:
# a template of one such layer stands for another of its kind whose weights have the same shapes, the constants
# it binds found again from the other's weights. A transformer's blocks each have their own projections: at a
# new sequence length the first block's are built and the others stamped.
WEIGHT_SHAPED_OPS = frozenset({("MatMul", ""), ("Gemm", "")})

# ("new", k): the k-th allocation the builder made; ("arg", j): argument j's; ("newtex", k) / ("argtex", j): the
# texture of either (gpu-pixel's texture tensors); ("scratch", k): the texture of the builder's k-th scratch
# request; ("const", a): a constant's allocation or texture itself; ("hostvalue", a): a plan's host value
# (memory.HostValueAllocation), uploaded again into the plan stamped; ("derived", k): the constant the template's
# k-th chain finds from the stamped layer's weights (a template of WEIGHT_SHAPED_OPS).
Ref = tuple[str, Any]


def arguments_key(args: list[Any], constants: frozenset[int] = frozenset(),
                  weights_by_shape: bool = False) -> tuple | None:
    """What a layer's builder reads of its arguments, as a hashable key, or None where a template cannot stand
    for the builder (a chunked tensor, a texture layout outside a texture tensor, a run input whose host copy
    placement may read, a large or non-array host value). ``constants``: the ids of the graph's constant arrays,
    the same objects in every recording (weights past HOST_KEY_ELEMENTS: keyed by identity, whatever their size,
    or by shape and dtype with ``weights_by_shape`` (WEIGHT_SHAPED_OPS); smaller ones by value, as any small host
    value)."""
    parts: list[Any] = []
    aliases: dict[int, int] = {}
    for a in args:
        if a is None:
            parts.append(None)
        elif isinstance(a, GTensor):
            alloc = a.alloc
            if alloc is None or a.chunks is not None or (a.layout is not None and not hasattr(alloc, "layout")):
                return None
            if alloc.persistent:  # a constant: the same allocation every run of the program
                parts.append(("const", id(alloc), a.shape, a.dtype.str, a.first, a.bound, a.layout))
                continue
            if a.host is not None:
                return None
            alias = aliases.setdefault(id(alloc), len(aliases))
            # (gpu-pixel: the tensor's layout in its texture and the texture tensor's own layout)
            parts.append(("tensor", a.shape, a.dtype.str, a.first, a.bound, alias, alloc.nbytes, a.layout,
                          getattr(alloc, "layout", None)))
        elif isinstance(a, np.ndarray) and a.dtype != object and a.size <= HOST_KEY_ELEMENTS:
            # (a small constant too, by its value: exporters give each block of a transformer its own copy of the
            # same scale or mask fill, and a template of one block's layer stands for the others' with equal ones)
            parts.append(("host", a.shape, a.dtype.str, a.tobytes()))
        elif isinstance(a, np.ndarray) and id(a) in constants:
            # (By shape: which weights are one array stays in the key, as a device tensor's aliasing does.)
            parts.append(("weight", a.shape, a.dtype.str, aliases.setdefault(id(a), len(aliases)))
                         if weights_by_shape else ("weight", id(a)))
        else:
            return None
    return tuple(parts)


@dataclass(frozen=True)
class DispatchShape:
    """What a templated dispatch keeps of the one its builder recorded: all but its bindings' places (and
    nothing of the old plan: its bind group and allocations are left to that plan)."""

    pipeline: Any
    layout: Any
    groups: tuple[int, int, int]
    sizes: tuple[int, ...]  # bytes bound of each storage binding
    label: str
    reads: int
    offsets: list[int]
    words: np.ndarray  # the parameter block


@dataclass(frozen=True)
class DrawShape:
    """What a templated gpu-pixel draw keeps of the one its builder recorded: all but its targets and the
    textures it reads (and its parameter block's place)."""

    pipeline: Any
    layout: Any
    label: str
    region: tuple[int, int]
    origin: int
    load: bool
    words: np.ndarray


@dataclass
class LayerTemplate:
    """One traced GPU layer: its steps (``("dispatch", DispatchShape, storage refs, texture refs)`` or ``("copy",
    Copy class, source ref, offset, target ref, offset, bytes)``), the sizes of the allocations its builder
    made, which of them it returned, its scratch texture requests (slot, texels, name), and its outputs as (ref,
    shape, dtype, first element, int64 bound) or None. ``anchors`` keeps the constants' allocations its key
    names by id alive as long as the template."""

    key: tuple
    steps: list[tuple]
    created: list[Any]  # bytes of each buffer, or the TextureLayout of each texture tensor (gpu-pixel)
    kept: frozenset[int]
    outputs: list[tuple | None]
    scratch: list[tuple[int, int, str]] = field(default_factory=list)
    anchors: list[Allocation] = field(default_factory=list)
    # How each ("derived", k) ref's constant is found from a layer's arguments (``_resolve``): a template of
    # WEIGHT_SHAPED_OPS, stamped onto any layer of its kind whose weights have the same shapes.
    chains: list[tuple] = field(default_factory=list)


class LayerReuse:
    """The last template of each top-level layer of a program's graph, and how many GPU layers the last
    recording stamped from one (``reused``) or built (``built``).

    Within one recording a template also stands for every other layer of the same kind (``layer_key``: op type,
    domain, opset, attributes, fused activation, which inputs and outputs it has and the outputs' declared dtypes,
    all a builder reads of its layer) given the same arguments: the blocks of a transformer repeat one another, so
    at a new size the attention of its first block is built and those of the others are stamped from it."""

    def __init__(self, constants: frozenset[int], value_info: dict[str, Any] | None = None) -> None:
        # The ids of the graph's constant arrays (ir.constant_array_ids): they live as long as the program.
        self.constants = constants
        self.value_info = value_info or {}
        self.templates: dict[int, LayerTemplate] = {}
        self.shared: dict[tuple, tuple[LayerTemplate, str]] = {}  # this recording's, by (layer_key, key)
        self._layer_keys: dict[int, tuple | None] = {}
        self.reused = 0
        self.built = 0

    def start(self) -> None:
        """A recording begins: its counts start from zero, and it shares templates only among its own layers."""
        self.reused = self.built = 0
        self.shared = {}

    def clear(self) -> None:
        self.templates.clear()
        self.shared = {}

    def layer_key(self, index: int, layer: Any) -> tuple | None:
        """What a builder reads of layer ``index`` besides its arguments, as a hashable key (None for a layer with
        subgraphs, or attributes of no plain value)."""
        if index not in self._layer_keys:
            key: tuple | None
            try:
                act = layer.fused_activation
                key = (layer.op_type, layer.domain, layer.opset, _attributes_key(layer.attrs),
                       None if act is None else (act[0], _attributes_key(act[1])),
                       tuple(bool(n) for n in layer.inputs), tuple(bool(n) for n in layer.outputs),
                       tuple(str(getattr(self.value_info.get(n), "dtype", None)) for n in layer.outputs))
            except _NoKey:
                key = None
            self._layer_keys[index] = key
        return self._layer_keys[index]

    def stamp(self, program: Any, rec: Any, index: int, key: tuple | None, args: list[Any],
              generic_key: tuple | None = None) -> tuple | None:
        """The outputs of layer ``index`` recorded from its template into ``rec`` (``program``'s recorder), or
        from another layer's of its kind recorded in this recording (with ``generic_key``, the layer's key with
        its weights by shape: one of WEIGHT_SHAPED_OPS, whose weights may be other arrays); None where there is
        none for ``key``, or a template's constants are not all found from these arguments."""
        template = self.templates.get(index) if key is not None else None
        layer = rec.layer
        source = None
        if template is None or template.key != key:
            kind = self.layer_key(index, layer) if key is not None else None
            hit = self.shared.get((kind, key)) if kind is not None else None
            if hit is None and kind is not None and generic_key is not None:
                hit = self.shared.get((kind, generic_key))
            if hit is None:
                return None
            template, source = hit
            source = None if source == layer.name else f"{source} ({layer.op_type})"
            self.templates[index] = template  # (this layer's from now on, as if its builder had made it)
        # (Found before anything is allocated: a constant of these weights not made yet leaves it to the builder.)
        derived = [_resolve(chain, args) for chain in template.chains]
        if any(d is None for d in derived):
            return None
        textures = [rec.scratch_slot(slot, texels, name) for slot, texels, name in template.scratch]
        if None in textures:
            return None  # (not past the device's limits when traced at these sizes: cannot happen)
        what = f"an output of layer '{layer.name}' ({layer.op_type})"
        created = [program.new_allocation(size, what, layer) if isinstance(size, int)
                   else program.new_texture(size, what, layer) for size in template.created]

        def where(ref: Ref) -> Any:
            kind, value = ref
            if kind == "new":
                return created[value]
            if kind == "newtex":
                return created[value].texture
            if kind == "scratch":
                return textures[value]
            if kind == "argtex":
                return args[value].alloc.texture
            if kind == "hostvalue":  # (another plan's: its words uploaded into this one)
                return program.host_value_copy(value, f"{layer.name}: a host value")
            if kind == "derived":
                return derived[value]
            return args[value].alloc if kind == "arg" else value

        uniforms = program.uniforms()
        own_label = f"{layer.name} ({layer.op_type})"
        for kind, step, *refs in template.steps:  # (step: a DispatchShape, or the class of a copy)
            if kind in ("dispatch", "draw"):
                # (Stamped from another layer's template: the step carries this layer's name, as RenderDoc shows.)
                label = own_label if source is not None and step.label == source else step.label
            if kind == "dispatch":
                storage_refs, texture_refs = refs
                ubuf, uoffset = uniforms.allocate(step.words)
                rec.steps.append(Dispatch(
                    step.pipeline, None, step.groups, index, step.layout,
                    [(where(r), size) for r, size in zip(storage_refs, step.sizes, strict=True)],
                    [{"buffer": ubuf, "offset": uoffset, "size": UniformArena.SLOT},
                     *(where(r) for r in texture_refs)], label, step.reads, step.offsets, step.words))
            elif kind == "draw":
                target_refs, texture_refs = refs
                ubuf, uoffset = uniforms.allocate(step.words)
                rec.steps.append(Draw(
                    step.pipeline, None, [where(r) for r in target_refs], index, step.layout,
                    [*(where(r) for r in texture_refs), {"buffer": ubuf, "offset": uoffset, "size": UniformArena.SLOT}],
                    label, region=step.region, origin=step.origin, load=step.load, params=step.words))
            else:
                source, source_offset, target, target_offset, nbytes = refs
                rec.steps.append(step(where(source), source_offset, where(target), target_offset, nbytes, index))
        outputs: list[Any] = []
        for out in template.outputs:
            if out is None:
                outputs.append(None)
                continue
            ref, shape, dtype, first, bound, layout = out
            t = GTensor(where(ref), shape, dtype, first=first)
            t.bound = bound
            t.layout = layout
            outputs.append(t)
        kept = {id(created[k]) for k in template.kept}
        program.free_temporaries(created, kept)
        rec.made_and_kept = [created[k] for k in sorted(template.kept)]
        self.reused += 1
        return tuple(outputs)

    def remember(self, index: int, key: tuple | None, args: list[Any], rec: Any, steps: list[Any],
                 outputs: tuple, generic_key: tuple | None = None, trail: list[tuple] | None = None) -> None:
        """Keep layer ``index``'s template from what its builder just recorded into ``rec`` (``steps``,
        ``outputs``, the allocations and scratch textures it asked for) on arguments ``args`` (as they were
        before placement), where everything they bind has a known origin; otherwise forget any earlier template
        of the layer. ``generic_key`` and ``trail`` (a layer of WEIGHT_SHAPED_OPS: its key with weights by shape,
        the constants its builder asked for, ConstantStore.trail): where every constant it binds was found from
        its arguments, the template also stands for layers of its kind with other weights of those shapes."""
        self.built += 1
        constant_textures = getattr(rec.program, "constant_texture_ids", frozenset())
        template = _template(key, args, rec.built_allocs, rec.scratch_calls, steps, outputs, constant_textures) \
            if key is not None else None
        general = None
        if template is not None and generic_key is not None and trail is not None:
            general = _generalized(template, args, trail, self.constants, rec.program.constants)
        if template is None:
            self.templates.pop(index, None)
        else:
            self.templates[index] = template if general is None else general
            kind = self.layer_key(index, rec.layer)
            if kind is not None:
                self.shared[(kind, key)] = (template, rec.layer.name)
                if general is not None:
                    self.shared[(kind, generic_key)] = (general, rec.layer.name)


class _NoKey(Exception):  # noqa: N818 - internal: an attribute with no plain value to key by
    pass


def _attributes_key(attrs: dict[str, Any]) -> tuple:
    """A layer's attributes as a hashable key (raises _NoKey for one of no plain value: a subgraph)."""
    return tuple((name, _value_key(value)) for name, value in sorted(attrs.items()))


def _value_key(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return (type(value).__name__, value)
    if isinstance(value, list | tuple):
        return tuple(_value_key(v) for v in value)
    if isinstance(value, np.ndarray) and value.dtype != object and value.size <= HOST_KEY_ELEMENTS:
        return ("array", value.dtype.str, value.shape, value.tobytes())
    raise _NoKey


def _template(key: tuple, args: list[Any], created: list[Allocation], scratch: list[tuple], steps: list[Any],
              outputs: tuple, constant_textures: set[int] | frozenset[int]) -> LayerTemplate | None:
    origin: dict[int, Ref] = {}
    anchors = []
    for j, a in enumerate(args):
        if isinstance(a, GTensor) and a.alloc is not None:
            if a.alloc.persistent:
                anchors.append(a.alloc)
            else:
                origin.setdefault(id(a.alloc), ("arg", j))
                if hasattr(a.alloc, "texture"):  # (gpu-pixel: a texture tensor's texture)
                    origin.setdefault(id(a.alloc.texture), ("argtex", j))
    for k, alloc in enumerate(created):
        origin[id(alloc)] = ("new", k)
        if hasattr(alloc, "texture"):
            origin[id(alloc.texture)] = ("newtex", k)
    for k, (*_, texture) in enumerate(scratch):
        origin.setdefault(id(texture), ("scratch", k))

    def ref(alloc: Allocation) -> Ref | None:
        if id(alloc) in origin:
            return origin[id(alloc)]
        if isinstance(alloc, HostValueAllocation):
            return ("hostvalue", alloc)  # (a plan's own: never bound from another plan)
        return ("const", alloc) if alloc.persistent else None

    recorded: list[tuple] = []
    for step in steps:
        if type(step) is Dispatch:
            if step.params is None or not step.extra or not isinstance(step.extra[0], dict) \
                    or not all(isinstance(r, GTexture) for r in step.extra[1:]):
                return None  # no parameter block of its own, or the fault buffer bound: not templated
            refs = [ref(alloc) for alloc, _ in step.storage]
            textures = [origin.get(id(r), ("const", r)) for r in step.extra[1:]]
            if None in refs:
                return None
            recorded.append(("dispatch", DispatchShape(step.pipeline, step.layout, step.groups,
                                                       tuple(size for _, size in step.storage), step.label,
                                                       step.reads, step.offsets, step.params), refs, textures))
        elif type(step) is Draw:
            extra = step.extra
            if step.params is None or not extra or not isinstance(extra[-1], dict) \
                    or not all(isinstance(r, GTexture) for r in extra[:-1]):
                return None  # no parameter block of its own, or the fault buffer bound: not templated
            targets = [origin.get(id(t)) for t in step.targets]
            if None in targets:
                return None
            textures = [origin.get(id(r)) or (("const", r) if id(r) in constant_textures else None)
                        for r in extra[:-1]]
            if None in textures:
                return None  # a texture of unknown origin: left to the builder
            recorded.append(("draw", DrawShape(step.pipeline, step.layout, step.label, step.region, step.origin,
                                               step.load, step.params), targets, textures))
        elif type(step) in (Copy, TextureCopy):
            source = ref(step.src)
            target = origin.get(id(step.dst)) if isinstance(step, TextureCopy) else ref(step.dst)
            if source is None or target is None:
                return None
            recorded.append(("copy", type(step), source, step.src_offset, target, step.dst_offset, step.nbytes))
        else:
            return None
    outs: list[tuple | None] = []
    for o in outputs:
        if o is None:
            outs.append(None)
            continue
        if not isinstance(o, GTensor) or o.alloc is None or o.chunks is not None or o.host is not None \
                or (o.layout is not None and not hasattr(o.alloc, "layout")):
            return None
        where = ref(o.alloc)
        if where is None:
            return None
        outs.append((where, o.shape, o.dtype, o.first, o.bound, o.layout))
    kept = frozenset(k for k, alloc in enumerate(created) if any(isinstance(o, GTensor) and o.alloc is alloc
                                                                 for o in outputs))
    sizes = [alloc.layout if hasattr(alloc, "layout") else alloc.nbytes for alloc in created]
    return LayerTemplate(key, recorded, sizes, kept, outs,
                         [(slot, texels, name) for slot, texels, name, _ in scratch], anchors)


def _generalized(template: LayerTemplate, args: list[Any], trail: list[tuple], model_arrays: frozenset[int],
                 store: Any) -> LayerTemplate | None:
    """``template`` with each constant it binds named by how it is found from the layer's arguments (a chain,
    ``_resolve``), so that it stands for a layer of its kind with other weights; None where a constant has no such
    chain (it came another way than the ConstantStore, or from an array that is neither an argument, a model
    constant nor a builder's static array: it might hold the template layer's own weights)."""
    index: dict[int, tuple[int, str | None]] = {}
    for e, (_sources, result, _lookup) in enumerate(trail):
        index[id(result)] = (e, None)
        if isinstance(result, GTensor) and result.alloc is not None:
            index[id(result.alloc)] = (e, "alloc")
            texture = getattr(result.alloc, "texture", None)  # (gpu-pixel: a texture tensor's texture)
            if texture is not None:
                index[id(texture)] = (e, "texture")

    def chain_of(obj: Any) -> tuple | None:
        hit = index.get(id(obj))
        if hit is None:
            return None
        e, attr = hit
        sources, _result, lookup = trail[e]
        parts: list[tuple[str, Any]] = []
        for source in sources:
            j = next((j for j, a in enumerate(args) if a is source), None)
            if j is not None:
                parts.append(("arg", j))
            elif id(source) in index:
                sub = chain_of(source)
                if sub is None:
                    return None
                parts.append(("chain", sub))
            elif id(source) in model_arrays or store.is_static(source):
                parts.append(("fixed", source))  # (the same array for every layer of the kind)
            else:
                return None
        return lookup, tuple(parts), attr

    chains: list[tuple] = []
    named: dict[int, Ref] = {}

    def general(ref: Ref | None) -> Ref | None:
        if ref is None or ref[0] != "const":
            return ref
        if id(ref[1]) not in named:
            chain = chain_of(ref[1])
            if chain is None:
                raise _NoKey
            named[id(ref[1])] = ("derived", len(chains))
            chains.append(chain)
        return named[id(ref[1])]

    try:
        steps: list[tuple] = []
        for kind, step, *refs in template.steps:
            if kind in ("dispatch", "draw"):
                first, second = refs
                steps.append((kind, step, [general(r) for r in first], [general(r) for r in second]))
            else:
                source, source_offset, target, target_offset, nbytes = refs
                steps.append((kind, step, general(source), source_offset, general(target), target_offset, nbytes))
        outputs = [None if out is None else (general(out[0]), *out[1:]) for out in template.outputs]
    except _NoKey:
        return None
    return replace(template, steps=steps, outputs=outputs, chains=chains)


def _resolve(chain: tuple, args: list[Any]) -> Any:
    """The constant ``chain`` finds from ``args``, or None where it was not made yet. A chain is (lookup, parts,
    attr): ``lookup`` (ConstantStore.note's) applied to the sources ``parts`` name (("arg", j): argument j;
    ("chain", a chain): the derived array it finds; ("fixed", an array)), then the result's ``attr`` ("alloc": its
    allocation, "texture": its texture, None: itself)."""
    lookup, parts, attr = chain
    sources = []
    for kind, value in parts:
        if kind == "arg":
            source = args[value] if value < len(args) else None
            if not isinstance(source, np.ndarray):
                return None
        elif kind == "chain":
            source = _resolve(value, args)
            if source is None:
                return None
        else:
            source = value
        sources.append(source)
    result = lookup(tuple(sources))
    if result is None or attr is None:
        return result
    return result.alloc if attr == "alloc" else result.alloc.texture
