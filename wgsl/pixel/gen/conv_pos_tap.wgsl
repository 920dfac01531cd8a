var ok{{R}} = false; var x{{R}} = xrow + source(ow{{R}}, kw, SW, DW, pi(19u), w_in, &ok{{R}});
