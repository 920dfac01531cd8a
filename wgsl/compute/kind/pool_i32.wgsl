// pool.wgsl's int32 functions: an integer pool is a max pool (the others keep the sum as it is).
#include "compute/kind/is_nan_i32.wgsl"
#include "compute/kind/lowest_i32.wgsl"

fn lp_term(v: i32) -> i32 { return v; }

fn lp_root(acc: i32) -> i32 { return acc; }

fn l2_root(acc: i32) -> i32 { return acc; }

fn average(acc: i32, count: i32) -> i32 { return acc; }
