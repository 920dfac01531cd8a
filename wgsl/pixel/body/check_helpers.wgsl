// check_indices.wgsl's helpers: the index check (NEGATIVE_OK) and TUPLES (the indices' last axis holds the
// components of index tuples).
#include "pixel/body/checked.wgsl"

override TUPLES: bool = false;
