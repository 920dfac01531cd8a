// Gather's helpers: the index check (NEGATIVE_OK) and the coordinate moves.
#include "pixel/body/checked.wgsl"
#include "pixel/body/coords_from.wgsl"
