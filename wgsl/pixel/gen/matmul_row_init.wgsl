let m{{R}} = min(mi * {{ROWS}}u + {{R}}u, m_last); var a{{R}} = a_off + m{{R}} * a_sm; var acc{{R}} = vec4<f32>(0.0);
