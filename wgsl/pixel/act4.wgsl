// act4(v): a layer's fused activation (an expression of v with alpha, beta, gamma: the words pef(0..2)) lane by lane.
fn act(v: f32) -> f32 {
    let alpha = pef(0u);
    let beta = pef(1u);
    let gamma = pef(2u);
    return {{ACT}};
}
fn act4(v: vec4<f32>) -> vec4<f32> { return vec4<f32>(act(v.x), act(v.y), act(v.z), act(v.w)); }
