// Binarizer over float32: 1 where x > the threshold (pef(1)), else 0; a NaN is a value fault at its flat index
// (the fault slot pe(0)), as the numpy kernel refuses it.
let v = x0(c);
if (is_nan_f32(v)) { value_fault(linear_of(0u, c), pe(0u)); }
r = select(0.0, 1.0, v > pef(1u));
