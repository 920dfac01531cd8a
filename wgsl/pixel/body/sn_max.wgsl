// float32 max(a, b): NaN propagates; of a subnormal, the larger by value (numpy's maximum; common/subnormal.wgsl).
r = select(max(a, b), a + b, is_nan_f32(a) || is_nan_f32(b));
if ((sn_is_sub(a) || sn_is_sub(b)) && !(is_nan_f32(a) || is_nan_f32(b))) { r = select(b, a, sn_key(a) >= sn_key(b)); }
