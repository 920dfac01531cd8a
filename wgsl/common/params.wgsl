// Shared by every compute program: the per-dispatch parameter block and the flat invocation index.
// Parameters are 128 u32 words (see gpu_compute.PARAM_WORDS); floats travel as their bit patterns.
struct Params { w: array<vec4<u32>, 32> }

override WG: u32 = 64u;

fn pu(i: u32) -> u32 { return params.w[i / 4u][i % 4u]; }
fn pi(i: u32) -> i32 { return bitcast<i32>(pu(i)); }
fn pf(i: u32) -> f32 { return bitcast<f32>(pu(i)); }

// A zero the shader compiler cannot prove is zero, for math.wgsl's opaque(): word 0, an element count
// (below 2^31) in the elementwise programs that divide, shifted out.
fn opaque_zero() -> u32 { return pu(0u) >> 31u; }

// Linear invocation index; grids above the per-dimension limit are folded into 2-D.
fn flat_index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * WG; }
