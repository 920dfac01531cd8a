// Pad's MODE (pad.wgsl): 0 constant, 1 edge, 2 reflect, 3 wrap.
override MODE: u32 = 0u;
