// lowest(): the float32 value below every other, -inf (what an empty max starts from).
fn lowest() -> f32 { return bitcast<f32>(0xff800000u); }
