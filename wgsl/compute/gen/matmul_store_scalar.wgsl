// matmul_common.wgsl's stores for a Y of f32 (TY f32): one epilogue per element.
fn y_get(i: u32) -> f32 { return Y[i]; }
fn y_set(i: u32, v: f32) { Y[i] = v; }

fn store4(c: vec4<f32>, m: u32, n: u32, yb: u32, e: Ep, q: vec4<u32>) {
    if (q.x != SKIP) { epilogue(c.x, m, q.x, yb, e); }
    if (q.y != SKIP) { epilogue(c.y, m, q.y, yb, e); }
    if (q.z != SKIP) { epilogue(c.z, m, q.z, yb, e); }
    if (q.w != SKIP) { epilogue(c.w, m, q.w, yb, e); }
}
