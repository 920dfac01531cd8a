// Y[i] = a value of the flat index i and the parameters, as the bits of T (every value is computed in its own type
// and bitcast, exactly, to the element type). Override FILL: 0 a fill (ConstantOfShape, Dropout's mask): every
// element the bits pu(1); 1 an identity matrix (EyeLike): pu(3) where column - row == pi(2) (pu(1) columns), else
// pu(4); 2 an int32 Range: pi(1) + i * pi(2); 3 a float32 Range: fma(i, pf(2), pf(1)), start + i * delta rounded
// once, as the CPU kernel's float64 sum rounded to float32.
// Params: 0 n, then per FILL (see tensor_gpu.py, generators_gpu.py).
#include "common/params.wgsl"

override FILL: u32 = 0u;

@group(0) @binding(0) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(1) var<uniform> params: Params;

fn value_bits(i: u32) -> u32 {
    if (FILL == 1u) { return select(pu(4u), pu(3u), i32(i % pu(1u)) - i32(i / pu(1u)) == pi(2u)); }
    if (FILL == 2u) { return bitcast<u32>(pi(1u) + i32(i) * pi(2u)); }
    if (FILL == 3u) { return bitcast<u32>(fma(f32(i), pf(2u), pf(1u))); }
    return pu(1u);
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    Y[i] = bitcast<{{T}}>(value_bits(i));
}
