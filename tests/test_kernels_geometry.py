"""The strided kernels on the geometries that choose their blocking: rows of power-of-two
strides (1024, 4096, 8192 elements) and odd ones, offsets, transposed views, widths on
both sides of a band (`COLUMN_BAND`, 512) and of a staging chunk (one cache line of
samples), checked against NumPy: sums over dims, softmax / log_softmax and its backward,
cumulative sums along a dim, stacked outer products."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import microtensor as mt
from microtensor._C import kernels

FLOATS = st.sampled_from([np.float32, np.float64])


@st.composite
def padded_matrices(draw, dtype, max_rows=24, max_cols=1100, lead=True):
    """A (rows, cols) view of a buffer whose rows lie `row_stride` elements apart (a
    power of two or not), from an offset; maybe transposed, maybe with a leading dim of 2
    (its matrices one buffer apart)."""
    rows = draw(st.integers(1, max_rows))
    cols = draw(st.one_of(st.integers(1, 40), st.integers(500, max_cols)))
    row_stride = draw(st.sampled_from([cols, cols + 1, cols + 3, 1024, 4096, 8192]))
    row_stride = max(row_stride, cols)
    offset = draw(st.integers(0, 3))
    stacked = draw(st.integers(1, 2)) if lead else 1
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    buffer = rng.uniform(-4, 4, offset + stacked * rows * row_stride).astype(dtype)
    view = buffer[offset:].reshape(stacked, rows, row_stride)[:, :, :cols]
    if draw(st.booleans()):
        view = view.transpose(0, 2, 1)
    return view if stacked == 2 else view[0]


def tolerance(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(FLOATS, st.data())
def test_sum_over_dims_on_strided_rows(dtype, data):
    """The tensor's C sum over dims (tensors up to 65536 elements), by whole rows when a
    kept dim runs fastest in memory."""
    view = data.draw(padded_matrices(dtype, max_rows=40, max_cols=1100))
    if view.size > 1 << 16:
        view = view[..., :(1 << 16) // (view.size // view.shape[-1])]
    dim = data.draw(st.sampled_from([0, -1, tuple(range(view.ndim - 1))]))
    keepdim = data.draw(st.booleans())
    out = mt.from_numpy(view).sum(dim, keepdim=keepdim)
    expected = view.astype(np.float64).sum(axis=dim, keepdims=keepdim)
    assert tuple(out.shape) == expected.shape and out.is_contiguous()
    if dtype == np.float32:
        # a float32 sum (PyTorch's too) is exact to a few roundings of the magnitudes it
        # adds, not of its result: a sum near 0 of many terms is off by more than 1e-5
        magnitude = np.abs(view).astype(np.float64).sum(axis=dim, keepdims=keepdim)
        assert np.all(np.abs(out.numpy() - expected) <= 1e-5 + 4 * 1.2e-7 * magnitude)
    else:
        np.testing.assert_allclose(out.numpy(), expected, **tolerance(dtype))


@settings(max_examples=20, deadline=None)
@given(FLOATS, st.integers(1, 24), st.sampled_from([1, 7, 64, 256, 257, 512, 513]), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_large_sums_by_narrow_rows(dtype, lead, width, keepdim, seed):
    """Above 65536 elements the C sum still serves sums that read the source once, in
    order: those whose kept dims run fastest and fit one band (x.sum(0) of a (N, 64)
    matrix, or over the middle dim of a stack), and float32 sums along short contiguous
    rows (x.sum(1)).  Checked against NumPy in float64, on both sides of the band's width
    and of the short rows' limit (past them NumPy's float32 adds serve, whose rounding
    grows with the sum of the magnitudes)."""
    rows = (1 << 16) // width + 3
    buffer = np.random.default_rng(seed).uniform(-4, 4, (lead, rows, width)).astype(dtype)
    matrix = buffer.reshape(lead * rows, width)
    for view, dim in ((matrix, 0), (buffer, 1), (buffer, (0, 1)), (matrix, 1), (buffer, 2),
                      (buffer[:, :, ::2], 2)):
        out = mt.from_numpy(view).sum(dim, keepdim=keepdim)
        expected = view.astype(np.float64).sum(axis=dim, keepdims=keepdim)
        assert tuple(out.shape) == expected.shape and out.dtype.name == view.dtype.name
        magnitudes = np.abs(view.astype(np.float64)).sum(axis=dim, keepdims=keepdim)
        bound = (1e-6 if dtype == np.float32 else 1e-14) * magnitudes
        assert np.all(np.abs(out.numpy() - expected) <= bound)


def along_reference(kind, x, axis):
    """softmax / log_softmax / cumsum along `axis`, in float64."""
    x = x.astype(np.float64)
    if kind == "cumsum":
        return np.cumsum(x, axis=axis)
    shifted = x - x.max(axis=axis, keepdims=True)
    log_total = np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return shifted - log_total if kind == "log_softmax" else np.exp(shifted - log_total)


def any_layout(shape, dtype, transposed):
    """An uninitialised array of `shape`, C-ordered or with its dims in reverse order."""
    if not transposed:
        return np.empty(shape, dtype)
    return np.empty(shape[::-1], dtype).transpose(tuple(range(len(shape)))[::-1])


@settings(max_examples=60, deadline=None)
@given(FLOATS, st.sampled_from(["softmax", "log_softmax", "cumsum"]), st.booleans(),
       st.data())
def test_along_a_dim_on_strided_rows(dtype, kind, out_transposed, data):
    """softmax_ and cumsum_ along every dim: by bands of lines when another dim runs
    faster in memory, line by line otherwise; any output layout."""
    view = data.draw(padded_matrices(dtype))
    axis = data.draw(st.integers(0, view.ndim - 1))
    out = any_layout(view.shape, dtype, out_transposed)
    if kind == "cumsum":
        kernels.cumsum_(out, view, axis)
    else:
        kernels.softmax_(out, view, axis, kind == "log_softmax")
    np.testing.assert_allclose(out, along_reference(kind, view, axis), **tolerance(dtype))


@settings(max_examples=40, deadline=None)
@given(FLOATS, st.data())
def test_log_softmax_backward_on_strided_rows(dtype, data):
    grad = data.draw(padded_matrices(dtype))
    axis = data.draw(st.integers(0, grad.ndim - 1))
    output = along_reference("log_softmax", np.ascontiguousarray(grad)[::-1], axis)
    output = output.astype(dtype)
    out = any_layout(grad.shape, dtype, data.draw(st.booleans()))
    kernels.log_softmax_backward_(out, grad, output, axis)
    expected = grad - np.exp(output.astype(np.float64)) * \
        grad.astype(np.float64).sum(axis=axis, keepdims=True)
    np.testing.assert_allclose(out, expected, **tolerance(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_along_a_dim_through_the_scratch_band(dtype):
    """Rows 8192 elements apart, 96 of them (more than half of any L2 up to 4 MiB): softmax
    and log_softmax's backward copy bands of lines into a dense scratch and back."""
    rng = np.random.default_rng(5)
    rows = rng.uniform(-4, 4, (96, 8192)).astype(dtype)
    view = rows[:, 3:703]
    out = np.empty(view.shape, dtype)
    for log_of in (False, True):
        kernels.softmax_(out, view, 0, log_of)
        kind = "log_softmax" if log_of else "softmax"
        np.testing.assert_allclose(out, along_reference(kind, view, 0), **tolerance(dtype))
    output = along_reference("log_softmax", view, 0).astype(dtype)
    grad = rng.uniform(-4, 4, (96, 8192)).astype(dtype)[:, 5:705]
    kernels.log_softmax_backward_(out, grad, output, 0)
    expected = grad - np.exp(output.astype(np.float64)) * \
        grad.astype(np.float64).sum(axis=0, keepdims=True)
    np.testing.assert_allclose(out, expected, **tolerance(dtype))


