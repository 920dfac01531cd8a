default: { v = textureLoad(X{{R}}, at(t, pu({{WORD}}u)), 0); }
