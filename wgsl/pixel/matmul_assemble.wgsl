// The second draw of a many-row MatMul/Gemm (ops/matmul_pixel.py): matmul.wgsl left row mi * ROWS + r of each
// batch in texel (batch * Mr + mi) * NB + nb of target r; this copies them into Y (rows in order, N blocked).
// Padding lanes are zero in the targets already. Params: 0 texels of Y, 1 log2 of Y's width, 2 log2 of the
// targets' width, 3 NB, 4 M, 5 Mr (rows per target), 6 the first batch the targets hold (an output drawn in chunks:
// the targets hold batches from it on, the draw covers their rows of Y only).
#include "common/params.wgsl"
#include "pixel/fullscreen.wgsl"

{{DECLS}}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<f32> {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(1u)) + texel.x;
    if (t >= pu(0u)) { return vec4<f32>(0.0); }
    let nblocks = pu(3u);
    let nb = t % nblocks;
    let r = t / nblocks;
    let m = r % pu(4u);
    let b = r / pu(4u);
    let source = ((b - pu(6u)) * pu(5u) + m / {{ROWS}}u) * nblocks + nb;
    let shift = pu(2u);
    let at = vec2<i32>(i32(source & ((1u << shift) - 1u)), i32(source >> shift));
    var v = vec4<f32>(0.0);
    switch (m % {{ROWS}}u) {
        {{CASES}}
    }
    return v;
}
