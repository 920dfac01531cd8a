"""gpu-pixel backend: tensors in textures, layers as draws of fragment programs in render passes.

Built on the shared GPU runtime (``backends/gpu``: planning, placement and fallbacks, staging readback, the
render command stream, timestamps, debug groups): what this module adds is the texture tensor storage (the
layout of ``pixel_layout.TextureLayout``, textures shared per plan by lifetime), the ``PixelRecorder`` that the
ops' gpu-pixel builders (``ops/*_pixel.py``) draw with (its generic programs: ``map``, ``lanes``, ``texels``,
``relayout``), and ``PixelProgram``.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Any

import numpy as np

from wgsentis.backends.gpu import shader_gen
from wgsentis.backends.gpu.device import wgsl_source
from wgsentis.backends.gpu.device_tensors import DeviceValue
from wgsentis.backends.gpu.dtypes import TooLargeForDevice, narrowing_expr
from wgsentis.backends.gpu.faults import IndexCheck, reserve_checks
from wgsentis.backends.gpu.memory import UniformArena
from wgsentis.backends.gpu.program import GPUProgram
from wgsentis.backends.gpu.steps import Draw, Plan
from wgsentis.backends.gpu.streams import RenderStream
from wgsentis.backends.gpu.tensors import LOOP_ALLOWANCE, Allocation, GTensor, GTexture, pack_params, pipeline_key
from wgsentis.backends.pixel_layout import MAX_RANK, TextureLayout, addressing_params, texel_kind
from wgsentis.budget import check_device_bytes
from wgsentis.errors import DeviceError
from wgsentis.ir import Layer

BACKEND = "gpu-pixel"
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1


class TextureAllocation(Allocation):
    """A tensor's texture: its ``layout`` and a ``texture`` (a GTexture the planner points at the device texture
    it shares with tensors whose lifetimes are apart from its own)."""

    __slots__ = ("layout", "texture")

    def __init__(self, layout: TextureLayout, born: int) -> None:
        super().__init__(None, layout.texels * 16, reserved=layout.width * layout.height * 16, born=born)
        self.layout = layout
        self.texture = GTexture(None, (layout.height, 4 * layout.width), "")


class TexturePool:
    """Textures a recorded run reuses once the tensors in them are dead, by exact layout class."""

    def __init__(self, program: PixelProgram) -> None:
        self.program = program
        self.free: dict[tuple[str, int, int], list[Any]] = {}

    def acquire(self, layout: TextureLayout, what: str) -> Any:
        free = self.free.get((layout.format, layout.width, layout.height))
        if free:
            return free.pop()
        return self.program.make_texture(layout, what)

    def release(self, layout: TextureLayout, texture: Any) -> None:
        self.free.setdefault((layout.format, layout.width, layout.height), []).append(texture)


class _TextureGroup:
    """Textures that must stay one size: those a many-target draw renders into together (``locked``), or one
    texture alone. A group grows as a whole, so a many-target draw's attachments still match after it."""

    __slots__ = ("height", "locked", "slots", "width")

    def __init__(self, width: int, height: int, locked: bool) -> None:
        self.width, self.height = width, height
        self.slots: list[_TextureSlot] = []
        self.locked = locked


class _TextureSlot:
    """One texture of a plan being packed: its group (which gives its size), the tensors in it and their (born,
    dies) sorted."""

    __slots__ = ("group", "lives", "member_set", "members")

    def __init__(self, group: _TextureGroup) -> None:
        self.group = group
        group.slots.append(self)
        self.members: list[int] = []
        self.member_set: set[int] = set()  # the same, for the conflict check (a set against a set)
        self.lives: list[tuple[int, int]] = []

    @property
    def width(self) -> int:
        return self.group.width

    @property
    def height(self) -> int:
        return self.group.height

    @property
    def locked(self) -> bool:
        return self.group.locked

    def take(self, tensor: int, born: int, dies: int) -> None:
        self.members.append(tensor)
        self.member_set.add(tensor)
        bisect.insort(self.lives, (born, dies))


