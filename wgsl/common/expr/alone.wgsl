opaque({{EXPR}}, opaque_zero())
