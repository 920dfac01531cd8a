// binary4.wgsl's loader of operand {{OPERAND}} (A or B) where it varies along one axis only: the element
// (4 * (i + params[4]) / inner) % dim, which the group's four elements share (inner and dim: the overrides
// {{OPERAND}}_INNER and {{OPERAND}}_DIM).
fn load_{{OPERAND}}(i: u32) -> vec4<f32> {
    return vec4<f32>({{OPERAND}}[((i + pu(4u)) * 4u / {{OPERAND}}_INNER) % {{OPERAND}}_DIM]);
}
