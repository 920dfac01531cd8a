// The index fault buffer and checked_index (common/faults.wgsl), after the parameter words.
@group(0) @binding({{K}}) var<storage, read_write> FAULTS: array<atomic<u32>>;
#include "common/faults.wgsl"
