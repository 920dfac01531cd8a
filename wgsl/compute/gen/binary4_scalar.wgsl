// binary4.wgsl's loader of operand {{OPERAND}} (A or B) where it is one element: that element, splat.
fn load_{{OPERAND}}(i: u32) -> vec4<f32> { return vec4<f32>({{OPERAND}}[0]); }
