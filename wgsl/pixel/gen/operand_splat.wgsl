// Operand {{K}}, constant along x's blocked axis: one element spread over the four lanes.
let at{{K}} = locate({{BASE}}u, c);
let o{{K}} = vec4<{{KIND}}>(textureLoad(O{{K}}, at{{K}}.xy, 0)[at{{K}}.z]);
