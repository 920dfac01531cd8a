// binary4.wgsl's loader of operand {{OPERAND}} (A or B) where it has the output's shape: its vec4 at group g.
fn at_{{OPERAND}}(i: u32) -> vec2<u32> { return vec2<u32>(); }
fn load_{{OPERAND}}(g: u32, s: vec2<u32>) -> vec4<f32> { return {{OPERAND}}[g]; }
fn step_{{OPERAND}}(s: vec2<u32>) -> vec2<u32> { return s; }
