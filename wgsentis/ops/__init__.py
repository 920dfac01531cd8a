"""Operators: one module per op family, each registering its kernels with ``registry``."""

from wgsentis.ops import (  # noqa: F401  (imported for their registrations)
    attention,
    cast,
    control,
    conv,
    dropout,
    elementwise_gpu,
    elementwise,
    image,
    matmul,
    misc,
    norm,
    pool,
    reduce,
    rnn,
    signal,
    tensor,
)
from wgsentis.ops.registry import flops_of, lookup, register, supported_ops

__all__ = ["flops_of", "lookup", "register", "supported_ops"]
