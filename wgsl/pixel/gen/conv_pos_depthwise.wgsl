acc{{R}} += w * select(zero, textureLoad(X, at(x{{R}}, xs), 0), ok{{R}} || !CHECK_W);
