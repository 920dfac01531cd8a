default: { v = textureLoad(T{{R}}, at, 0); }
