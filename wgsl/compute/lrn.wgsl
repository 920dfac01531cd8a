// LRN across channels: y = x / (bias + alpha/size * sum of x^2 over the channel window)^beta; one
// invocation per element. Params: 0 n, 1 C, 2 inner (elements per channel), 3 window below, 4 window
// above, 5 alpha / size (f32), 6 bias (f32), 7 beta (f32). Override B075: beta is 0.75, computed as
// sqrt(d) * sqrt(sqrt(d)) like the CPU kernel. Override GRID: as batchnorm.wgsl.
#include "common/params.wgsl"

override B075: bool = true;
override GRID: bool = true;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let channels = i32(pu(1u));
    let inner = pu(2u);
    var i: u32;
    var c: i32;
    if (GRID) {
        if (gid.x >= inner) { return; }
        c = i32(gid.y);
        i = (gid.z * u32(channels) + gid.y) * inner + gid.x;
    } else {
        i = flat_index(gid, nwg);
        if (i >= pu(0u)) { return; }
        c = i32((i / inner) % u32(channels));
    }
    let c0 = max(c - pi(3u), 0);
    let c1 = min(c + pi(4u), channels - 1);
    var sum = 0.0;
    for (var k = c0; k <= c1; k++) {
        let v = X[u32(i32(i) + (k - c) * i32(inner))];
        sum += v * v;
    }
    let d = sum * pf(5u) + pf(6u);
    var den: f32;
    if (B075) {
        let root = sqrt(d);
        den = root * sqrt(root);
    } else {
        den = pow(d, pf(7u));
    }
    Y[i] = X[i] / den;
}
