if (p < pe({{END}}u)) { var d = c; d.c[a] = p - {{START}}; {{TAKE}} = x{{K}}(d); }
