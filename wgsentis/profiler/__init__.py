"""Profiler: where a model's time goes on a backend, why (FLOPs, bytes, measured ceilings), and what
would make it faster (bound, pruning sensitivity); JSON, Chrome trace, HTML and terminal views."""

from wgsentis.profiler.profile import Profile, profile
from wgsentis.profiler.loss import LossProfile, loss_profile
from wgsentis.profiler.summary import compare

__all__ = ["LossProfile", "Profile", "compare", "loss_profile", "profile"]
