// Driver probe, run once per device (device.py, GPUContext.division_function): each pair's plain
// quotient and its corrected one (math.wgsl's div_rounded), to learn which of the two divides as the
// CPU does on this driver.
#include "common/math.wgsl"

@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;  // (2, n): plain, then corrected

// As params.wgsl's, from the array's length (below 2^31).
fn opaque_zero() -> u32 { return arrayLength(&A) >> 31u; }

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = arrayLength(&A);
    let i = gid.x;
    if (i >= n) { return; }
    Y[i] = div_plain(opaque_zero(), A[i], B[i]);
    Y[n + i] = div_rounded(opaque_zero(), A[i], B[i]);
}
