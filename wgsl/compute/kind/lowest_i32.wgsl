// lowest(): the int32 value below every other, -2^31 (what an empty max starts from).
fn lowest() -> i32 { return bitcast<i32>(0x80000000u); }
