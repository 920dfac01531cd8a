// Hardmax: 1 where the element's position along frame axis pe(0) is the row's ArgMax (o0), else 0 (pe(1) != 0:
// that axis is x's blocked axis, its four lanes four positions).
select(vec4<f32>(0.0), vec4<f32>(1.0),
       vec4<i32>(vec4<u32>(c.c[pe(0u)]) + select(vec4<u32>(0u), vec4<u32>(0u, 1u, 2u, 3u), pe(1u) != 0u)) == o0)
