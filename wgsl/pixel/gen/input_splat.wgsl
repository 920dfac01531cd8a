// Input {{K}} of a texel-wise addressed draw, one element wide along the blocked axis: its texture, and x{{K}}(c),
// the element at coordinates c spread over four lanes (its addressing words from {{BASE}}).
@group(0) @binding({{K}}) var X{{K}}: texture_2d<{{KIND}}>;
fn x{{K}}(c: Coords) -> vec4<{{KIND}}> {
    let at = locate({{BASE}}u, c); let v = textureLoad(X{{K}}, at.xy, 0); return vec4<{{KIND}}>(v[at.z]);
}
