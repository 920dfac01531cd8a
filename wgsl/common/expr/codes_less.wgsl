(f32({{CODE}}) - {{ZERO}})
