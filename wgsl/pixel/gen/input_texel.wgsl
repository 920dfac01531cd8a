// Input {{K}} of a same4.wgsl draw: its texture, and x{{K}}(c), its texel at texel coordinates c (the output's own).
@group(0) @binding({{K}}) var X{{K}}: texture_2d<{{KIND}}>;
fn x{{K}}(c: vec2<i32>) -> vec4<{{KIND}}> { return textureLoad(X{{K}}, c, 0); }
