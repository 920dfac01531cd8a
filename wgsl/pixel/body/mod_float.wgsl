// float32 Mod with fmod=0 (numpy's mod): the exact remainder (common/fmod.wgsl) given the divisor's sign.
r = fmod_exact(a, b);
if (!is_nan(r)) {
    if (r == 0.0) { r = with_sign_of(0.0, b); } else if ((r < 0.0) != (b < 0.0)) { r = r + b; }
}
