let ow{{R}} = owi * {{ROWS}}u + {{R}}u; var acc{{R}} = zero;
