// Element addressing in the gpu-pixel texture layout (backends/pixel_layout.py): a tensor of rank <= 6 with one
// axis blocked four to a texel and the others folded row-major; texel t at (t & (2^shift - 1), t >> shift).
// A tensor's parameters are 14 words from `base`: 6 dims (rank-aligned to the right, leading dims 1), 6 texel
// strides (the blocked axis counts blocks), the blocked axis (0-5, in the 6-dim frame) and the width shift.
// pixel_layout.addressing_params writes them.

struct Coords { c: array<u32, 6> }

fn dim_of(base: u32, i: u32) -> u32 { return pu(base + i); }

// The coordinates of lane `lane` of texel `t` of the tensor at `base`; `ok` is false past its end.
fn coords_of(base: u32, t: u32, lane: u32, ok: ptr<function, bool>) -> Coords {
    var out: Coords;
    let axis = pu(base + 12u);
    var rest = t;
    for (var k = 0u; k < 6u; k++) {
        let i = 5u - k;
        var d = dim_of(base, i);
        if (i == axis) { d = (d + 3u) / 4u; }
        out.c[i] = rest % d;
        rest = rest / d;
    }
    out.c[axis] = out.c[axis] * 4u + lane;
    *ok = rest == 0u && out.c[axis] < dim_of(base, axis);
    return out;
}

// Where the element at `coords` (of the output frame) of the tensor at `base` lies: texel (x, y) and lane z,
// its size-1 dims broadcast.
fn locate(base: u32, coords: Coords) -> vec3<i32> {
    let axis = pu(base + 12u);
    var t = 0u;
    var lane = 0u;
    for (var i = 0u; i < 6u; i++) {
        var c = coords.c[i];
        if (dim_of(base, i) == 1u) { c = 0u; }
        if (i == axis) {
            lane = c % 4u;
            c = c / 4u;
        }
        t += c * pu(base + 6u + i);
    }
    let shift = pu(base + 13u);
    return vec3<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift), i32(lane));
}

// The value of the float32 tensor at `base` (texture X) at `coords` of the output frame, its size-1 dims broadcast.
fn load_broadcast(X: texture_2d<f32>, base: u32, coords: Coords) -> f32 {
    let at = locate(base, coords);
    return textureLoad(X, at.xy, 0)[at.z];
}

// The row-major element index of `coords` in the tensor at `base` (its dims, not its texels).
fn linear_of(base: u32, coords: Coords) -> u32 {
    var i = 0u;
    for (var k = 0u; k < 6u; k++) { i = i * dim_of(base, k) + coords.c[k]; }
    return i;
}

// The coordinates of row-major element index `i` of the tensor at `base`.
fn unravel(base: u32, index: u32) -> Coords {
    var out: Coords;
    var rest = index;
    for (var k = 0u; k < 6u; k++) {
        let d = dim_of(base, 5u - k);
        out.c[5u - k] = rest % d;
        rest = rest / d;
    }
    return out;
}
