// The vertex stage of every pixel program: one triangle that covers the viewport, so the fragment stage runs
// once per texel of the render target (a draw of 3 vertices; no vertex buffer).
@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> {
    let x = f32((i << 1u) & 2u) * 2.0 - 1.0;  // -1, 3, -1
    let y = f32(i & 2u) * 2.0 - 1.0;  // -1, -1, 3
    return vec4<f32>(x, y, 0.0, 1.0);
}
