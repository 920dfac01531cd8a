// An AveragePool window summed in ONNX Runtime's vector-kernel order (pool.average_order "columns"), shared by
// the compute and pixel pool programs: each window column's sum down its planes and rows, then the columns' sum
// in order. Counts into `count` the positions in [lo, hi) (what the average divides by). The including program
// defines `pool_value(at: u32, p: vec3<i32>, in_d: vec3<i32>) -> POOL_T`, the input at position p of the plane
// `at` names, and the window constants KD0..KD2 (pool_window.wgsl).
fn columns_sum(at: u32, start: vec3<i32>, dil: vec3<i32>, in_d: vec3<i32>, lo: vec3<i32>, hi: vec3<i32>,
               count: ptr<function, i32>) -> {{POOL_T}} {
    var acc = {{POOL_T}}();
    for (var k2 = 0; k2 < KD2; k2++) {
        let p2 = start.z + k2 * dil.z;
        let in2 = p2 >= 0 && p2 < in_d.z;
        var column = {{POOL_T}}();
        for (var k0 = 0; k0 < KD0; k0++) {
            let p0 = start.x + k0 * dil.x;
            for (var k1 = 0; k1 < KD1; k1++) {
                let p1 = start.y + k1 * dil.y;
                if (p0 >= lo.x && p0 < hi.x && p1 >= lo.y && p1 < hi.y && p2 >= lo.z && p2 < hi.z) {
                    *count += 1;
                }
                if (in2 && p0 >= 0 && p0 < in_d.x && p1 >= 0 && p1 < in_d.y) {
                    column += pool_value(at, vec3<i32>(p0, p1, p2), in_d);
                }
            }
        }
        acc += column;
    }
    return acc;
}
