// Concat: the element (texel) at c reads part k, the first whose end pe(1 + k) along frame axis pe(0) passes c's
// coordinate p there, at p less the part's start (shader_gen.concat_body writes a branch per part).
let a = pe(0u);
let p = c.c[a];
{{PARTS}}
