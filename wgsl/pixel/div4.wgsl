// div4(a, b): vec4 division with the device's exact float division ({{DIV}}, common/math.wgsl).
fn div4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    return vec4<f32>({{DIV}}(opaque_zero(), a.x, b.x), {{DIV}}(opaque_zero(), a.y, b.y),
                     {{DIV}}(opaque_zero(), a.z, b.z), {{DIV}}(opaque_zero(), a.w, b.w));
}
