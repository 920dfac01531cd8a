out.r{{R}} = finish(acc{{R}}, m{{R}}, nb);
