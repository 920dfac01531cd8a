// binary4.wgsl's loader of operand {{OPERAND}} (A or B) where it varies along one axis only: the element
// (4 * (g + params[4]) / inner) % dim, which the group's four elements share. Its words from params {{WORD}}:
// inner / 4 and its f32 reciprocal, dim and its reciprocal (udiv's divisor words), then s % (inner / 4) and
// (s / (inner / 4)) % dim for the step of s groups (binary4.wgsl's params[5]). inner is a multiple of 4, so
// 4g / inner = g / (inner / 4).
// The state: (r, e), the group's place in its run of inner / 4 groups and the element.
fn at_{{OPERAND}}(i: u32) -> vec2<u32> {
    let g = i + pu(4u);
    let inner = pu({{WORD}}u);
    let dim = pu({{WORD}}u + 2u);
    let q = udiv(g, inner, pf({{WORD}}u + 1u));
    return vec2<u32>(g - q * inner, q - udiv(q, dim, pf({{WORD}}u + 3u)) * dim);
}

fn load_{{OPERAND}}(g: u32, s: vec2<u32>) -> vec4<f32> { return vec4<f32>({{OPERAND}}[s.y]); }

// s groups on: r + s % (inner / 4) carries at most one run into the element, which wraps at most once.
fn step_{{OPERAND}}(s: vec2<u32>) -> vec2<u32> {
    let inner = pu({{WORD}}u);
    let dim = pu({{WORD}}u + 2u);
    var r = s.x + pu({{WORD}}u + 4u);
    var e = s.y + pu({{WORD}}u + 5u);
    if (r >= inner) {
        r -= inner;
        e += 1u;
    }
    if (e >= dim) { e -= dim; }
    return vec2<u32>(r, e);
}
