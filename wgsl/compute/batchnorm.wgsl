// Inference BatchNormalization: y = x * a + b with a = scale * (1 / sqrt(var + eps)), b = B - mean * a per
// parameter. Override FOLDED: SCALE and BIAS hold a and b already, folded on the host as the CPU kernel folds
// them (norm.bn_affine); the device's sqrt and division need not round as the host's do, so only that form is
// bit-exact. The product x * a is rounded on its own (through opaque()), as the CPU computes it, never fused
// with the add into one FMA.
// Params: 0 n, 1 inner (elements per channel), 2 C, 3 epsilon (f32), 4 per-position flag (spatial=0
// form: one parameter per (channel, position)), 5 alpha, 6 beta, 7 gamma (the fused activation's,
// applied as {{ACT}} of v; identity when none).
// Override GRID: the dispatch is (ceil(inner / WG), C, N) and a plane's channel is the workgroup's y
// (no integer division per element, which lavapipe runs scalar); else 1-D over n.
#include "common/params.wgsl"
#include "common/math.wgsl"

override GRID: bool = true;
override FOLDED: bool = false;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> SCALE: array<f32>;
@group(0) @binding(2) var<storage, read> BIAS: array<f32>;
@group(0) @binding(3) var<storage, read> MEAN: array<f32>;
@group(0) @binding(4) var<storage, read> VAR: array<f32>;
@group(0) @binding(5) var<storage, read_write> Y: array<f32>;
@group(0) @binding(6) var<uniform> params: Params;

fn act(v: f32, alpha: f32, beta: f32, gamma: f32) -> f32 {
    return {{ACT}};
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let inner = pu(1u);
    let channels = pu(2u);
    var i: u32;
    var pos: u32;
    var c: u32;
    if (GRID) {
        pos = gid.x;
        if (pos >= inner) { return; }
        c = gid.y;
        i = (gid.z * channels + c) * inner + pos;
    } else {
        i = flat_index(gid, nwg);
        if (i >= pu(0u)) { return; }
        pos = i % inner;
        c = (i / inner) % channels;
    }
    let p = select(c, c * inner + pos, pu(4u) != 0u);
    var a = SCALE[p];
    var b = BIAS[p];
    if (!FOLDED) {
        a = SCALE[p] * (1.0 / sqrt(VAR[p] + pf(3u)));
        b = BIAS[p] - MEAN[p] * a;
    }
    Y[i] = act(opaque(X[i] * a, opaque_zero()) + b, pf(5u), pf(6u), pf(7u));
}
