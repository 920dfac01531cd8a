// The draw's parameter words (common/params.wgsl), after its textures.
@group(0) @binding({{K}}) var<uniform> params: Params;
