// Float Mod with numpy broadcasting: C fmod (FMOD = 1, the dividend's sign) or numpy's mod
// (FMOD = 0, the divisor's sign), both exact. WGSL's % is x - y * trunc(x / y), which loses
// precision for large quotients and gives NaN for an infinite divisor.
// Params: as binary.wgsl (0 n, 1 rank, 2..7 out shape, 8..13 a strides, 14..19 b strides, 20 same-shape).
#include "common/params.wgsl"
#include "common/broadcast.wgsl"
#include "common/fmod.wgsl"

override FMOD: u32 = 1u;

@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let o = broadcast_offsets(i);
    let b = B[o.y];
    var r = fmod_exact(A[o.x], b);
    if (FMOD == 0u && !is_nan(r)) {
        // numpy: a non-zero remainder takes the divisor's sign; zero becomes +-0 like the divisor.
        if (r == 0.0) {
            r = with_sign_of(0.0, b);
        } else if ((r < 0.0) != (b < 0.0)) {
            r = r + b;
        }
    }
    Y[i] = r;
}
