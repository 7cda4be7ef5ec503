"""``linear``'s C fast path for one weight matrix repeated along a stack
(``nnkernels.linear_repeated_weight``: every parameter under ``vmap(grad)`` is expanded
over the batch with stride 0) agrees exactly with the op's general path, and serves only
the calls it should: contiguous float32/float64 rows, a repeated matrix whose own strides
are not 0, and a bias that is one vector (given as such, or repeated like the weight)."""
import types

import numpy as np
import pytest

import microtensor as mt
from microtensor._C import nnkernels
from microtensor.ops import linalg

LINEAR = linalg.linear   # the op: F.linear takes 1-D and 2-D weights only


def _general(fn):
    """``fn()`` with the fast path serving nothing."""
    saved = linalg.nnkernels
    linalg.nnkernels = types.SimpleNamespace(linear_repeated_weight=lambda *args: None)
    try:
        return fn()
    finally:
        linalg.nnkernels = saved


def _weight(layout, stack, n_out, n_in, dtype, r):
    matrix = mt.tensor(r.standard_normal((n_out, n_in)), dtype=dtype)
    if layout == "transposed":
        matrix = matrix.mT.contiguous().mT
    return matrix.expand(stack + (n_out, n_in))


def _bias(kind, stack, n_out, dtype, r):
    vector = mt.tensor(r.standard_normal(n_out), dtype=dtype)
    if kind == "none":
        return None
    if kind == "vector":
        return vector
    if kind == "repeated":
        return vector.expand(stack + (n_out,))
    if kind == "per sample":
        return mt.tensor(r.standard_normal(stack + (n_out,)), dtype=dtype)
    return vector.reshape((1,) * len(stack) + (n_out,))     # broadcasts over the stack


@pytest.mark.parametrize("dtype", [mt.float32, mt.float64])
@pytest.mark.parametrize("stack,rows", [((8,), 1), ((3,), 4), ((2, 3), 2), ((4,), 0)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("bias", ["none", "vector", "repeated", "per sample", "broadcast"])
def test_fast_path_matches_general_path(dtype, stack, rows, layout, bias):
    r = np.random.default_rng(len(stack) + rows)
    x = mt.tensor(r.standard_normal(stack + (rows, 5)), dtype=dtype)
    w = _weight(layout, stack, 3, 5, dtype, r)
    b = _bias(bias, stack, 3, dtype, r)
    got = LINEAR(x, w, b)
    expected = _general(lambda: LINEAR(x, w, b))
    assert got.shape == expected.shape == stack + (rows, 3) and got.dtype == dtype
    assert got.is_contiguous()
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    served = nnkernels.linear_repeated_weight(x, w, b) is not None
    assert served == (bias in ("none", "vector", "repeated"))


def test_fast_path_refuses_other_layouts():
    x, w, b = mt.randn(4, 2, 5), mt.randn(3, 5).expand(4, 3, 5), mt.randn(3)
    serve = nnkernels.linear_repeated_weight
    assert serve(x, w, b) is not None
    assert serve(x.mT.contiguous().mT, w, b) is None               # strided rows
    assert serve(x, mt.randn(4, 3, 5), b) is None                    # per-sample weights
    assert serve(x, mt.randn(3, 1).expand(4, 3, 5), b) is None      # a repeated column
    assert serve(x.to(mt.float16), w.to(mt.float16), b.to(mt.float16)) is None
    assert serve(x.double(), w, b) is None                           # mixed dtypes
    assert serve(x, w, b.double()) is None
    assert serve(x[0], mt.randn(3, 5), b) is None                    # a plain matrix
    assert serve(mt.randn(5, 2, 5), w, b) is None                    # another stack size
    # arguments check_linear refuses (the fast path runs before it): never served
    assert serve(mt.randn(4, 2, 6), w, b) is None                    # in-features differ
    assert serve(x, w, mt.randn(4)) is None                          # bias of another size
    assert serve(x.to(mt.bool), w.to(mt.bool), None) is None


def test_errors_stay_the_general_paths():
    x, w = mt.randn(4, 2, 5), mt.randn(3, 5).expand(4, 3, 5)
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        LINEAR(mt.randn(4, 2, 6), w)
    with pytest.raises(RuntimeError):
        LINEAR(x, w, mt.randn(4))
    # stacked weights (beyond PyTorch's linear) refuse two dtypes as the product they
    # stand for, ``x @ w.mT``, does
    with pytest.raises(RuntimeError) as linear_error:
        LINEAR(x.double(), w)
    with pytest.raises(RuntimeError) as product_error:
        mt.matmul(x.double(), w.mT)
    assert str(linear_error.value) == str(product_error.value)


def test_gradients_through_the_fast_path():
    """Recorded as ``linear`` (its derivatives), for per-sample gradients under vmap."""
    x = mt.randn(4, 2, 5, dtype=mt.float64)
    w = mt.randn(3, 5, dtype=mt.float64).expand(4, 3, 5).detach().requires_grad_()
    b = mt.randn(3, dtype=mt.float64).expand(4, 3).detach().requires_grad_()
    LINEAR(x, w, b).tanh().sum().backward()
    w2, b2 = w.detach().requires_grad_(), b.detach().requires_grad_()
    _general(lambda: LINEAR(x, w2, b2)).tanh().sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), w2.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), b2.grad.numpy(), rtol=1e-12)


