// Linear and SVM models: Y[r, c] = kernel(X[r, :], W[c, :]) + B[c], in float32, one invocation per element.
// The kernel stage of an SVM has W the support vectors and B zeros; the score stage of every model has the
// LINEAR kernel (a dot product), W its coefficients (an SVM's: laid over the support vectors) and B its
// intercepts. Sums run in feature order.
// Params: 0 rows * columns, 1 columns, 2 features, 3 gamma (f32), 4 coef0 (f32), 5 degree.
// Override KERNEL: 0 linear (x . w), 1 poly ((gamma x . w + coef0)^degree), 2 rbf (exp(-gamma |x - w|^2)),
// 3 sigmoid (tanh(gamma x . w + coef0)).
#include "common/params.wgsl"
#include "common/math.wgsl"

override KERNEL: u32 = 0u;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> W: array<f32>;
@group(0) @binding(2) var<storage, read> B: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let cols = pu(1u);
    let features = pu(2u);
    let x = (i / cols) * features;
    let w = (i % cols) * features;
    var acc = 0.0;
    for (var f = 0u; f < features; f++) {
        if (KERNEL == 2u) {
            let d = X[x + f] - W[w + f];
            acc += d * d;
        } else {
            acc += X[x + f] * W[w + f];
        }
    }
    Y[i] = kernel_of(acc) + B[i % cols];
}

fn kernel_of(acc: f32) -> f32 {
    if (KERNEL == 2u) { return exp_accurate(-pf(3u) * acc); }
    let base = pf(3u) * acc + pf(4u);
    if (KERNEL == 3u) { return tanh_safe(base); }
    if (KERNEL == 1u) {
        var p = 1.0;
        for (var k = 0u; k < pu(5u); k++) { p *= base; }
        return p;
    }
    return acc;
}
