// The post transforms of the ai.onnx.ml models (ops/ml.py logistic, probit), in float32: included by the
// tree, linear and SVM programs of both GPU backends (compute/tree_finish.wgsl, compute/ml_rows.wgsl).
#include "common/math.wgsl"

// Logistic without overflow: exp of -|x| only, the sign picking the side.
fn logistic(x: f32) -> f32 {
    let e = 1.0 / (1.0 + exp_accurate(-abs(x)));
    return select(e, 1.0 - e, x < 0.0);
}

// sqrt(2) erfinv(2x - 1) by the closed-form erfinv approximation (a = 0.147) in f32, as ONNX Runtime.
fn probit(x: f32) -> f32 {
    let y = x * 2.0 - 1.0;
    let w = (1.0 - y) * (1.0 + y);
    let l = log1p_accurate(w - 1.0);  // w - 1 is exact; drivers' log is coarse near 1, where this cancels
    let v = 2.0 / (3.14159 * 0.147) + 0.5 * l;
    let v2 = 1.0 / 0.147 * l;
    let inv = select(1.0, -1.0, y < 0.0) * sqrt(-v + sqrt(v * v - v2));
    return 1.41421356 * inv;
}
