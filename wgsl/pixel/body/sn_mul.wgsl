// float32 a * b keeping subnormals (common/subnormal.wgsl), as the cpu backend computes it.
r = sn_mul(a, b);