class _TexturePacking:
    """The textures of a plan's texture tensors, placed greedily in the order given (``PixelProgram.layout_memory``
    says why). A lone tensor takes the free texture it fits in with the least area, else the free one whose
    group grows least where that adds less than its own area, else a new one. A bundle of k tensors drawn
    together takes k free textures that end one size: of a size they fit in (the smallest), else ones whose
    groups grow to one size where that adds less than k textures of their own, else k new ones; the groups it
    takes from become one. A group grows as a whole: the textures a many-target draw renders into stay one size,
    and a tensor slightly larger than them (a row taller) still shares them."""

    def __init__(self, items: list[tuple[TextureLayout, int, int, list[int]]], conflicts: dict[int, set[int]]) -> None:
        self.textures: list[_TextureSlot] = []
        pools: dict[str, list[_TextureSlot]] = {}
        for layout, born, dies, bundle in items:
            width, height = layout.width, layout.height
            against = set().union(*(conflicts.get(i, set()) for i in bundle))
            pool = pools.setdefault(layout.format, [])
            free = []
            # The textures it may lie in: alive at once with none of their members (a bisection of their sorted
            # lives: a Loop's unrolled iterations give tens of thousands of tensors), and no draw reads one while
            # rendering the other (``against``). Inline, not a method: a plan's hundreds of tensors ask it of each.
            for t in pool:
                lives = t.lives
                at = bisect.bisect_left(lives, (born, -1))
                if (at < len(lives) and lives[at][0] <= dies) or (at and lives[at - 1][1] >= born):
                    continue
                if against and not against.isdisjoint(t.member_set):
                    continue
                free.append(t)
            found = self._for_one(free, width, height) if len(bundle) == 1 else \
                self._for_bundle(free, width, height, len(bundle))
            if found is None:
                group = _TextureGroup(width, height, len(bundle) > 1)
                chosen = [_TextureSlot(group) for _ in bundle]
                pool.extend(chosen)
                self.textures.extend(chosen)
            else:
                chosen, (top_w, top_h) = found
                group = chosen[0].group
                for other in {id(t.group): t.group for t in chosen if t.group is not group}.values():
                    for t in other.slots:  # drawn together from now on: one group, one size
                        t.group = group
                    group.slots.extend(other.slots)
                group.width, group.height = top_w, top_h
                group.locked = group.locked or len(bundle) > 1
            for texture, tensor in zip(chosen, bundle, strict=True):
                texture.take(tensor, born, dies)

    @staticmethod
    def _for_one(free: list[_TextureSlot], width: int, height: int) -> tuple[list[_TextureSlot],
                                                                             tuple[int, int]] | None:
        best, best_cost = None, float(width * height)  # a texture of its own costs its own area
        for t in free:
            group = t.group
            area = group.width * group.height
            grown = max(group.width, width) * max(group.height, height)
            # Fitting costs nothing; among those that fit, the smallest is taken (ties: the first). Growing
            # costs the growth of every texture of the group.
            cost = (grown - area) * len(group.slots) if grown > area else -1.0 / area
            if cost < best_cost:
                best, best_cost = t, cost
        if best is None:
            return None
        return [best], (max(best.width, width), max(best.height, height))

    @staticmethod
    def _for_bundle(free: list[_TextureSlot], width: int, height: int,
                    count: int) -> tuple[list[_TextureSlot], tuple[int, int]] | None:
        best, best_cost = None, float(count * width * height)  # textures of their own cost their own area
        groups: dict[int, list[_TextureSlot]] = {}
        for t in free:
            groups.setdefault(id(t.group), []).append(t)
        for size in {(max(t.width, width), max(t.height, height)) for t in free}:
            # k free textures whose groups end this size, the groups that grow least per texture they give first.
            area = size[0] * size[1]
            offers = []
            for ts in groups.values():
                group = ts[0].group
                if group.width <= size[0] and group.height <= size[1]:
                    grow = (area - group.width * group.height) * len(group.slots)
                    offers.append((grow / len(ts), -len(ts), grow, ts))
            offers.sort(key=lambda o: o[:2])
            taken: list[_TextureSlot] = []
            added = 0
            for _per, _n, grow, ts in offers:
                if len(taken) == count:
                    break
                taken.extend(ts[: count - len(taken)])
                added += grow
            if len(taken) < count:
                continue
            cost = added if added else -1.0 / area
            if cost < best_cost:
                best, best_cost = (taken, size), cost
        return best

    @property
    def texels(self) -> int:
        return sum(t.width * t.height for t in self.textures)


