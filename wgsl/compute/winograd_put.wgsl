// Shared by the Winograd output transforms (winograd*_out.wgsl), which bind Y and substitute ACT:
// storing one output with the fused activation, after the residual when the flags ask for one.
fn act(v: f32, alpha: f32, beta: f32, gamma: f32) -> f32 { return {{ACT}}; }

// Output i: the activation of v, plus the residual Y[i] holds when there is one (FusedConv).
fn put(i: u32, v: f32, residual: bool, alpha: f32, beta: f32, gamma: f32) {
    var x = v;
    if (residual) { x += Y[i]; }
    Y[i] = act(x, alpha, beta, gamma);
}
