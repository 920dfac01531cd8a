// scatter_step(acc, v): the update v stored over acc (REDUCTION 0) or folded into it by common/scatter_fold.wgsl's
// fold of code REDUCTION - 1 (subnormals kept, numpy's NaN rules), for {{T}} data.
#include "common/subnormal.wgsl"
#include "common/scatter_fold.wgsl"

override REDUCTION: u32 = 0u;

fn scatter_step(acc: {{T}}, v: {{T}}) -> {{T}} {
    if (REDUCTION == 0u) { return v; }
    return fold_{{T}}(acc, v, REDUCTION - 1u);
}
