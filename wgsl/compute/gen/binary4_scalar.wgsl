// binary4.wgsl's loader of operand {{OPERAND}} (A or B) where it is one element: that element, splat.
fn at_{{OPERAND}}(i: u32) -> vec2<u32> { return vec2<u32>(); }
fn load_{{OPERAND}}(g: u32, s: vec2<u32>) -> vec4<f32> { return vec4<f32>({{OPERAND}}[0]); }
fn step_{{OPERAND}}(s: vec2<u32>) -> vec2<u32> { return s; }
