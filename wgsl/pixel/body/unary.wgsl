// An elementwise unary lane: r = EXPR of v (the lane's input a) and the parameters alpha, beta, gamma (pef(0..2)).
let v = a; let alpha = pef(0u); let beta = pef(1u); let gamma = pef(2u); r = {{EXPR}};
