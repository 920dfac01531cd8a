// ArgMax / ArgMin along an axis too long for one lane's loop, its second draw: each element's position along frame
// axis pe(0) (pe(1) != 0: that axis is x's blocked axis, its four lanes four positions) where it is the row's best
// o0, a NaN where the best is a NaN (NaN wins, as in numpy), else pef(2), a key no position beats; a min (first
// best) or max (last best) over the axis then picks the index. Positions are exact in float32 below 2^24.
select(vec4<f32>(pef(2u)),
       vec4<f32>(vec4<u32>(c.c[pe(0u)]) + select(vec4<u32>(0u), vec4<u32>(0u, 1u, 2u, 3u), pe(1u) != 0u)),
       select(x == o0, arg_nan4(x), arg_nan4(o0)))
