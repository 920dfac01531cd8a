// arg_nan4(v): which lanes of v are NaN, by their bits (a compiler may fold a NaN compare away).
fn arg_nan4(v: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);
}
