// Shared by the Winograd output transforms (winograd*_out.wgsl), which bind MT, BIAS and Y, declare
// GRID_WORDS (winograd_tiles.wgsl; tp / 4's divisor words follow the grid's) and substitute ACT: which tiles and
// channel an invocation finishes, and storing one output with the bias, the residual when the flags ask for one,
// and the fused activation. Params 4 M, 5 oh, 6 ow, 7 tp, 8 flags (1: bias, 2: add the residual that Y holds
// already (FusedConv)), 9..11 alpha/beta/gamma, 12 first image and 13 first tile row of the block of tiles (see
// winograd_read.wgsl).
fn act(v: f32, alpha: f32, beta: f32, gamma: f32) -> f32 { return {{ACT}}; }

// Invocation i = m * tp / 4 + t / 4 finishes tiles t .. t + 3 (those below T) of output channel m, as the input
// transforms start them: four tiles share its three udivs (one tile an invocation, they cost 1.14x the constant
// grid's GPU time in F(2x2) on lavapipe), and their products are read four tiles a vec4, MT[o + xi * s]; pos is
// tile t's position (tile_position), the others step from it (next_tile).
struct OutSite { t: u32, m: u32, o: u32, s: u32, pos: vec3<u32> }

fn out_site(i: u32) -> OutSite {
    let t4s = pu(GRID_WORDS + 4u);
    let m = udiv(i, t4s, pf(GRID_WORDS + 5u));
    let t = 4u * (i - m * t4s);
    return OutSite(t, m, i, pu(4u) * t4s, tile_position(t));
}

// Where the top-left output of channel m's tile at ``pos`` lies, for tiles ``step`` outputs apart: (its index in
// Y, oy, ox).
fn out_origin(m: u32, pos: vec3<u32>, step: u32) -> vec3<u32> {
    let oy = (pos.y + pu(13u)) * step;
    let ox = pos.x * step;
    return vec3<u32>(((pos.z + pu(12u)) * pu(4u) + m) * pu(5u) * pu(6u) + oy * pu(6u) + ox, oy, ox);
}

// What every output of channel m gets after the transform.
struct Epilogue { bias: f32, residual: bool, alpha: f32, beta: f32, gamma: f32 }

fn epilogue(m: u32) -> Epilogue {
    var b = 0.0;
    if ((pu(8u) & 1u) != 0u) { b = BIAS[m]; }
    return Epilogue(b, (pu(8u) & 2u) != 0u, pf(9u), pf(10u), pf(11u));
}

// Output i: the activation of v plus the bias, plus the residual Y[i] holds when there is one.
fn put(i: u32, v: f32, e: Epilogue) {
    var x = v + e.bias;
    if (e.residual) { x += Y[i]; }
    Y[i] = act(x, e.alpha, e.beta, e.gamma);
}
