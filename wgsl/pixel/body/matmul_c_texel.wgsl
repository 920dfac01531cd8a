// matmul.wgsl's CLOAD where C has a texel of four columns per (row, block): beta times it.
v += pf(18u) * textureLoad(C, at(m * pu(14u) + nb * pu(15u), pu(4u)), 0);
