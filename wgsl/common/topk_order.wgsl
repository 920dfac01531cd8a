// The CPU kernel's TopK order (ops/sort.py): ahead(w, v, j, a) says element j (value w) comes before element a
// (value v): larger first for LARGEST, else smaller first; NaN (FLOAT_KEYS only) counts as the largest value and
// NaNs are equal to one another; equal values by index. {{T}}: the key type (f32 or i32).
#include "common/key_nan.wgsl"

override LARGEST: bool = true;

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
