"""Command streams: a command encoder with at most one open pass, into which a plan's steps are encoded.
``CommandStream`` holds what every GPU backend shares (the encoder, copies, handing the encoder over to be
submitted, the pass timestamps of a profiled run); ``ComputeStream`` opens compute passes and encodes
dispatches, ``RenderStream`` opens render passes over a draw's target textures and encodes draws."""

from __future__ import annotations

import functools
from typing import Any

from wgsentis.backends.gpu.steps import Copy, Dispatch, Draw


class CommandStream:
    """An encoder with at most one open pass: a backend's steps open it, copies close it, ``take()`` hands the
    encoder over (to submit) and starts a fresh one when next needed."""

    def __init__(self, device: Any, labels: bool = False, native: bool = True) -> None:
        self.device = device
        self.native_calls = native  # wgpu-native's calls with arguments built once, where this wgpu-py allows
        self._encoder: Any = device.create_command_encoder(label="wgsentis run")
        self.current_pass: Any = None
        self.pass_timestamps: dict[str, Any] | None = None  # for the next pass opened
        # Where a layer's debug group lives: inside the open pass (compute), or, for a render stream, inside
        # each pass the layer's draws use ("per_pass": a render pass is begun per set of targets, so one layer may
        # span several).
        self.groups_in_pass = True
        self.groups_per_pass = False
        # Pass labels (for captures) cost wgpu-py ~8 us of string conversion a pass: only with debug groups.
        self.pass_label = "wgsentis layers" if labels else None

    @property
    def encoder(self) -> Any:
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder(label="wgsentis run")
        return self._encoder

    def open_pass(self) -> Any:
        """The open pass, begun when none is (each backend begins its own kind)."""
        raise NotImplementedError

    def end_pass(self) -> None:
        if self.current_pass is not None:
            self.current_pass.end()
            self.current_pass = None

    def encoder_for_copies(self) -> Any:
        self.end_pass()
        return self.encoder

    def copy(self, c: Copy) -> None:
        self.end_pass()
        c.encode(self.encoder, self.native_calls)

    def take(self) -> Any:
        """The encoder so far (to submit); later commands go to a fresh one, made when first needed."""
        self.end_pass()
        encoder = self.encoder
        self._encoder = None
        return encoder


class ComputeStream(CommandStream):
    """A command stream of compute passes. ``checked``: wgpu-native calls through wgpu-py's error-checking
    wrappers (recording) or directly (replays of a plan whose every call was checked when recorded);
    ``native`` False: wgpu-py's public methods only."""

    def __init__(self, device: Any, labels: bool = False, checked: bool = True, native: bool = True) -> None:
        super().__init__(device, labels, native)
        self.pipeline: Any = None  # set in the open pass
        self.native = _native_pass_calls(checked) if native else None

    def open_pass(self) -> Any:
        if self.current_pass is None:
            kwargs = {"timestamp_writes": self.pass_timestamps} if self.pass_timestamps else {}
            if self.pass_label:
                kwargs["label"] = self.pass_label
            self.current_pass = self.encoder.begin_compute_pass(**kwargs)
            self.pass_timestamps = None
            self.pipeline = None
        return self.current_pass

    def dispatch(self, d: Dispatch) -> None:
        cpass = self.current_pass if self.current_pass is not None else self.open_pass()
        native = self.native
        if native is not None:
            handle = cpass._internal
            if d.pipeline is not self.pipeline:  # consecutive layers often share one (the matmul's)
                native[0](handle, d.pipeline._internal)
                self.pipeline = d.pipeline
            native[1](handle, 0, d.bind_group._internal, 0, native[3])
            native[2](handle, *d.groups)
            return
        if d.pipeline is not self.pipeline:
            cpass.set_pipeline(d.pipeline)
            self.pipeline = d.pipeline
        cpass.set_bind_group(0, d.bind_group)
        cpass.dispatch_workgroups(*d.groups)

    def step(self, step: Any) -> None:
        """Encode one recorded step (a dispatch or a copy)."""
        if isinstance(step, Dispatch):
            self.dispatch(step)
        else:
            self.copy(step)


