// float32 Mod with fmod=1: the remainder with the dividend's sign, by exact long division (common/fmod.wgsl).
r = fmod_exact(a, b);
