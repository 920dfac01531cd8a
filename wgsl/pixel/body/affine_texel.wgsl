// An affine copy texel by texel (affine.wgsl): the output texel at c is the input's holding affine_source(c).
out = x0(affine_source(c));
