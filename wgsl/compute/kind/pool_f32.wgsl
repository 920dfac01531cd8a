// pool.wgsl's float32 functions: an Lp pool's term and root (P_ONE: p = 1, |v| summed as it is; else p in the
// word pf(25), 1/p in pf(26)), the root of an L2 pool, and an average correctly rounded (div_f32, math.wgsl).
#include "compute/kind/is_nan_f32.wgsl"
#include "compute/kind/lowest_f32.wgsl"

fn lp_term(v: f32) -> f32 {
    if (P_ONE) { return abs(v); }
    return pow(abs(v), pf(25u));
}

fn lp_root(acc: f32) -> f32 {
    if (P_ONE) { return acc; }
    return pow(acc, pf(26u));
}

fn l2_root(acc: f32) -> f32 { return sqrt(acc); }

fn average(acc: f32, count: i32) -> f32 { return div_f32(acc, f32(max(count, 1))); }