def test_along_a_dim_keeps_nan_and_infinity_per_line():
    """A NaN poisons only its own line; a line of -inf gives NaN (as PyTorch), in bands."""
    x = np.zeros((5, 600), np.float32)
    x[2, 7] = np.nan
    x[:, 9] = -np.inf
    out = np.empty_like(x)
    kernels.softmax_(out, x, 0, False)
    assert np.isnan(out[:, 7]).all() and np.isnan(out[:, 9]).all()
    finite = np.delete(out, [7, 9], axis=1)
    np.testing.assert_allclose(finite, 0.2, rtol=1e-6)


def test_cumsum_accumulates_float32_in_double():
    """As PyTorch's CPU kernel: 1 + many small terms is not lost to float32 rounding."""
    x = np.full((4097, 3), 1e-8, np.float32)
    x[0] = 1
    out = np.empty_like(x)
    kernels.cumsum_(out, x, 0)
    assert out[-1, 0] == np.float32(1 + 4096e-8)
    assert mt.from_numpy(x).cumsum(0).numpy()[-1, 0] == np.float32(1 + 4096e-8)


@pytest.mark.parametrize("kernel", ["softmax_", "cumsum_"])
def test_along_a_dim_refuses_mismatched_arrays(kernel):
    x = np.zeros((3, 4), np.float32)
    call = getattr(kernels, kernel)
    args = (False,) if kernel == "softmax_" else ()
    for out, axis in ((np.zeros((3, 4), np.float64), 0), (np.zeros((4, 3), np.float32), 0),
                      (np.zeros((3, 4), np.float32), 2)):
        with pytest.raises(TypeError):
            call(out, x, axis, *args)


