// BatchNormalization from its tensors: act(x * scale / sqrt(var + eps) + (bias - mean * scale / sqrt(var + eps)))
// (o0 scale, o1 bias, o2 mean, o3 var, eps the word pef(3)).
act4(x * (o0 / sqrt(o3 + vec4<f32>(pef(3u)))) + (o1 - o2 * (o0 / sqrt(o3 + vec4<f32>(pef(3u))))))
