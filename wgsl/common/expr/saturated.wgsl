i32(clamp({{EXPR}}, {{LO}}, {{HI}}))
