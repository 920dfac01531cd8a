// Operand {{K}}, blocked on x's blocked axis: the texel of lane 0 holds the four lanes.
let o{{K}} = textureLoad(O{{K}}, locate({{BASE}}u, c).xy, 0);
