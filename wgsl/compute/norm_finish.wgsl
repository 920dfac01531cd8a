// Shared by the normalization programs: a row's (mean, multiplier) from its sums, where `s` is the sum
// (of |x| for STAT 3) and `s2` the sum of squares (of centred values for STAT 0). Needs STAT.
fn finish_stats(mean_in: f32, s: f32, s2: f32) -> vec2<f32> {
    let inv_r = pf(3u);
    let eps = pf(2u);
    if (STAT == 0u) { return vec2<f32>(mean_in, 1.0 / sqrt(s2 * inv_r + eps)); }
    if (STAT == 1u) { return vec2<f32>(mean_in, 1.0 / (sqrt(max(s2 * inv_r - mean_in * mean_in, 0.0)) + 1e-9)); }
    if (STAT == 2u) { return vec2<f32>(0.0, 1.0 / sqrt(s2 * inv_r + eps)); }
    let norm = select(sqrt(s2), s, STAT == 3u);
    return vec2<f32>(0.0, select(1.0 / norm, 0.0, norm == 0.0));
}
