"""Operators: one module per op family, each registering its kernels with ``registry`` (its GPU programs in
``<family>_gpu.py`` beside it); ``activations`` holds the one record of each activation."""

from wgsentis.ops import (  # noqa: F401  (imported for their registrations)
    attention,
    cast,
    cast_gpu,
    control,
    conv,
    conv_gpu,
    conv_pixel,
    dropout,
    dropout_gpu,
    elementwise_gpu,
    elementwise_pixel,
    elementwise,
    image,
    image_gpu,
    matmul,
    matmul_gpu,
    matmul_pixel,
    misc,
    ml,
    norm,
    norm_gpu,
    norm_pixel,
    pool,
    pool_gpu,
    pool_pixel,
    reduce,
    reduce_gpu,
    reduce_pixel,
    rnn,
    rnn_gpu,
    rnn_pixel,
    signal,
    tensor,
    tensor_gpu,
    tensor_pixel,
)
from wgsentis.ops.registry import flops_of, lookup, register, supported_ops

__all__ = ["flops_of", "lookup", "register", "supported_ops"]
