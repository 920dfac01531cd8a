// GlobalAveragePool in ONNX Runtime's order (pool.lane_sums): the plane of pe(0) elements (read as (N, C, L))
// summed as lane sums over whole 4-float packets, combined (s0 + s2) + (s1 + s3), then the leftover elements.
let length = pe(0u);
let packets = length / 4u;
var q = c;
var lanes = vec4<f32>(0.0);
for (var k = 0u; k < packets; k++) {
    var v = vec4<f32>();
    for (var j = 0u; j < 4u; j++) { q.c[5] = 4u * k + j; v[j] = x0(q); }
    lanes = lanes + v;
}
var total = (lanes.x + lanes.z) + (lanes.y + lanes.w);
for (var k = 4u * packets; k < length; k++) { q.c[5] = k; total = total + x0(q); }
r = {{DIV}}(opaque_zero(), total, f32(length));
