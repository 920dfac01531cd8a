// float32 a / b (the device's exact division) keeping subnormal operands and results (common/subnormal.wgsl).
let q = div_f32(a, b);
r = q;
if (sn_div_needed(a, b, q)) { let s = sn_div_scaled(a, b); r = sn_div_finish(div_f32(s.x, s.y), s); }
