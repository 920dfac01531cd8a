var v{{R}} = acc{{R}} + bias; out.r{{R}} = finish(v{{R}}, lanes);
