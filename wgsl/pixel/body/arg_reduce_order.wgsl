// ArgMax / ArgMin's comparisons (ARG_MAX: the larger value wins, else the smaller) on {{T}} keys; ALONG_BLOCK: the
// reduced axis is the input's blocked axis (its elements four to a texel).
#include "common/key_nan.wgsl"

override ARG_MAX: bool = true;
override ALONG_BLOCK: bool = false;

fn arg_better(v: {{T}}, best: {{T}}) -> bool { return select((v < best), (v > best), ARG_MAX); }
fn arg_better_or_equal(v: {{T}}, best: {{T}}) -> bool { return select(v <= best, v >= best, ARG_MAX); }
