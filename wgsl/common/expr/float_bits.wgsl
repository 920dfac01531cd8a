opaque(bitcast<f32>({{BITS}}u), opaque_zero())
