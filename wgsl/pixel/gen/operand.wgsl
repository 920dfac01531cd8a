// Operand {{K}} of a reduce_apply.wgsl draw: its texture.
@group(0) @binding({{BINDING}}) var O{{K}}: texture_2d<{{KIND}}>;
