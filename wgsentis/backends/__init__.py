"""Backends: the numpy CPU backend (the oracle) and, later, the wgpu compute and pixel backends."""