@settings(max_examples=60, deadline=None)
@given(FLOATS, st.data())
def test_outer_products_of_strided_vectors(dtype, data):
    """Per-sample vectors down the columns of (m, batch) arrays (staged a chunk of samples
    at a time) or along rows, against NumPy's broadcast multiply, exactly."""
    batch = data.draw(st.integers(1, 40))
    m, n = data.draw(st.integers(1, 70)), data.draw(st.integers(1, 70))
    operands = []
    for length in (m, n):
        stride = max(batch, data.draw(st.sampled_from([batch, batch + 1, 1024, 4096, 8192])))
        offset = data.draw(st.integers(0, 3))
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        buffer = rng.uniform(-4, 4, offset + length * stride).astype(dtype)
        columns = buffer[offset:].reshape(length, stride)[:, :batch].T     # (batch, length)
        operands.append(columns if data.draw(st.booleans()) else columns.copy())
    a, b = operands[0][:, :, None], operands[1][:, None, :]
    out = np.empty((batch, m, n), dtype)
    kernels.outer_products_(out, a, b)
    np.testing.assert_array_equal(out, a * b)
    # the same products through matmul, as per-sample gradients take them
    product = mt.matmul(mt.from_numpy(a), mt.from_numpy(b))
    np.testing.assert_array_equal(product.numpy(), a * b)


@settings(max_examples=12, deadline=None)
@given(FLOATS, st.sampled_from(["+", "-", "*", "/"]), st.data())
def test_binary_ops_with_a_transposed_operand_above_half_the_l2(dtype, opcode, data):
    """The tensor's C arithmetic first copies, in the result's order, an operand that runs
    along the other dim and spans more than half the L2 (at least 600 KB here: staged
    wherever the L2 is at most 1 MiB); either side, rows of power-of-two strides or not."""
    import operator
    rows = data.draw(st.integers(300, 400))
    cols = data.draw(st.sampled_from([512, 700, 1024]))
    stride = data.draw(st.sampled_from([rows, rows + 3, 1024]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    other = rng.uniform(1, 4, (rows, cols)).astype(dtype)
    transposed = rng.uniform(1, 4, (cols, stride)).astype(dtype)[:, :rows].T
    fn = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}[opcode]
    left, right = (transposed, other) if data.draw(st.booleans()) else (other, transposed)
    result = fn(mt.from_numpy(left), mt.from_numpy(right))
    np.testing.assert_array_equal(result.numpy(), fn(left, right))
