// matmul_common.wgsl's stores for a Y of vec4 (TY vec4<f32>; KernelOptions.vec4_stores): a whole group of four
// columns is loaded (when accumulating) and stored at once; a partial group (q.w is SKIP past the last column)
// takes the scalar stores of its valid lanes.
fn y_get(i: u32) -> f32 { return Y[i / 4u][i % 4u]; }
fn y_set(i: u32, v: f32) { Y[i / 4u][i % 4u] = v; }

fn store4(c: vec4<f32>, m: u32, n: u32, yb: u32, e: Ep, q: vec4<u32>) {
    if (q.w == SKIP) {
        if (q.x != SKIP) { epilogue(c.x, m, q.x, yb, e); }
        if (q.y != SKIP) { epilogue(c.y, m, q.y, yb, e); }
        if (q.z != SKIP) { epilogue(c.z, m, q.z, yb, e); }
        if (q.w != SKIP) { epilogue(c.w, m, q.w, yb, e); }
        return;
    }
    var v = e.scale * c;
    if ((e.flags & 2u) != 0u) { v += Y[(yb + m * e.yrow + e.ycol + n) / 4u]; }
    if ((e.flags & 4u) != 0u) {
        if ((e.flags & 1u) != 0u) { v += vec4<f32>(e.beta * BIAS[m * e.bm]); }
        v = vec4<f32>(act(v.x, e.alpha_, e.beta_, e.gamma_), act(v.y, e.alpha_, e.beta_, e.gamma_),
                      act(v.z, e.alpha_, e.beta_, e.gamma_), act(v.w, e.alpha_, e.beta_, e.gamma_));
    }
    Y[(yb + m * e.yrow + e.ycol + n) / 4u] = v;
}
