// matmul.wgsl's CLOAD where C has one value per row (its lane 0): beta times it, on every column.
v += pf(18u) * vec4<f32>(textureLoad(C, at(m * pu(14u), pu(4u)), 0).x);
