// One step of a scatter reduction: the accumulated value ``acc`` folded with an update ``v`` as numpy's
// ufunc.at folds them (ops/tensor.py _scatter_into), the cpu backend being the oracle: ``how`` 0 add, 1 mul,
// 2 max, 3 min. max and min keep a NaN from either side (numpy's maximum and minimum propagate it; WGSL's max
// and min need not) and give the update where the two compare equal (max(+0, -0) is -0, as numpy's). Float
// sums and products go through common/subnormal.wgsl (include it first), so a fragment shader that flushes
// denormals keeps subnormal values; comparisons are made on sn_key orders for the same reason, with the two
// zeros equal. Integer adds and products wrap as numpy's int32 arithmetic does.

// The order of a non-NaN float read from its bits, -0 and +0 one value.
fn fold_key(x: f32) -> i32 {
    return select(sn_key(x), 0, (bitcast<u32>(x) & 0x7fffffffu) == 0u);
}

fn fold_f32(acc: f32, v: f32, how: u32) -> f32 {
    if (how == 0u) { return sn_add(acc, v); }
    if (how == 1u) { return sn_mul(acc, v); }
    if (is_nan_f32(acc)) { return acc; }
    if (is_nan_f32(v)) { return v; }
    if (how == 2u) { return select(v, acc, fold_key(acc) > fold_key(v)); }
    return select(v, acc, fold_key(acc) < fold_key(v));
}

fn fold_i32(acc: i32, v: i32, how: u32) -> i32 {
    if (how == 0u) { return acc + v; }
    if (how == 1u) { return acc * v; }
    if (how == 2u) { return select(v, acc, acc > v); }
    return select(v, acc, acc < v);
}
