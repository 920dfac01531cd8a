// Input {{K}} of an addressed draw (map.wgsl): its texture, and x{{K}}(c), its element at coordinates c (its size-1
// dims broadcast; its addressing words from {{BASE}}).
@group(0) @binding({{K}}) var X{{K}}: texture_2d<{{KIND}}>;
fn x{{K}}(c: Coords) -> {{KIND}} { let at = locate({{BASE}}u, c); let v = textureLoad(X{{K}}, at.xy, 0); return v[at.z]; }
