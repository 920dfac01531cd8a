// MaxPool with its Indices output: the first window tap holding the maximum (padding counts as the
// lowest value), as a flat index into the unpadded input, row-major (storage_order 0) or with the
// spatial dims column-major (1). Params and grid as pool.wgsl (ROW_OUTPUTS outputs an invocation); 27
// storage_order, 28 spatial dims.
// LOWEST: the element type's lowest() (compute/kind/lowest_<T>.wgsl).
#include "common/params.wgsl"
#include "compute/pool_window.wgsl"

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> I: array<i32>;
@group(0) @binding(3) var<uniform> params: Params;

{{LOWEST}}

// Output i, whose window starts at ``start`` in the plane at ``base``.
fn pool_one(i: u32, base: u32, start: vec3<i32>, dil: vec3<i32>, in_d: vec3<i32>) {
    var best = lowest();
    var at = start;
    var first = true;
    for (var k0 = 0; k0 < KD0; k0++) {
        for (var k1 = 0; k1 < KD1; k1++) {
            for (var k2 = 0; k2 < KD2; k2++) {
                let p = start + vec3<i32>(k0, k1, k2) * dil;
                var v = lowest();
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
