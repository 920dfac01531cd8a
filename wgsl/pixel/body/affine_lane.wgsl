// An affine copy lane by lane (affine.wgsl): the output element at c is the input's at affine_source(c).
r = x0(affine_source(c));
