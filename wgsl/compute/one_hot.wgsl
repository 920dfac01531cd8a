// OneHot: Y (outer, depth, inner) = on where the index at (outer, inner) equals d, else off.
// Negative indices wrap once; anything else out of range matches nothing (the ONNX spec: an all-off row),
// and so does a NaN float index (the CPU kernel's NaN-to-int64 conversion lands far below -depth).
// Params: 0 n, 1 depth, 2 inner, 3 off bits, 4 on bits.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read> I: array<{{TI}}>;
@group(0) @binding(1) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let depth = pu(1u);
    let inner = pu(2u);
    let t = i / inner;
    let k = i - t * inner;
    let o = t / depth;
    let d = i32(t - o * depth);
    let raw = I[o * inner + k];
    var ix = i32(raw);  // float indices truncate toward zero; beyond the i32 range they saturate
    if (ix < 0) { ix += i32(depth); }
    Y[i] = bitcast<{{T}}>(select(pu(3u), pu(4u), ix == d && raw == raw));
}
