// A constant tensor: every element the {{T}} whose bits are pe(0).
r = bitcast<{{T}}>(pe(0u));
