acc{{R}} += bm * textureLoad(A, at(a{{R}}, ash), 0); a{{R}} += a_sk;
