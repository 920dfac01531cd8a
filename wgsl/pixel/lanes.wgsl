// The padding-lane invariant of the gpu-pixel layout: lanes of a tensor's last block along its blocked axis that
// lie past the axis' end hold zero (programs that sum over the blocked axis, such as Conv and MatMul, multiply
// them by zero weights and must not meet an Inf or a NaN there). Every pixel program keeps it.
// lanes_in: how many lanes of texel t are elements, for a layout whose blocked axis has `blocks` blocks with
// `inner` texels after each (pixel_layout.TextureLayout.lane_params) and `rem` elements in its last block (0: 4).
fn lanes_in(t: u32, inner: u32, blocks: u32, rem: u32) -> u32 {
    if (rem == 0u || (t / inner) % blocks != blocks - 1u) { return 4u; }
    return rem;
}

fn lane_mask(n: u32) -> vec4<bool> { return vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(n); }
