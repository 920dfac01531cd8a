// x_at(k, c): input k's element at coordinates c, for bodies that loop over their inputs (a switch over the
// accessors x0 ... of the draw's inputs, which share one texel kind).
fn x_at(k: u32, c: Coords) -> {{KIND}} {
    switch k {
{{CASES}}
        default: { return {{KIND}}(0); }
    }
}
