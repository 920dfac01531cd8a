// The int32 pool's texel-kind functions (MaxPool only: no NaN, no power, root or average).
fn pool_lowest() -> vec4<i32> { return vec4<i32>(bitcast<i32>(0x80000000u)); }

fn is_nan4(v: vec4<i32>) -> vec4<bool> { return vec4<bool>(false); }

fn pool_power(v: vec4<i32>, mode: u32) -> vec4<i32> { return v; }

fn pool_root(acc: vec4<i32>, mode: u32) -> vec4<i32> { return acc; }

fn pool_average(acc: vec4<i32>, count: i32) -> vec4<i32> { return acc; }
