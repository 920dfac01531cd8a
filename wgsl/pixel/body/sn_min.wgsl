// float32 min(a, b): NaN propagates; of a subnormal, the smaller by value (numpy's minimum; common/subnormal.wgsl).
r = select(min(a, b), a + b, is_nan_f32(a) || is_nan_f32(b));
if ((sn_is_sub(a) || sn_is_sub(b)) && !(is_nan_f32(a) || is_nan_f32(b))) { r = select(b, a, sn_key(a) <= sn_key(b)); }
