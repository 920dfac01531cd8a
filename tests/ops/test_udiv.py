"""wgsl/common/udiv.wgsl: exact u32 division by a run-time divisor through its f32 reciprocal (the shaders that
keep sizes in uniforms instead of override constants divide with it), checked against numpy on the device for
edge pairs and random pairs over its whole domain (n < 2^31, 1 <= d <= 2^24)."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_check
from wgsentis.backends.gpu.device import get_context, wgsl_source
from wgsentis.backends.gpu.tensors import udiv_words

pytestmark = gpu_check.requires_gpu

_PROBE = """
@group(0) @binding(0) var<storage, read> N: array<u32>;
@group(0) @binding(1) var<storage, read> D: array<u32>;
@group(0) @binding(2) var<storage, read> R: array<f32>;
@group(0) @binding(3) var<storage, read_write> Q: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 64u;
    if (i >= arrayLength(&Q)) { return; }
    Q[i] = udiv(N[i], D[i], R[i]);
}
"""


def _divide_on_device(n: np.ndarray, d: np.ndarray) -> np.ndarray:
    ctx = get_context()
    device, usage = ctx.device, ctx.wgpu.BufferUsage
    module = device.create_shader_module(code=wgsl_source("common/udiv.wgsl") + _PROBE)
    pipeline = device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
    rcp = np.array([udiv_words(int(v))[1] for v in d], np.float32)
    buffers = [device.create_buffer_with_data(data=a.tobytes(), usage=usage.STORAGE) for a in (n, d, rcp)]
    out = device.create_buffer(size=n.nbytes, usage=usage.STORAGE | usage.COPY_SRC)
    entries = [{"binding": k, "resource": {"buffer": b, "offset": 0, "size": b.size}}
               for k, b in enumerate([*buffers, out])]
    group = device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)
    encoder = device.create_command_encoder()
    cpass = encoder.begin_compute_pass()
    cpass.set_pipeline(pipeline)
    cpass.set_bind_group(0, group)
    groups = -(-n.size // 64)
    cpass.dispatch_workgroups(min(groups, 65535), -(-groups // 65535))
    cpass.end()
    ctx.queue.submit([encoder.finish()])
    return np.frombuffer(ctx.queue.read_buffer(out), np.uint32)


def test_udiv_is_exact_at_the_edges_and_on_random_pairs():
    rng = np.random.default_rng(31)
    divisors = [1, 2, 3, 4, 5, 7, 12, 56, 112, 255, 256, 641, 3136, 12544, 65535, 65536, 1 << 20, (1 << 24) - 1,
                1 << 24]
    pairs = []
    for d in divisors:
        for q in [0, 1, 2, 3, (1 << 31) // d - 1, (1 << 31) // d]:
            for r in [0, 1, d - 1]:
                n = q * d + r
                if 0 <= n < (1 << 31) and r < d:
                    pairs.append((n, d))
        pairs.extend((int(n), d) for n in rng.integers(0, 1 << 31, 200))
    d_random = rng.integers(1, (1 << 24) + 1, 20000)
    n_random = rng.integers(0, 1 << 31, 20000)
    n_small = rng.integers(0, 1 << 16, 20000)  # small quotients and remainders near d
    d_small = rng.integers(1, 1 << 12, 20000)
    n = np.concatenate([np.array([p[0] for p in pairs]), n_random, n_small]).astype(np.uint32)
    d = np.concatenate([np.array([p[1] for p in pairs]), d_random, d_small]).astype(np.uint32)
    got = _divide_on_device(n, d)
    want = n // d
    wrong = np.flatnonzero(got != want)
    assert wrong.size == 0, [(int(n[k]), int(d[k]), int(got[k]), int(want[k])) for k in wrong[:10]]


@pytest.mark.parametrize("divisor", [0, -1, (1 << 24) + 1])
def test_udiv_words_refuse_divisors_outside_the_domain(divisor):
    with pytest.raises(ValueError, match="divisor"):
        udiv_words(divisor)
