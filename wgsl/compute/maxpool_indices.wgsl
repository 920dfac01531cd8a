// MaxPool with its Indices output: the first window tap holding the maximum (padding counts as the
// lowest value), as a flat index into the unpadded input, row-major (storage_order 0) or with the
// spatial dims column-major (1). Params and grid as pool.wgsl; 27 storage_order, 28 spatial dims.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> I: array<i32>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    // Grid: x runs over a plane's outputs, (y, z) over the N * C planes (no division for the plane).
    let plane = gid.y + gid.z * nwg.y;
    let out_d = vec3<u32>(pu(4u), pu(5u), pu(6u));
    let plane_size = out_d.x * out_d.y * out_d.z;
    if (gid.x >= plane_size || plane >= pu(29u)) { return; }
    let i = plane * plane_size + gid.x;
    let in_d = vec3<i32>(pi(1u), pi(2u), pi(3u));
    let q = gid.x / out_d.z;
    let o2 = gid.x - q * out_d.z;
    var o1 = q;
    var o0 = 0u;
    if (out_d.x > 1u) {
        o0 = q / out_d.y;
        o1 = q - o0 * out_d.y;
    }
    let start = vec3<i32>(vec3<u32>(o0, o1, o2) * vec3<u32>(pu(10u), pu(11u), pu(12u))) -
                vec3<i32>(pi(16u), pi(17u), pi(18u));
    let dil = vec3<i32>(pi(13u), pi(14u), pi(15u));
    let base = plane * u32(in_d.x * in_d.y * in_d.z);
    var best = {{LOWEST}};
    var at = start;
    var first = true;
    for (var k0 = 0; k0 < pi(7u); k0++) {
        for (var k1 = 0; k1 < pi(8u); k1++) {
            for (var k2 = 0; k2 < pi(9u); k2++) {
                let p = start + vec3<i32>(k0, k1, k2) * dil;
                var v = {{LOWEST}};
                if (all(p >= vec3<i32>(0)) && all(p < in_d)) {
                    v = X[base + u32((p.x * in_d.y + p.y) * in_d.z + p.z)];
                }
                if (first || v > best) { best = v; at = p; }
                first = false;
            }
        }
    }
    Y[i] = best;
    var flat: i32;
    if (pu(27u) == 0u) {
        flat = (at.x * in_d.y + at.y) * in_d.z + at.z;
    } else {
        // Column-major over the real spatial dims; the padding dims (size 1) sit at the front.
        let nd = pu(28u);
        if (nd == 1u) { flat = at.z; }
        else if (nd == 2u) { flat = at.y + in_d.y * at.z; }
        else { flat = at.x + in_d.x * (at.y + in_d.y * at.z); }
    }
    I[i] = i32(base) + flat;
}
