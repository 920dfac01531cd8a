// reduce.wgsl's int32 functions (wrapping, exact): per op (sum, prod, max, min) its identity, its combination of
// two accumulators and hz_ of an accumulator's four lanes; PRE of each element (0 v, 1 |v|, 2 v^2), chosen by an
// override constant; POST is the identity (no integer reduction scales or roots).
override PRE: u32 = 0u;
override POST: u32 = 0u;

fn identity_sum() -> vec4<i32> { return vec4<i32>(0); }
fn identity_prod() -> vec4<i32> { return vec4<i32>(1); }
fn identity_max() -> vec4<i32> { return vec4<i32>(bitcast<i32>(0x80000000u)); }
fn identity_min() -> vec4<i32> { return vec4<i32>(2147483647); }

fn cmb_sum(a: vec4<i32>, v: vec4<i32>) -> vec4<i32> { return a + v; }
fn cmb_prod(a: vec4<i32>, v: vec4<i32>) -> vec4<i32> { return a * v; }
fn cmb_max(a: vec4<i32>, v: vec4<i32>) -> vec4<i32> { return max(a, v); }
fn cmb_min(a: vec4<i32>, v: vec4<i32>) -> vec4<i32> { return min(a, v); }

fn hz_sum(a: vec4<i32>) -> i32 {
    return cmb_sum(cmb_sum(vec4<i32>(a.x), vec4<i32>(a.y)), cmb_sum(vec4<i32>(a.z), vec4<i32>(a.w))).x;
}
fn hz_prod(a: vec4<i32>) -> i32 {
    return cmb_prod(cmb_prod(vec4<i32>(a.x), vec4<i32>(a.y)), cmb_prod(vec4<i32>(a.z), vec4<i32>(a.w))).x;
}
fn hz_max(a: vec4<i32>) -> i32 {
    return cmb_max(cmb_max(vec4<i32>(a.x), vec4<i32>(a.y)), cmb_max(vec4<i32>(a.z), vec4<i32>(a.w))).x;
}
fn hz_min(a: vec4<i32>) -> i32 {
    return cmb_min(cmb_min(vec4<i32>(a.x), vec4<i32>(a.y)), cmb_min(vec4<i32>(a.z), vec4<i32>(a.w))).x;
}

fn pre(v: vec4<i32>) -> vec4<i32> {
    if (PRE == 1u) { return abs(v); }
    if (PRE == 2u) { return v * v; }
    return v;
}

fn post(a: vec4<i32>) -> vec4<i32> { return a; }
