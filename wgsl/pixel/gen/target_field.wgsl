@location({{R}}) r{{R}}: vec4<f32>,
