// A lane brought into a narrow dtype's values (NARROWED: float16 rounding or integer wrap-around of `a`).
r = {{NARROWED}};
