"""A live window that shows one layer's activation channels as an image grid (``wgsentis view``).

Each presented frame runs exactly one inference on a GPU backend (gpu-compute or gpu-pixel, with debug groups),
reads the chosen layer's output (exposed with ``model.add_output``), lays its channels out as a
grid, normalises each channel to [0, 1], colours it, uploads it as a texture and draws it with a
full-screen render pass into the window (glfw through ``rendercanvas``). Because every frame ends
in a present, RenderDoc's ordinary frame capture (F12 / PrtScn, or ``renderdoccmd capture``)
captures one whole inference plus its display.
"""

from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from wgsentis.backends.gpu.device import get_context, map_for_reading, wgsl_source
from wgsentis.errors import DeviceError, InputError

_SHADER = "view/grid.wgsl"  # the live viewer's draw


def channel_grid(activation: np.ndarray, gap: int = 1) -> np.ndarray:
    """Lay out the channels of the first batch item of ``activation`` as a near-square grid.

    (N, C, H, W) -> C tiles of HxW; (N, C, L) -> C rows of length L; (N, F) and (F,) -> one row.
    Each channel is normalised to [0, 1] on its own (a constant channel is 0). Gaps are NaN.
    Returns a float32 image (rows*(H+gap)-gap, cols*(W+gap)-gap).
    """
    a = np.asarray(activation, dtype=np.float32)
    if a.size == 0:
        raise InputError(f"activation of shape {list(a.shape)} is empty: nothing to show")
    if a.ndim >= 3:
        a = a[0]
        a = a.reshape(-1, *a.shape[-2:]) if a.ndim >= 3 else a[:, None, :]  # (C, H, W)
    else:
        a = a.reshape(1, 1, -1) if a.ndim <= 1 else a[:1][None]  # (1, 1, F)
    c, h, w = a.shape
    flat = a.reshape(c, -1)
    lo, hi = flat.min(axis=1), flat.max(axis=1)
    span = np.where(hi > lo, hi - lo, 1.0)
    norm = ((flat - lo[:, None]) / span[:, None]).reshape(c, h, w)
    cols = math.ceil(math.sqrt(c))
    rows = math.ceil(c / cols)
    out = np.full((rows * (h + gap) - gap, cols * (w + gap) - gap), np.nan, np.float32)
    for k in range(c):
        r, q = divmod(k, cols)
        out[r * (h + gap): r * (h + gap) + h, q * (w + gap): q * (w + gap) + w] = norm[k]
    return out


def colorize(grid: np.ndarray) -> np.ndarray:
    """A [0, 1] grid (NaN = gap) as RGBA8 with a blue-to-yellow colour map; gaps dark grey."""
    t = np.nan_to_num(grid, nan=0.0)[..., None]
    low, mid, high = np.array([0.05, 0.03, 0.35]), np.array([0.1, 0.6, 0.55]), np.array([0.99, 0.9, 0.15])
    rgb = np.where(t < 0.5, low + (mid - low) * (t * 2), mid + (high - mid) * (t * 2 - 1))
    rgb[np.isnan(grid)] = 0.15
    rgba = np.concatenate([rgb, np.ones_like(t)], axis=-1)
    return np.ascontiguousarray((np.clip(rgba, 0, 1) * 255 + 0.5).astype(np.uint8))


