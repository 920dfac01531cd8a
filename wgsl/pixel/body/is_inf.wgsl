// IsInf: 1 where a is +inf and pe(0) is 1 (detect_positive) or a is -inf and pe(1) is 1 (detect_negative), else 0.
r = select(0, 1, (bitcast<u32>(a) == 0x7f800000u && pe(0u) == 1u) || (bitcast<u32>(a) == 0xff800000u && pe(1u) == 1u));
