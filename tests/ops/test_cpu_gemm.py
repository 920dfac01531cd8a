"""The cpu Gemm kernel's in-place path (a float product plus a bias of its dtype) gives what the general path and
numpy give for every bias shape that broadcasts into (M, N), transposed operands and beta 0; other biases take the
general path, and one that would grow the product is refused as before."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from wgsentis.ops.matmul import gemm

_CTX = SimpleNamespace(threads=1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("c_shape", [None, (), (1,), (5,), (1, 5), (3, 1), (3, 5), (1, 1)])
@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_with_a_bias_that_broadcasts_matches_numpy(dtype, c_shape, trans):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((4, 3) if trans[0] else (3, 4)).astype(dtype)
    b = rng.standard_normal((5, 4) if trans[1] else (4, 5)).astype(dtype)
    c = None if c_shape is None else rng.standard_normal(c_shape).astype(dtype)
    expected = (a.T if trans[0] else a) @ (b.T if trans[1] else b) + (0 if c is None else c)
    y = gemm(_CTX, a, b, c, transA=trans[0], transB=trans[1])
    assert y.dtype == dtype and y.shape == (3, 5)
    np.testing.assert_array_equal(y, expected.astype(dtype))
    if c is not None:
        assert not np.shares_memory(y, c)  # (the sum was made in the product's own memory)


def test_gemm_other_biases_and_scales_take_the_general_path():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 4), dtype=np.float32), rng.standard_normal((4, 5), dtype=np.float32)
    c64 = rng.standard_normal(5)  # float64 bias on a float32 product
    np.testing.assert_allclose(gemm(_CTX, a, b, c64), (a @ b + c64).astype(np.float32), rtol=1e-6)
    c = rng.standard_normal(5).astype(np.float32)
    np.testing.assert_allclose(gemm(_CTX, a, b, c, alpha=2.0, beta=0.5), 2 * (a @ b) + 0.5 * c, rtol=1e-6)
    np.testing.assert_array_equal(gemm(_CTX, a, b, c, beta=0.0), a @ b)
    with pytest.raises(ValueError, match="does not broadcast"):
        gemm(_CTX, a, b, rng.standard_normal((2, 3, 5)).astype(np.float32))
