// LpNormalization: x / norm, 0 where the norm is 0 (o0 the row's L1 or L2 norm).
select(div4(x, o0), vec4<f32>(0.0), o0 == vec4<f32>(0.0))
