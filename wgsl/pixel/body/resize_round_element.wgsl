// Resize's products, element by element: each rounded on its own (an XOR with a zero the compiler cannot see), so
// no driver contracts them into FMAs; a term is the rounded product divided by d (the device's exact division
// {{DIV}}) where d is not 1.
fn rz_round(v: f32) -> f32 { return bitcast<f32>(bitcast<u32>(v) ^ u32(opaque_zero())); }
fn rz_term(v: f32, w: f32, d: f32) -> f32 { let q = rz_round(v * w); if (d == 1.0) { return q; } return {{DIV}}(opaque_zero(), q, d); }