class PixelRecorder:
    """What a gpu-pixel program builder uses: allocate outputs (a layout per tensor), upload constants, draw."""

    def __init__(self, program: PixelProgram) -> None:
        self.program = program
        self.ctx = program.ctx
        self.layer: Layer | None = None
        self.layer_index = -1
        self.steps: list[Any] = []
        self.layer_allocs: list[Allocation] = []
        self.scope: Any = None  # a control-flow builder's outer scope (GPUProgram.record_subgraph sets it)
        self.made_and_kept: list[Allocation] = []  # the last builder's own outputs (GPUProgram._place)
        self.index_checks: list[IndexCheck] = []

    def alloc(self, shape: tuple[int, ...] | list[int], dtype: Any = np.float32, axis: int = -1) -> GTensor:
        """A new texture tensor for an output of the current layer, ``axis`` blocked four to a texel."""
        layer = self.layer
        what = f"an output {list(shape)} of layer '{layer.name}' ({layer.op_type})" if layer else "a tensor"
        t = GTensor(None, tuple(shape), dtype)
        t.alloc = self.program.new_texture(self.program.layout_of(t.shape, t.dtype, axis, what), what, layer)
        t.layout = t.alloc.layout
        self.layer_allocs.append(t.alloc)
        return t

    def check_indices(self, bounds: list[int], what: str = "indices", value_error: str = "",
                      negative_ok: bool = True) -> int:
        """A fault slot per bound for this layer's data-driven indices (``faults.reserve_checks``): the checking
        draw (``map(..., faults=True)``) calls ``checked_index(v, len, word)`` (wgsl/common/faults.wgsl).
        ``value_error``: one slot for values the program must refuse instead (``value_fault``), raising that CPU
        kernel error text."""
        return reserve_checks(self, bounds, what, value_error, negative_ok)

    def loops_fit(self, passes: int) -> bool:
        """Whether a fragment program whose invocations each make at most ``passes`` loop passes (counted with
        ``tensors.loop_passes``) runs them all on this device (see ``GPUContext.max_loop_iterations``)."""
        limit = self.ctx.max_loop_iterations
        return limit is None or passes + LOOP_ALLOWANCE <= limit

    def upload(self, value: np.ndarray, name: str = "", axis: int = -1) -> GTensor:
        """A host array as a texture tensor with ``axis`` blocked (constants are uploaded once per program and
        layout, and kept)."""
        return self.program.constant_texture(value, name, axis)

    def tensor(self, x: Any, name: str = "", axis: int | None = None) -> GTensor | None:
        """``x`` as a texture tensor: a host array is uploaded (``axis`` blocked, default the last), a texture
        tensor is switched to ``axis`` when one is given; None for what cannot live in a texture."""
        if isinstance(x, np.ndarray):
            if texel_kind(x.dtype) is None:
                return None
            try:
                return self.upload(x, name, -1 if axis is None else axis)
            except TooLargeForDevice:
                return None
        if isinstance(x, GTensor) and x.layout is not None:
            return x if axis is None else self.relayout(x, axis)
        return None

    def view(self, t: GTensor, shape: tuple[int, ...] | list[int]) -> GTensor | None:
        """``t`` read as ``shape`` without moving a texel, or None where the reshape moves elements."""
        layout = t.layout.view_as(tuple(int(d) for d in shape))
        if layout is None:
            return None
        v = GTensor(t.alloc, layout.shape, t.dtype, t.name, host=None if t.host is None else t.host.reshape(shape))
        v.layout = layout
        return v

    def retype(self, t: GTensor, dtype: Any) -> GTensor:
        """The same texels under another logical dtype of the same texel kind (a narrow type and its wide one)."""
        v = GTensor(t.alloc, t.shape, dtype, t.name, host=None if t.host is None else t.host.astype(dtype))
        v.layout = t.layout
        if texel_kind(v.dtype) != texel_kind(t.dtype):
            raise ValueError(f"retyping {t.dtype.name} as {v.dtype.name} changes the texel kind")
        return v

    def narrowed(self, t: GTensor, dtype: Any) -> GTensor:
        """``t`` (a wide float32/int32 result) brought into narrow ``dtype``'s values: float16 rounding or
        integer wrap-around, as a numpy conversion does."""
        lane = shader_gen.snippet("pixel/body/narrow_lane.wgsl", {"NARROWED": narrowing_expr(dtype, "a")})
        return self.lanes([t], t.shape, dtype, t.layout.axis if t.shape else 0, lane)

    def reshape(self, t: GTensor, shape: tuple[int, ...] | list[int], axis: int = -1) -> GTensor:
        """``t`` as ``shape``: a view where no element moves, else a copy (row-major order kept) with ``axis``
        blocked."""
        v = self.view(t, shape)
        if v is not None:
            return v
        return self.map([t], shape, t.dtype, axis, "pixel/body/reshape_copy.wgsl")

    def relayout(self, t: GTensor, axis: int) -> GTensor:
        """``t`` with ``axis`` blocked: itself when it already is (or the two layouts coincide), else a layout
        switch draw."""
        rank = len(t.shape)
        if rank == 0 or t.layout.axis == axis % rank:
            return t
        if t.shape[t.layout.axis] == 1 and t.shape[axis % rank] == 1:  # both one element wide: the same texels
            v = GTensor(t.alloc, t.shape, t.dtype, t.name, host=t.host)
            v.layout = TextureLayout(t.shape, axis % rank, t.dtype, t.layout.width, t.layout.height)
            return v
        if len(t.shape) > MAX_RANK:
            raise TooLargeForDevice(f"rank past the {MAX_RANK} dims a pixel program addresses")
        out = self.alloc(t.shape, t.dtype, axis)
        if out.size:
            params = [*addressing_params(out.layout), *addressing_params(t.layout)]
            self.draw("pixel/relayout.wgsl", [t], [out], params, subs={"T": t.layout.kind})
        return out

    def static(self, value: np.ndarray) -> np.ndarray:
        """``value``, a builder's module-level array, marked as the program's to keep (``ConstantStore.static``)."""
        return self.program.constants.static(value)

    def derived(self, key: tuple, sources: tuple[np.ndarray, ...], make: Any) -> np.ndarray:
        """A host array computed from constants (packed weights), once per program: ``ConstantStore.derived``."""
        return self.program.constants.derived(key, sources, make)

    def texel_aligned(self, x: GTensor, out: TextureLayout) -> bool:
        """Whether a fragment of ``out`` finds all its lanes' elements of ``x`` (broadcast to ``out``'s shape) in
        one texel of ``x``: ``x`` blocks the same axis (counted from the end) with the same extent, or extent 1."""
        if not out.shape:
            return not x.shape or x.size == 1
        rank, xrank = len(out.shape), len(x.shape)
        from_end = rank - out.axis
        if x.size == 1:
            return True
        if not x.shape or xrank < from_end or xrank - x.layout.axis != from_end:
            return False
        extent = x.shape[x.layout.axis]
        return extent == out.shape[out.axis] or extent == 1

    def lanes(self, inputs: list[GTensor], shape: tuple[int, ...] | list[int], dtype: Any, axis: int, lane: str,
              extra: list[int | float] | None = None, label: str = "", helpers: str = "") -> GTensor:
        """A new tensor of ``shape`` drawn lane by lane from the inputs' lanes: ``lane`` sets ``r`` from the
        scalars ``a``, ``b``, ``c``, ... (input 0, 1, 2, ... broadcast to ``shape``) and words ``pe(i)``. Texel-wise
        loads (wgsl/pixel/same4.wgsl where every input has the output's layout, map4.wgsl where every input is
        texel-aligned with it), else element addressing (map.wgsl). ``lane`` and ``helpers``: WGSL text or .wgsl
        files (``shader_gen.snippet``)."""
        lane, helpers = shader_gen.snippet(lane), shader_gen.snippet(helpers)
        out_layout = self.program.layout_of(tuple(shape), np.dtype(dtype), axis, "an elementwise output")
        kinds = [x.layout.kind for x in inputs]
        if all(x.layout.shape == out_layout.shape and x.layout.axis == out_layout.axis for x in inputs):
            # No addressing at all: the fragment at texel (x, y) reads texel (x, y) of each input.
            out = self.alloc(shape, dtype, axis)
            params = [out.layout.texels, out.layout.shift, *out.layout.lane_params(), *(extra or [])]
            self.draw("pixel/same4.wgsl", inputs, [out], params, label=label,
                      subs={**shader_gen.lane_statements(len(inputs), lane, "texel"), "HELPERS": helpers,
                            "DECLS": shader_gen.texel_inputs(kinds), "OUT": out.layout.kind, "EXTRA": "5"})
            return out
        if all(self.texel_aligned(x, out_layout) for x in inputs):
            # one lane along the blocked axis: spread over four
            forms = ["splat" if x.size == 1 or (x.shape and x.shape[x.layout.axis] == 1) else "whole" for x in inputs]
            subs = {**shader_gen.lane_statements(len(inputs), lane, "c"), "HELPERS": helpers}
            return self._addressed("pixel/map4.wgsl", inputs, shape, dtype, axis, subs, extra, label, forms=forms)
        return self.map(inputs, shape, dtype, axis, shader_gen.element_statements(len(inputs), lane), extra,
                        helpers=helpers, label=label)

    def texels(self, inputs: list[GTensor], shape: tuple[int, ...] | list[int], dtype: Any, axis: int, body: str,
               extra: list[int | float] | None = None, helpers: str = "", label: str = "") -> GTensor:
        """A new tensor of ``shape`` (``axis`` blocked) drawn texel by texel by wgsl/pixel/texels.wgsl: ``body``
        sets the vec4 ``out`` of the texel whose first lane is at ``c`` from the inputs' texels ``x0(d)``, ...
        (the caller guarantees the four lanes of an output texel are those of one input texel). ``body`` and
        ``helpers``: WGSL text or .wgsl files (``shader_gen.snippet``)."""
        subs = {"BODY": shader_gen.snippet(body), "HELPERS": shader_gen.snippet(helpers)}
        return self._addressed("pixel/texels.wgsl", inputs, shape, dtype, axis, subs, extra, label, forms="whole")

    def map(self, inputs: list[GTensor], shape: tuple[int, ...] | list[int], dtype: Any, axis: int, body: str,
            extra: list[int | float] | None = None, helpers: str = "", label: str = "",
            faults: bool = False, subs: dict[str, str] | None = None,
            constants: dict[str, int | float] | None = None, by_index: bool = False) -> GTensor:
        """A new tensor of ``shape`` and ``dtype`` (``axis`` blocked) drawn by wgsl/pixel/map.wgsl: each element
        at coordinates ``c`` (its 6-dim frame) runs ``body``, which sets ``r`` from the inputs' accessors
        ``x0(c)``, ``x1(c)``, ... (``by_index``: also ``x_at(k, c)``) and the words ``extra`` (``pe(i)``,
        ``pef(i)``, ``pei(i)``). ``body`` and ``helpers`` name .wgsl files (``pixel/body/...``) whose
        placeholders ``subs`` fill, or are WGSL text (the builders that still write bodies in Python);
        ``constants``: the override constants those files declare."""
        texts = {"BODY": shader_gen.snippet(body, subs), "HELPERS": shader_gen.snippet(helpers, subs)}
        return self._addressed("pixel/map.wgsl", inputs, shape, dtype, axis, texts, extra, label, faults=faults,
                               constants=constants, by_index=by_index)

    def _addressed(self, shader: str, inputs: list[GTensor], shape: tuple[int, ...] | list[int], dtype: Any,
                   axis: int, subs: dict[str, str], extra: list[int | float] | None, label: str, *,
                   forms: str | list[str] = "element", faults: bool = False,
                   constants: dict[str, int | float] | None = None, by_index: bool = False) -> GTensor:
        """A draw of one of the addressed programs (map, map4, texels.wgsl) into a new tensor: generated
        accessors ``xk(c)`` giving input k's element at coordinates ``c`` (``forms``, per input or for all, as
        ``shader_gen.addressed_inputs``), the addressing words of the output and of every input, then ``extra``
        (pe), and ``subs`` for the program's own placeholders."""
        if len(shape) > MAX_RANK or any(len(i.shape) > MAX_RANK for i in inputs):
            raise TooLargeForDevice(f"rank past the {MAX_RANK} dims a pixel program addresses")
        out = self.alloc(shape, dtype, axis)
        if out.size == 0:
            return out
        decls = shader_gen.addressed_inputs([x.layout.kind for x in inputs], forms, faults=faults, by_index=by_index)
        params: list[int | float] = [*addressing_params(out.layout)]
        for x in inputs:
            params += addressing_params(x.layout)
        params += list(extra or [])
        subs = {**subs, "DECLS": decls, "EXTRA": str(14 * (len(inputs) + 1)), "OUT": out.layout.kind}
        self.draw(shader, inputs, [out], params, subs=subs, label=label, faults=faults, constants=constants)
        return out

    def draw(self, shader: str, inputs: list[GTensor], outputs: list[GTensor], params: list[int | float], *,
             constants: dict[str, int | float] | None = None, subs: dict[str, str] | None = None,
             label: str = "", faults: bool = False, rows: tuple[int, int] | None = None) -> None:
        """Record one draw of ``wgsl/<shader>`` (its fragment stage ``fs_main``, the shared full-screen vertex
        stage) into ``outputs``' textures, which share one size. Bindings: the inputs' textures, then the
        uniform parameter block, then (``faults``) the index fault buffer. ``rows``: (first, count) texel rows
        of the outputs it draws, the others kept as earlier draws left them (an output drawn in chunks)."""
        if all(o.size == 0 for o in outputs):
            return  # nothing to draw
        sizes = {(o.layout.width, o.layout.height) for o in outputs}
        if len(sizes) != 1:
            raise DeviceError(f"draw '{shader}': its outputs must share one texture size, got {sorted(sizes)}")
        formats = tuple(o.layout.format for o in outputs)
        consts = dict(constants or {})
        key = pipeline_key(shader, subs or {}, consts, [(i.layout.kind, i.ndim) for i in inputs],
                           faults=faults, stage="render", targets=formats)
        layer = self.layer
        label = label or (f"{layer.name} ({layer.op_type})" if layer is not None else shader)
        pipeline, bgl = self.ctx.render_pipeline(key, lambda: wgsl_source(shader, subs), consts, label, list(formats),
                                                 owner=self.program)
        words = pack_params(params, shader)
        ubuf, uoffset = self.program.uniforms().allocate(words)
        extra: list[Any] = [i.alloc.texture for i in inputs]
        extra.append({"buffer": ubuf, "offset": uoffset, "size": UniformArena.SLOT})
        if faults:
            buf = self.program.faults.buffer
            extra.append({"buffer": buf, "offset": 0, "size": buf.size})
        # The texels the targets' own textures hold (a view drawn into covers its whole texture, as before).
        first = outputs[0].alloc
        region = (first.layout.width, first.layout.height) if isinstance(first, TextureAllocation) else sizes.pop()
        origin = 0
        if rows is not None:
            origin, region = rows[0], (region[0], rows[1])
        step = Draw(pipeline, None, [o.alloc.texture for o in outputs], self.layer_index, bgl, extra, label,
                    region=region, origin=origin, load=origin > 0, params=words)
        if not self.program.tracing:
            step.bind(self.ctx.device, self.program.native_calls)
        self.steps.append(step)


