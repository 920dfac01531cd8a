// Offsets into A and B of output element i under numpy broadcasting (zero strides on broadcast
// axes), for two-operand programs whose parameters follow one layout (elementwise_gpu.broadcast_params):
// 1 rank, 2..7 output shape, 8..13 A strides, 14..19 B strides, 20 same-shape flag (offsets are i).
fn broadcast_offsets(i: u32) -> vec2<u32> {
    if (pu(20u) != 0u) { return vec2<u32>(i, i); }
    let rank = pu(1u);
    var rem = i;
    var ia = 0u;
    var ib = 0u;
    for (var d = 0u; d < rank; d++) {
        let axis = rank - 1u - d;
        let dim = pu(2u + axis);
        let idx = rem % dim;
        rem = rem / dim;
        ia += idx * pu(8u + axis);
        ib += idx * pu(14u + axis);
    }
    return vec2<u32>(ia, ib);
}
