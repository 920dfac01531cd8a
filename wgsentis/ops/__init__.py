"""Operators: one module per op family, each registering its kernels with ``registry``."""

from wgsentis.ops import (  # noqa: F401  (imported for their registrations)
    attention,
    cast,
    control,
    conv,
    conv_gpu,
    dropout,
    elementwise_gpu,
    elementwise,
    image,
    matmul,
    matmul_gpu,
    misc,
    norm,
    norm_gpu,
    pool,
    pool_gpu,
    reduce,
    reduce_gpu,
    rnn,
    rnn_gpu,
    signal,
    tensor,
    tensor_gpu,
)
from wgsentis.ops.registry import flops_of, lookup, register, supported_ops

__all__ = ["flops_of", "lookup", "register", "supported_ops"]
