// Integer Clip: a raised to pe(0), then lowered to pe(1) (lo > hi gives hi, as the CPU kernel).
r = min(max(a, pei(0u)), pei(1u));
