// The CPU kernel's TopK order (ops/sort.py): ahead(w, v, j, a) says element j (value w) comes before element a
// (value v): larger first for LARGEST, else smaller first; NaN (FLOAT_KEYS only) counts as the largest value and
// NaNs are equal to one another; equal values by index. {{T}}: the key type (f32 or i32).
override LARGEST: bool = true;
override FLOAT_KEYS: bool = true;

fn key_nan(x: {{T}}) -> bool { return FLOAT_KEYS && (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn bigger(p: {{T}}, q: {{T}}) -> bool {
    if (key_nan(p) || key_nan(q)) { return key_nan(p) && !key_nan(q); }
    return p > q;
}
fn same(p: {{T}}, q: {{T}}) -> bool {
    if (key_nan(p) || key_nan(q)) { return key_nan(p) && key_nan(q); }
    return p == q;
}
fn ahead(w: {{T}}, v: {{T}}, j: u32, a: u32) -> bool {
    let first = select(bigger(v, w), bigger(w, v), LARGEST);
    return first || (same(w, v) && j < a);
}
