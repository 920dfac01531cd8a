// A texture a draw reads, {{NAME}}, at binding {{K}}.
@group(0) @binding({{K}}) var {{NAME}}: texture_2d<{{KIND}}>;