class RenderStream(CommandStream):
    """A command stream of render passes: consecutive draws into the same targets share one pass (a pass with
    one draw costs ~90 us on lavapipe, a draw inside a shared pass ~10 us); a draw into other targets, or one
    that reads a texture the open pass renders into, ends it first."""

    def __init__(self, device: Any, labels: bool = False, native: bool = True, checked: bool = True) -> None:
        super().__init__(device, labels, native)
        self.native = _native_render_calls(checked) if native else None
        self.groups_in_pass = False
        # A layer's debug group is pushed inside every pass its draws use, popped before the pass ends: groups
        # on the encoder around passes crash RenderDoc's Vulkan layer in wgpu's encoder finish on lavapipe (two
        # such groups are enough), and RenderDoc's report merges the groups of one name into one layer.
        self.groups_per_pass = True
        self.group: str | None = None  # the label of the layer whose draws are being encoded
        self.group_open = False
        self.pipeline: Any = None
        self.targets: list[Any] = []  # the open pass's color attachments (GTextures)
        self.viewport: tuple[int, int, int] = (0, 0, 0)  # the open pass's viewport: first row, width, height

    def begin_group(self, label: str) -> None:
        """Draws from now on belong to the debug group ``label``, pushed in each pass they use."""
        self.group = label

    def end_group(self) -> None:
        if self.group_open and self.current_pass is not None:
            self.current_pass.pop_debug_group()
        self.group, self.group_open = None, False

    def end_pass(self) -> None:
        if self.group_open and self.current_pass is not None:
            self.current_pass.pop_debug_group()
        self.group_open = False
        super().end_pass()

    def open_pass(self, targets: list[Any] | None = None, draw: Draw | None = None) -> Any:
        """The open render pass over ``targets`` (the open one's when None), begun when needed; None when no
        target is known yet (a pass needs its attachments: one cannot be begun ahead of the first draw).
        ``draw``: the draw that needs it, which keeps the pass descriptor built for its targets."""
        targets = self.targets if targets is None else targets
        if not targets:
            return self.current_pass
        if self.current_pass is None or [id(t.texture) for t in targets] != [id(t.texture) for t in self.targets]:
            self.end_pass()
            if self.native is not None and draw is not None and not self.pass_timestamps:
                self.current_pass = self._begin_native(targets, draw)
            else:
                kwargs: dict[str, Any] = {"timestamp_writes": self.pass_timestamps} if self.pass_timestamps else {}
                if self.pass_label:
                    kwargs["label"] = self.pass_label
                attachments = [{"view": t.view, "load_op": _load_op(draw), "store_op": "store",
                                "clear_value": (0, 0, 0, 0)} for t in targets]
                self.current_pass = self.encoder.begin_render_pass(color_attachments=attachments, **kwargs)
            self.pass_timestamps = None
            self.pipeline = None
            self.targets = list(targets)
            self.viewport = (0, *targets[0].texture.size[:2])  # a pass begins over its whole attachments
        return self.current_pass

    def _begin_native(self, targets: list[Any], draw: Draw) -> Any:
        """Begin a render pass from the descriptor ``draw`` keeps for these targets: wgpu-py builds a pass
        descriptor and its colour attachments in Python on every begin (~100 us a pass with eight targets, most
        of a replay's encoding), so a replay builds each once. It is filled field by field with cffi: through
        wgpu-py's struct helpers a descriptor of two targets took 18-46 us, ~200 of them the first replay of each
        new size of a BERT-style encoder, against 1.4-1.8 us so."""
        api = self.native[4]
        views = tuple(id(t.view) for t in targets)
        cached = draw.pass_descriptor
        if cached is None or cached[0] != views:
            ffi = api.ffi
            load, store = api.enummap[f"LoadOp.{_load_op(draw)}"], api.enummap["StoreOp.store"]
            array = ffi.new("WGPURenderPassColorAttachment[]", len(targets))  # (zeroed: no resolve, clear to 0)
            for attachment, t in zip(array, targets, strict=True):
                attachment.view = t.view._internal
                attachment.depthSlice = api.lib.WGPU_DEPTH_SLICE_UNDEFINED
                attachment.loadOp, attachment.storeOp = load, store
            descriptor = ffi.new("WGPURenderPassDescriptor *")  # (no depth, timestamps or occlusion queries)
            label = api.to_c_string_view(self.pass_label) if self.pass_label else None
            if label is not None:
                descriptor.label = label
            descriptor.colorAttachments, descriptor.colorAttachmentCount = array, len(targets)
            cached = draw.pass_descriptor = (views, descriptor, [t.view for t in targets], array, label)
        raw = api.libf.wgpuCommandEncoderBeginRenderPass(self.encoder._internal, cached[1])
        return api.GPURenderPassEncoder(self.pass_label or "", raw, self.encoder._device)

    def draw(self, d: Draw) -> None:
        # A texture cannot be read and rendered in one pass: compared by the device texture, since several
        # tensors' GTextures may share one (their lifetimes apart).
        reads = {id(r.texture) for r in d.extra if hasattr(r, "texture")}
        if self.current_pass is not None and any(id(t.texture) in reads for t in self.targets):
            self.end_pass()
        rpass = self.open_pass(d.targets, d)
        if self.group is not None and not self.group_open:
            rpass.push_debug_group(self.group)
            self.group_open = True
        native = self.native
        want = (d.origin, *d.region)
        if want != self.viewport and d.region[0]:
            # A tensor in a larger texture of its plan, or some rows of an output drawn in chunks: the fragments
            # of those texels only.
            width, height = d.region
            if native is not None:
                native[5](rpass._internal, 0.0, float(d.origin), float(width), float(height), 0.0, 1.0)
            else:
                rpass.set_viewport(0, d.origin, width, height, 0, 1)
            self.viewport = want
        if native is not None:
            handle = rpass._internal
            if d.pipeline is not self.pipeline:
                native[0](handle, d.pipeline._internal)
                self.pipeline = d.pipeline
            native[1](handle, 0, d.bind_group._internal, 0, native[3])
            native[2](handle, 3, 1, 0, 0)
            return
        if d.pipeline is not self.pipeline:
            rpass.set_pipeline(d.pipeline)
            self.pipeline = d.pipeline
        rpass.set_bind_group(0, d.bind_group)
        rpass.draw(3)

    def step(self, step: Any) -> None:
        """Encode one recorded step (a draw or a copy)."""
        if isinstance(step, Draw):
            self.draw(step)
        else:
            self.copy(step)


