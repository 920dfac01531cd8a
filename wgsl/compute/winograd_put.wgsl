// Shared by the Winograd output transforms (winograd*_out.wgsl), which bind MT, BIAS and Y, declare
// TILES and substitute ACT: which tile and channel an invocation finishes, and storing one output with
// the bias, the residual when the flags ask for one, and the fused activation. Params 4 M, 5 oh, 6 ow,
// 7 tp, 8 flags (1: bias, 2: add the residual that Y holds already (FusedConv)), 9..11 alpha/beta/gamma,
// 12 first image and 13 first tile row of the block of tiles (see winograd_read.wgsl).
fn act(v: f32, alpha: f32, beta: f32, gamma: f32) -> f32 { return {{ACT}}; }

// Invocation i finishes tile t of output channel m; its products are MT[o + xi * s].
struct OutSite { t: u32, m: u32, o: u32, s: u32 }

fn out_site(i: u32) -> OutSite {
    let t = i % TILES;
    let m = i / TILES;
    return OutSite(t, m, m * pu(7u) + t, pu(4u) * pu(7u));
}

// What every output of channel m gets after the transform.
struct Epilogue { bias: f32, residual: bool, alpha: f32, beta: f32, gamma: f32 }

fn epilogue(m: u32) -> Epilogue {
    var b = 0.0;
    if ((pu(8u) & 1u) != 0u) { b = BIAS[m]; }
    return Epilogue(b, (pu(8u) & 2u) != 0u, pf(9u), pf(10u), pf(11u));
}

// Where the tile's top-left output lies for tiles ``step`` apart: (its index in Y, oy, ox).
fn out_origin(site: OutSite, step: u32) -> vec3<u32> {
    let pos = tile_position(site.t);
    let oy = (pos.y + pu(13u)) * step;
    let ox = pos.x * step;
    return vec3<u32>(((pos.z + pu(12u)) * pu(4u) + site.m) * pu(5u) * pu(6u) + oy * pu(6u) + ox, oy, ox);
}

// Output i: the activation of v plus the bias, plus the residual Y[i] holds when there is one.
fn put(i: u32, v: f32, e: Epilogue) {
    var x = v + e.bias;
    if (e.residual) { x += Y[i]; }
    Y[i] = act(x, e.alpha, e.beta, e.gamma);
}
