// The center tensor of a centred reduction (reduce.wgsl): subtracted from each element before the pre-op.
@group(0) @binding(1) var C: texture_2d<f32>;
