// A lane (LANE, setting r), then the layer's fused activation of r: ACT of v, alpha, beta, gamma (pef(0..2)).
{{LANE}} { let v = r; let alpha = pef(0u); let beta = pef(1u); let gamma = pef(2u); r = {{ACT}}; }
