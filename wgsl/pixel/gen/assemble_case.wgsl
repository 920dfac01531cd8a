case {{R}}u: { v = textureLoad(T{{R}}, at, 0); }
