// binary4.wgsl's loader of operand {{OPERAND}} (A or B) where it has the output's shape: its vec4 at group i.
fn load_{{OPERAND}}(i: u32) -> vec4<f32> { return {{OPERAND}}[i]; }