def write_png(path: str | Path, rgba: np.ndarray) -> None:
    """Write an (H, W, 4) uint8 image as a PNG (standard library only)."""
    h, w = rgba.shape[:2]
    raw = b"".join(b"\x00" + rgba[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
    Path(path).write_bytes(png)


class LayerView:
    """Runs ``model`` and turns ``layer``'s output into a colour grid each frame."""

    def __init__(self, model: Any, layer: str, inputs: dict[str, np.ndarray], backend: str = "gpu-compute") -> None:
        from wgsentis.worker import Worker

        self.tensor = model.add_output(layer)
        self.layer = layer
        self.inputs = inputs
        self.worker = Worker(model, backend, debug_groups=True)
        self.frames = 0

    def image(self) -> np.ndarray:
        """One inference; the layer's channel grid as RGBA8 (H, W, 4)."""
        out = self.worker.run(self.inputs)[self.tensor]
        self.frames += 1
        return colorize(channel_grid(out))

    def close(self) -> None:
        self.worker.close()


class Window:
    """A glfw window (rendercanvas) that draws an RGBA8 image with a full-screen render pass."""

    def __init__(self, title: str, image_shape: tuple[int, int], scale: int = 0) -> None:
        try:
            from rendercanvas.glfw import RenderCanvas
        except ImportError as exc:
            raise DeviceError(f"the viewer needs glfw and rendercanvas (pip install -e '.[view]'): {exc}") from None
        h, w = image_shape
        scale = scale or max(1, min(8, 768 // max(h, w, 1)))
        try:
            self.canvas = RenderCanvas(size=(w * scale, h * scale), title=title, update_mode="manual",
                                       present_method="screen", vsync=False)
        except Exception as exc:
            raise DeviceError(f"cannot open a window ({type(exc).__name__}: {exc}); is DISPLAY set to a running "
                              "X server (e.g. Xvfb :99)?") from None
        self.canvas.set_logical_size(w * scale, h * scale)
        self.ctx = get_context()
        wgpu = self.ctx.wgpu
        self.present = self.canvas.get_context("wgpu")
        self.format = self.present.get_preferred_format(self.ctx.adapter)
        self.present.configure(device=self.ctx.device, format=self.format,
                               usage=wgpu.TextureUsage.RENDER_ATTACHMENT | wgpu.TextureUsage.COPY_SRC)
        dev = self.ctx.device
        module = dev.create_shader_module(code=wgsl_source(_SHADER), label="wgsentis view")
        self.pipeline = dev.create_render_pipeline(
            layout="auto", label="wgsentis view",
            vertex={"module": module, "entry_point": "vs_main"},
            fragment={"module": module, "entry_point": "fs_main", "targets": [{"format": self.format}]},
            primitive={"topology": "triangle-list"},
        )
        self.sampler = dev.create_sampler(mag_filter="nearest", min_filter="nearest", label="wgsentis view")
        self.texture: Any = None
        self.bind_group: Any = None
        self.last_frame: np.ndarray | None = None

    def closed(self) -> bool:
        return bool(self.canvas.get_closed())

    def _texture_for(self, h: int, w: int) -> None:
        if self.texture is not None and self.texture.size[:2] == (w, h):
            return
        usage = self.ctx.wgpu.TextureUsage
        self.texture = self.ctx.device.create_texture(size=(w, h, 1), format="rgba8unorm", label="wgsentis view grid",
                                                      usage=usage.TEXTURE_BINDING | usage.COPY_DST)
        self.bind_group = self.ctx.device.create_bind_group(
            layout=self.pipeline.get_bind_group_layout(0), label="wgsentis view",
            entries=[{"binding": 0, "resource": self.texture.create_view()},
                     {"binding": 1, "resource": self.sampler}])

    def show(self, rgba: np.ndarray, read_back: bool = False) -> None:
        """Upload ``rgba`` (H, W, 4 uint8), draw it into the window and present; with ``read_back`` keep
        what was drawn in ``last_frame`` (H, W, 4 RGBA)."""
        h, w = rgba.shape[:2]
        self._texture_for(h, w)
        self.ctx.queue.write_texture({"texture": self.texture}, rgba, {"bytes_per_row": 4 * w, "rows_per_image": h},
                                     (w, h, 1))

        def draw() -> None:
            target = self.present.get_current_texture()
            encoder = self.ctx.device.create_command_encoder(label="wgsentis view frame")
            rpass = encoder.begin_render_pass(label="wgsentis view", color_attachments=[{
                "view": target.create_view(), "clear_value": (0, 0, 0, 1), "load_op": "clear", "store_op": "store"}])
            rpass.set_pipeline(self.pipeline)
            rpass.set_bind_group(0, self.bind_group)
            rpass.draw(3)
            rpass.end()
            staging = None
            if read_back:
                tw, th = target.size[:2]
                row = (4 * tw + 255) // 256 * 256
                usage = self.ctx.wgpu.BufferUsage
                staging = self.ctx.device.create_buffer(size=row * th, usage=usage.COPY_DST | usage.MAP_READ,
                                                        label="wgsentis view readback")
                encoder.copy_texture_to_buffer({"texture": target}, {"buffer": staging, "bytes_per_row": row,
                                                                     "rows_per_image": th}, (tw, th, 1))
            self.ctx.queue.submit([encoder.finish()])
            if staging is not None:
                map_for_reading(staging, "the viewer's frame")
                raw = np.frombuffer(staging.read_mapped(copy=True), np.uint8).reshape(th, row)[:, : 4 * tw]
                staging.unmap()
                img = raw.reshape(th, tw, 4).copy()
                if self.format.startswith("bgra"):
                    img = img[..., [2, 1, 0, 3]]
                self.last_frame = img

        self.canvas.request_draw(draw)
        self.canvas.force_draw()

    def close(self) -> None:
        self.canvas.close()


def run_view(model: Any, layer: str, inputs: dict[str, np.ndarray], *, frames: int | None = None,
             screenshot: str | Path | None = None, scale: int = 0, rdc_frame: str | Path | None = None,
             overwrite: bool = False, backend: str = "gpu-compute") -> dict[str, Any]:
    """Show ``layer`` live until the window closes (or for ``frames`` frames). With ``screenshot``,
    the last presented frame is read back and written as a PNG; with ``rdc_frame``, RenderDoc's
    frame capture of the second frame (one inference and its display) is written there. Returns a
    small summary."""
    if frames is not None and frames < 1:
        raise InputError(f"frames={frames}: must be at least 1")
    if rdc_frame is None:
        return _run_view(model, layer, inputs, frames, screenshot, scale, None, backend)
    from wgsentis import renderdoc

    if frames is not None and frames < 3:
        raise InputError(f"frames={frames}: a frame capture needs at least 3 frames")
    renderdoc.enable()  # before the GPU context: RenderDoc must hook Vulkan and the swapchain
    with renderdoc.frame_capture(rdc_frame, overwrite=overwrite) as cap:
        summary = _run_view(model, layer, inputs, frames, screenshot, scale, renderdoc.api(), backend)
    summary["rdc_frame"] = str(cap.path)
    return summary


def _run_view(model: Any, layer: str, inputs: dict[str, np.ndarray], frames: int | None,
              screenshot: str | Path | None, scale: int, rd: Any, backend: str = "gpu-compute") -> dict[str, Any]:
    from rendercanvas.glfw import poll_glfw_briefly

    view = LayerView(model, layer, inputs, backend)
    first = view.image()
    window = Window(f"wgsentis view: {layer}", first.shape[:2], scale)
    shown = 0
    try:
        image = first
        while not window.closed():
            last = frames is not None and shown + 1 >= frames
            if rd is not None and shown == 1:
                rd.trigger()  # RenderDoc captures the next frame: one inference plus its draw and present
            window.show(image, read_back=last and screenshot is not None)
            shown += 1
            poll_glfw_briefly(0)
            if last:
                break
            image = view.image()
    finally:
        window.close()
        view.close()
    summary: dict[str, Any] = {"layer": layer, "tensor": view.tensor, "frames": shown, "inferences": view.frames,
                               "grid": list(first.shape[:2])}
    if screenshot is not None and window.last_frame is not None:
        write_png(screenshot, window.last_frame)
        summary["screenshot"] = str(screenshot)
        summary["screenshot_std"] = float(window.last_frame[..., :3].std())
    return summary