def test_fast_path_reads_views_at_an_offset():
    """Rows, matrix and bias that start inside a larger storage."""
    big = mt.randn(3, 4, 2, 5)
    x = big[1]                                       # contiguous, at an offset
    matrices, vectors = mt.randn(2, 3, 5), mt.randn(2, 3)
    w, b = matrices[1].expand(4, 3, 5), vectors[1]
    assert x.storage_offset() and w.storage_offset() and b.storage_offset()
    got = LINEAR(x, w, b)
    assert nnkernels.linear_repeated_weight(x, w, b) is not None
    np.testing.assert_array_equal(got.numpy(), _general(lambda: LINEAR(x, w, b)).numpy())
    np.testing.assert_allclose(got.numpy(), x.numpy() @ matrices[1].numpy().T
                               + vectors[1].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bias", [True, False])
def test_batching_rule_shortcut_matches_the_general_rule(bias):
    # per-sample weights and inputs batched in front take the rule's shortcut; the same
    # values given through keywords (or with the bias batched elsewhere) take the general
    # path: values and gradients agree
    r = np.random.default_rng(3)
    x = mt.tensor(r.standard_normal((4, 3)), dtype=mt.float32)
    w = mt.tensor(r.standard_normal((4, 5, 3)), dtype=mt.float32)
    b = mt.tensor(r.standard_normal((4, 5)), dtype=mt.float32) if bias else None

    def positional(x, w, b):
        return LINEAR(x.unsqueeze(0), w, b)

    def keywords(x, w, b):
        return LINEAR(input=x.unsqueeze(0), weight=w, bias=b)
    dims = (0, 0, 0 if bias else None)
    fast = mt.vmap(positional, in_dims=dims)(x, w, b)
    general = mt.vmap(keywords, in_dims=dims)(x, w, b)
    assert mt.equal(fast, general)
    expected = mt.stack([positional(x[i], w[i], None if b is None else b[i])
                         for i in range(4)])
    assert mt.allclose(fast, expected)


def test_batching_rule_shortcut_keeps_linears_errors():
    x, w = mt.randn(4, 3), mt.randn(4, 5, 3)
    with pytest.raises(RuntimeError, match="same dtype"):
        mt.vmap(lambda x, w: LINEAR(x.unsqueeze(0), w))(x.double(), w)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        mt.vmap(lambda x, w: LINEAR(x.unsqueeze(0), w))(mt.randn(4, 2), w)
    with pytest.raises(RuntimeError, match="same dtype"):
        mt.vmap(lambda x, w, b: LINEAR(x.unsqueeze(0), w, b))(x, w, mt.randn(4, 5).double())


def test_linear_module_reads_a_weight_that_left_its_table():
    # Linear.forward reads its parameters from their table; a weight moved out of it
    # (as reparametrisations do: deleted, set as a plain attribute) is still the one used
    layer = mt.nn.Linear(3, 2)
    x = mt.randn(4, 3)
    weight = layer.weight.detach() * 2
    del layer.weight
    layer.weight = weight
    assert mt.allclose(layer(x), x @ weight.mT + layer.bias)
