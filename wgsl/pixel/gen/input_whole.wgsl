// Input {{K}} of a texel-wise addressed draw (map4.wgsl, texels.wgsl): its texture, and x{{K}}(c), the whole texel
// holding coordinates c (its addressing words from {{BASE}}).
@group(0) @binding({{K}}) var X{{K}}: texture_2d<{{KIND}}>;
fn x{{K}}(c: Coords) -> vec4<{{KIND}}> { let at = locate({{BASE}}u, c); let v = textureLoad(X{{K}}, at.xy, 0); return v; }