def _load_op(draw: Draw | None) -> str:
    """A pass's load op: its targets cleared, or kept for a draw that completes rows an earlier pass drew."""
    return "load" if draw is not None and draw.load else "clear"


@functools.cache
def _native_render_calls(checked: bool = True) -> tuple[Any, Any, Any, Any, Any, Any] | None:
    """wgpu-native's render-pass set-pipeline, set-bind-group and draw calls, its NULL, wgpu-py's native
    backend module (for pass descriptors) and the set-viewport call, or None where this wgpu-py differs (see
    ``_native_pass_calls``)."""
    try:
        from wgpu.backends.wgpu_native import _api

        lib = _api.libf if checked else _api.lib
        needed = [getattr(_api, n) for n in ("to_c_string_view", "GPURenderPassEncoder", "enummap")]
        needed += [_api.enummap["LoadOp.load"], _api.enummap["LoadOp.clear"], _api.enummap["StoreOp.store"],
                   _api.lib.WGPU_DEPTH_SLICE_UNDEFINED, _api.ffi.new("WGPURenderPassColorAttachment[]", 1)[0].view,
                   _api.ffi.new("WGPURenderPassDescriptor *").colorAttachments]
        return (lib.wgpuRenderPassEncoderSetPipeline, lib.wgpuRenderPassEncoderSetBindGroup,
                lib.wgpuRenderPassEncoderDraw, _api.ffi.NULL, _api, lib.wgpuRenderPassEncoderSetViewport)
    except Exception:  # any mismatch with this wgpu-py: its public methods instead
        return None


@functools.cache  # every replay makes a stream: resolve the functions once
def _native_pass_calls(checked: bool = True) -> tuple[Any, Any, Any, Any] | None:
    """wgpu-native's set-pipeline, set-bind-group and dispatch calls and its NULL, or None where this
    wgpu-py differs. A replay encodes ~100 dispatches per model run; wgpu-py's methods build a
    dynamic-offset array for every set_bind_group (13 us a dispatch in all, 4 us this way). ``checked``:
    through wgpu-py's wrappers that turn a validation error into an exception (~1 us a call: two thirds
    of a replay's encoding); replays of a recorded plan, whose every call was checked when it was
    recorded, call the functions directly. Bind groups and pipelines stay alive in the recorded plan."""
    try:
        from wgpu.backends.wgpu_native import _api

        lib = _api.libf if checked else _api.lib
        return (lib.wgpuComputePassEncoderSetPipeline, lib.wgpuComputePassEncoderSetBindGroup,
                lib.wgpuComputePassEncoderDispatchWorkgroups, _api.ffi.NULL)
    except Exception:  # any mismatch with this wgpu-py: its public methods instead
        return None