class PixelProgram(GPUProgram):
    """A graph compiled for the gpu-pixel backend: the shared GPU program over texture tensors."""

    backend = BACKEND

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._textures = TexturePool(self)
        self._constant_textures: dict[tuple[int, int], tuple[np.ndarray, GTensor]] = {}
        self._owned_textures: list[Any] = []
        self._packing_order: int | None = None  # which order of layout_memory's packed this program's plans least
        # The ids of the constant textures' GTextures: the program keeps them to its end (layer_reuse templates
        # may bind them by identity).
        self.constant_texture_ids: set[int] = set()

    def make_recorder(self) -> PixelRecorder:
        self._textures = TexturePool(self)  # each recorded run draws on its own textures
        return PixelRecorder(self)

    def make_stream(self, checked: bool) -> RenderStream:
        return RenderStream(self.ctx.device, self.debug_groups, native=self.native_calls, checked=checked)

    # -- texture tensors ---------------------------------------------------------------------------------------
    def layout_of(self, shape: tuple[int, ...], dtype: np.dtype, axis: int, what: str) -> TextureLayout:
        limit = int(self.ctx.limits.get("max-texture-dimension-2d", 8192))
        try:
            return TextureLayout.of(shape, dtype, axis if shape else 0, max_dim=limit, name=what)
        except DeviceError as exc:
            raise TooLargeForDevice(str(exc)) from None  # the layer runs on the host instead

    def make_texture(self, layout: TextureLayout, what: str) -> Any:
        usage = self.ctx.wgpu.TextureUsage
        texture = self.ctx.create_texture((layout.width, layout.height, 1), layout.format,
                                          usage.TEXTURE_BINDING | usage.RENDER_ATTACHMENT | usage.COPY_SRC
                                          | usage.COPY_DST, "wgsentis tensor", layout.width * layout.height * 16,
                                          what)
        self._owned_textures.append(texture)
        return texture

    def new_texture(self, layout: TextureLayout, what: str, layer: Layer | None = None) -> TextureAllocation:
        """A texture tensor of the recording in progress (virtual while tracing)."""
        control = self.control
        alloc = TextureAllocation(layout, self._tick)
        if layer is not None and control is not None and control.memory_limit is not None:
            check_device_bytes(control, layer, alloc.reserved, self._live_bytes, what)
        if not self.tracing:
            alloc.texture.replace(self._textures.acquire(layout, what), alloc.texture.shape)
        elif self._resize is not None:
            self._resize.inherit(self, alloc)
        self._allocations.append(alloc)
        self._live_bytes += alloc.reserved
        return alloc

    def inherit_allocation(self, alloc: Allocation, old: Allocation) -> bool:
        """A resize's texture tensor takes the base plan's texture of one of the same layout (resize.Resize)."""
        if not isinstance(alloc, TextureAllocation) or not isinstance(old, TextureAllocation):
            return not isinstance(alloc, TextureAllocation) and not isinstance(old, TextureAllocation) \
                and super().inherit_allocation(alloc, old)
        if alloc.layout != old.layout or old.texture.texture is None:
            return False
        alloc.texture = old.texture
        return True

    @staticmethod
    def one_resource(a: Allocation, b: Allocation) -> bool:
        if isinstance(a, TextureAllocation) or isinstance(b, TextureAllocation):
            ta, tb = getattr(a, "texture", None), getattr(b, "texture", None)
            return ta is not None and tb is not None and ta.texture is not None and ta.texture is tb.texture
        return GPUProgram.one_resource(a, b)

    def free_allocation(self, alloc: Allocation) -> None:
        if alloc.dies is not None:
            return  # freed already (see GPUProgram.free_allocation)
        super().free_allocation(alloc)
        if isinstance(alloc, TextureAllocation) and alloc.texture.texture is not None and not self.tracing:
            self._textures.release(alloc.layout, alloc.texture.texture)

    @property
    def weight_bytes(self) -> int:
        """Device bytes of the constant textures (weights, packed or not) and of any constant buffers."""
        return self.constants.nbytes + sum(t.layout.width * t.layout.height * 16
                                           for _value, t in self._constant_textures.values())

    def constant_texture(self, value: np.ndarray, name: str, axis: int = -1) -> GTensor:
        """``value`` as a texture tensor with ``axis`` blocked: the model's constants once per program and
        layout, kept until close; other host values (computed for this run's signature) once per plan and
        layout, kept with it (``GPUProgram.host_values_for``)."""
        blocked = axis % value.ndim if value.ndim else 0
        key = (id(value), blocked)
        values = self.host_values_for(value)
        textures = self._constant_textures if values is None else values.texture_tensors
        hit = textures.get(key)
        if hit is not None and hit[0] is value:
            t = hit[1]
        else:
            layout = self.layout_of(tuple(value.shape), value.dtype, axis, f"constant '{name}'")
            alloc = TextureAllocation(layout, -1)
            alloc.persistent = True
            alloc.texture.replace(self.make_texture(layout, f"constant '{name}'"), alloc.texture.shape)
            t = GTensor(alloc, tuple(value.shape), value.dtype, name, host=value)
            t.layout = layout
            nbytes = self.write(t, self.prepare_upload(value, f"constant '{name}'"))
            if values is None:
                self._constant_textures[key] = (value, t)
                self.constants.uploads.append((name or "constant", nbytes))  # listed with the run's transfers
                self.constant_texture_ids.add(id(alloc.texture))
            else:
                values.keep_texture(key, value, t, alloc.texture.texture, nbytes, name)
        if values is None:  # (a model constant, made or kept: on the trail of a layer that may share its template)
            self.constants.note((value,), t, lambda others: self._kept_texture(others[0], blocked))
        return t

    def _kept_texture(self, value: np.ndarray, blocked: int) -> GTensor | None:
        """The texture tensor of constant ``value`` with axis ``blocked`` blocked, where one was uploaded."""
        hit = self._constant_textures.get((id(value), blocked))
        return hit[1] if hit is not None and hit[0] is value else None

    # -- the storage hooks of GPUProgram ---------------------------------------------------------------------
    def prepare_upload(self, value: np.ndarray, what: str) -> Any:
        value = np.asarray(value)
        if texel_kind(value.dtype) is None:
            raise TooLargeForDevice(f"{what}: dtype {value.dtype.name} cannot live in a texture")
        if value.dtype == np.int64 and value.size and (value.min() < _I32_MIN or value.max() > _I32_MAX):
            raise TooLargeForDevice(f"{what}: int64 values outside the int32 range cannot live on the GPU")
        return value

    def input_tensor(self, name: str, value: np.ndarray | DeviceValue) -> GTensor:
        what = f"tensor '{name}' {list(value.shape)}"
        t = GTensor(None, tuple(value.shape), value.dtype, name)
        t.alloc = self.new_texture(self.layout_of(t.shape, t.dtype, -1, what), what)
        t.layout = t.alloc.layout
        return t

    def write(self, t: GTensor, prepared: Any) -> int:
        layout = t.layout
        texels = layout.pack(prepared)
        self.ctx.queue.write_texture({"texture": t.alloc.texture.texture}, texels,
                                     {"bytes_per_row": layout.width * 16, "rows_per_image": layout.height},
                                     (layout.width, layout.height, 1))
        return int(texels.nbytes)

    def readback_bytes(self, t: GTensor) -> int:
        return t.layout.readback_bytes

    def copy_out(self, encoder: Any, t: GTensor, staging: Any, offset: int) -> None:
        layout = t.layout
        encoder.copy_texture_to_buffer({"texture": t.alloc.texture.texture},
                                       {"buffer": staging, "offset": offset, "bytes_per_row": layout.row_bytes,
                                        "rows_per_image": layout.height}, (layout.width, layout.height, 1))

    def decode(self, t: GTensor, raw: np.ndarray) -> np.ndarray:
        return t.layout.unpack(raw[: t.layout.readback_bytes]).reshape(t.shape).astype(t.dtype, copy=False)

    def binds_device_value(self, value: DeviceValue, t: GTensor) -> bool:
        # A texture copy moves texels: the value must be laid out as the input it is copied into.
        return value.binds_into(self.ctx, self.backend, t.layout)

    def copy_device_value(self, encoder: Any, value: DeviceValue, t: GTensor) -> None:
        value.copy_into(encoder, t.alloc.texture.texture)

    def detach(self, encoder: Any, t: GTensor) -> DeviceValue | None:
        layout = t.layout
        alloc = t.alloc
        if not isinstance(alloc, TextureAllocation) or layout.width != alloc.layout.width:
            return None  # a view addressed otherwise than its texture: read back instead
        # Not make_texture: the program's own textures are destroyed with it, a held tensor outlives it.
        usage = self.ctx.wgpu.TextureUsage
        nbytes = layout.width * layout.height * 16
        texture = self.ctx.create_texture((layout.width, layout.height, 1), layout.format,
                                          usage.TEXTURE_BINDING | usage.COPY_SRC | usage.COPY_DST,
                                          f"wgsentis device tensor {t.name}", nbytes, f"device output '{t.name}'")
        encoder.copy_texture_to_texture({"texture": alloc.texture.texture}, {"texture": texture},
                                        (layout.width, layout.height, 1))
        return DeviceValue(self.ctx, self.backend, texture, t.shape, t.dtype, nbytes, layout=layout, bound=t.bound,
                           name=t.name)

    def layout_memory(self, plan: Plan, end: int) -> None:
        """Textures for the plan's tensors. A tensor lies in the top-left corner of its texture (its layout, not
        the texture's size, addresses it; a draw's viewport is its region), so tensors of any size and of one
        format share a texture when their lifetimes are apart and no draw reads one while rendering another.
        The color attachments of a draw must be one size, so tensors drawn together (the output tiles of a
        many-target draw) are placed as one bundle in as many textures that are always one size (a group, which
        grows as a whole). Greedy, in several orders, the smallest kept: the free texture (or set) it fits in
        with the least area, else the one whose group grows least where that adds less than a texture of its
        own, else a new one."""
        allocs = [a for a in plan.allocations if isinstance(a, TextureAllocation)]
        index = {id(a.texture): i for i, a in enumerate(allocs)}
        conflicts: dict[int, set[int]] = {}
        drawn_with = list(range(len(allocs)))  # union-find over tensors drawn together

        def root(i: int) -> int:
            while drawn_with[i] != i:
                drawn_with[i] = drawn_with[drawn_with[i]]
                i = drawn_with[i]
            return i

        for step in plan.steps:
            if isinstance(step, Draw):
                reads = [index[id(r)] for r in step.extra if id(r) in index]
                written = [index[id(t)] for t in step.targets if id(t) in index]
                for w in written[1:]:
                    drawn_with[root(w)] = root(written[0])
                for w in written:
                    for r in reads:
                        if r != w:
                            conflicts.setdefault(r, set()).add(w)
                            conflicts.setdefault(w, set()).add(r)
        bundles: dict[int, list[int]] = {}
        for i in range(len(allocs)):
            bundles.setdefault(root(i), []).append(i)
        spans = [(a.born, end if a.dies is None else a.dies) for a in allocs]
        items = [(allocs[b[0]].layout, min(spans[i][0] for i in b), max(spans[i][1] for i in b), b)
                 for b in bundles.values()]
        # Five orders, the smallest result kept: earliest first; largest first (the large tensors' textures made
        # first, the small ones fitted into them wherever they are free); largest first with the many-target
        # bundles before every lone tensor (their groups made before lone tensors take textures they could have
        # shared); largest first, the last to die first among equals; and the bundles first, each by birth. No
        # one order is the smallest on every reference model: the third is on most, the fourth on ResNet-50
        # (1.42x its live set, 1.54x by the first three), the fifth on AlexNet (1.40x, 1.46x) and ShuffleNet.
        def size(it: tuple) -> tuple:
            return (-it[0].width * it[0].height, it[1], it[3][0])

        keys = [lambda it: (it[1], it[3][0]), size, lambda it: (len(it[3]) == 1, *size(it)),
                lambda it: (-it[0].width * it[0].height, -it[2], it[3][0]),
                lambda it: (len(it[3]) == 1, it[1], it[3][0])]
        # The program's first plan tries them all; later ones (a new input size, planned again: a decoder's every
        # step) only the one that won, the packing's cost a fifth.
        tried = range(len(keys)) if self._packing_order is None else [self._packing_order]
        packings = {k: _TexturePacking(sorted(items, key=keys[k]), conflicts) for k in tried}
        best = min(packings, key=lambda k: packings[k].texels)
        self._packing_order, packed = best, packings[best]
        made = [self.make_texture(dataclasses.replace(allocs[t.members[0]].layout, width=t.width, height=t.height),
                                  f"a tensor texture of '{self.graph.name}'") for t in packed.textures]
        for texture, slot in zip(made, packed.textures, strict=True):
            view = texture.create_view()  # one for all its tensors
            for i in slot.members:
                allocs[i].texture.replace(texture, allocs[i].texture.shape, view)
        total = 16 * packed.texels
        plan.arenas, plan.arena_bytes = [], total

    def close(self) -> None:
        if not self._closed:
            super().close()
            for texture in self._owned_textures:
                texture.destroy()
            self._owned_textures = []
            self._constant_textures.clear()


__all__ = ["BACKEND", "PixelProgram", "PixelRecorder", "TextureAllocation"]
