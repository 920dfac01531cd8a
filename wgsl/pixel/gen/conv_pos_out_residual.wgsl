var v{{R}} = acc{{R}} + bias; v{{R}} += textureLoad(Z, at(prefix * pu(23u) + min(ow{{R}}, pu(23u) - 1u), pu(24u)), 0); out.r{{R}} = finish(v{{R}}, lanes);
