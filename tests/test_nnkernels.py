"""Tests for microtensor._C.nnkernels (the layers' C kernels) against NumPy formulas in
float64: random shapes, strided and transposed inputs and outputs, float32 and float64,
the special values of exp (overflow, underflow, infinities, NaN) and the refusals; and the
ops that call them, in float32, against PyTorch."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import microtensor as mt
from microtensor._C import nnkernels

try:
    import torch
except ImportError:   # the op-level check against PyTorch is skipped
    torch = None

DTYPES = [np.float32, np.float64]
# float32 kernels use polynomial exp / erf (a few ulp); float64 calls libm
TOLERANCE = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


@st.composite
def arrays(draw, dtype, shape, low=-6.0, high=6.0):
    """A float array of ``shape``, C-contiguous, strided (steps in a larger buffer) or
    transposed, as drawn."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    layout = draw(st.sampled_from(["contiguous", "strided", "transposed"]))
    if layout == "strided":
        steps = tuple(draw(st.integers(1, 3)) for _ in shape)
        base = rng.uniform(low, high, [n * s for n, s in zip(shape, steps)]).astype(dtype)
        return base[tuple(slice(None, None, s) for s in steps)]
    if layout == "transposed" and len(shape) >= 2:
        return rng.uniform(low, high, shape[::-1]).astype(dtype).T
    return rng.uniform(low, high, shape).astype(dtype)


shapes = st.lists(st.integers(1, 9), min_size=1, max_size=3).map(tuple)


def out_like(a, draw):
    """An output array: C-contiguous or a transposed (non-contiguous) one."""
    if a.ndim >= 2 and draw(st.booleans()):
        return np.empty(a.shape[::-1], a.dtype).T
    return np.empty(a.shape, a.dtype)


def close(actual, expected, dtype, scale=1.0):
    """Within the dtype's tolerance; ``scale``: the size of the terms that were summed (or
    that cancel), which sets the absolute error."""
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(actual, expected, rtol=tol["rtol"], atol=tol["atol"] * scale)


def softmax_ref(x, log_of):
    x = x.astype(np.float64)
    shifted = x - x.max(-1, keepdims=True)
    total = np.exp(shifted).sum(-1, keepdims=True)
    return shifted - np.log(total) if log_of else np.exp(shifted) / total


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), shapes, st.booleans())
def test_softmax_matches_numpy(data, dtype, shape, log_of):
    x = data.draw(arrays(dtype, shape, -30, 30))
    out = out_like(x, data.draw)
    result = nnkernels.softmax(out, x, log_of)
    assert result is out
    close(out, softmax_ref(x, log_of), dtype)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), shapes, st.booleans())
def test_softmax_backward_matches_numpy(data, dtype, shape, log_of):
    g = data.draw(arrays(dtype, shape))
    y = softmax_ref(data.draw(arrays(dtype, shape)), log_of).astype(dtype)
    out = out_like(g, data.draw)
    nnkernels.softmax_backward(out, g, y, log_of)
    g64, y64 = g.astype(np.float64), y.astype(np.float64)
    if log_of:
        expected = g64 - np.exp(y64) * g64.sum(-1, keepdims=True)
    else:
        expected = y64 * (g64 - (g64 * y64).sum(-1, keepdims=True))
    close(out, expected, dtype, scale=float(np.abs(g).sum(-1).max()))


@pytest.mark.parametrize("dtype", DTYPES)
def test_exp_over_its_whole_range(dtype):
    """log_softmax's backward computes exp(output) for any output: checked from underflow
    (denormals, then 0) to overflow (inf), with infinities and NaN."""
    y = np.concatenate([np.linspace(-110, 95, 4001), [-np.inf, np.inf, np.nan]]).astype(dtype)
    g = np.zeros_like(y)
    g[0] = -1.0                                     # the row's sum is -1: out = g + exp(y)
    out = np.empty_like(y)
    with np.errstate(over="ignore"):
        nnkernels.softmax_backward(out, g, y, True)
        expected = np.exp(y.astype(np.float64)).astype(dtype)
    expected[0] += -1.0
    tiny = np.finfo(dtype).tiny
    np.testing.assert_allclose(out, expected, rtol=TOLERANCE[dtype]["rtol"], atol=tiny)
    assert np.isinf(out[-2]) and out[-3] == 0 and np.isnan(out[-1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(300, 10), (5, 31), (5, 32), (3, 33), (2, 100), (70, 1),
                                   (2100, 3)])
@pytest.mark.parametrize("log_of", [True, False])
def test_softmax_short_and_long_rows(dtype, shape, log_of):
    """Rows shorter than 32 run a block of rows at a time (several blocks here when the
    rows hold more than 2048 elements), longer ones row by row: both against NumPy."""
    rng = np.random.default_rng(shape[0] * shape[1])
    x = rng.uniform(-30, 30, shape).astype(dtype)
    out = nnkernels.softmax(np.empty_like(x), x, log_of)
    close(out, softmax_ref(x, log_of), dtype)
    g = rng.uniform(-1, 1, shape).astype(dtype)
    y = softmax_ref(x, log_of).astype(dtype)
    nnkernels.softmax_backward(out, g, y, log_of)
    g64, y64 = g.astype(np.float64), y.astype(np.float64)
    expected = g64 - np.exp(y64) * g64.sum(-1, keepdims=True) if log_of else \
        y64 * (g64 - (g64 * y64).sum(-1, keepdims=True))
    close(out, expected, dtype, scale=float(np.abs(g).sum(-1).max()))


@pytest.mark.parametrize("dtype", DTYPES)
def test_exp_over_its_whole_range_in_short_rows(dtype):
    """The same range as above through the short rows' block loop (rows of 7)."""
    y = np.concatenate([np.linspace(-110, 95, 4004 - 3), [-np.inf, np.inf, np.nan]])
    y = y.astype(dtype).reshape(-1, 7)
    g = np.zeros_like(y)
    g[:, 0] = -1.0                                  # each row's sum is -1: out = g + exp(y)
    out = np.empty_like(y)
    with np.errstate(over="ignore"):
        nnkernels.softmax_backward(out, g, y, True)
        expected = np.exp(y.astype(np.float64)).astype(dtype)
    expected[:, 0] += -1.0
    tiny = np.finfo(dtype).tiny
    finite = np.isfinite(y[-1])
    np.testing.assert_allclose(out[:-1], expected[:-1], rtol=TOLERANCE[dtype]["rtol"],
                               atol=tiny)
    np.testing.assert_allclose(out[-1][finite], expected[-1][finite],
                               rtol=TOLERANCE[dtype]["rtol"], atol=tiny)
    assert out[-1, -3] == 0 and np.isinf(out[-1, -2]) and np.isnan(out[-1, -1])


def test_softmax_special_rows():
    x = np.array([[0.0, -np.inf, 1.0], [np.nan, 1.0, 2.0], [-np.inf] * 3], np.float32)
    out = nnkernels.softmax(np.empty_like(x), x, False)
    close(out[0], softmax_ref(x[:1], False)[0], np.float32)
    assert np.isnan(out[1]).all() and np.isnan(out[2]).all()   # as PyTorch


def layer_norm_ref(x, k, w, b, eps):
    x = x.astype(np.float64)
    axes = tuple(range(x.ndim - k, x.ndim))
    xhat = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)
    return xhat * (1 if w is None else w) + (0 if b is None else b), xhat


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), shapes, st.booleans(), st.booleans())
def test_layer_norm_matches_numpy(data, dtype, shape, with_weight, with_bias):
    x = data.draw(arrays(dtype, shape, -3, 5))
    k = data.draw(st.integers(1, len(shape)))
    w = data.draw(arrays(dtype, shape[len(shape) - k:])) if with_weight else None
    b = data.draw(arrays(dtype, shape[len(shape) - k:])) if with_bias else None
    out = out_like(x, data.draw)
    nnkernels.layer_norm(out, x, k, w, b, 1e-5)
    close(out, layer_norm_ref(x, k, w, b, 1e-5)[0], dtype)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), shapes, st.booleans())
def test_layer_norm_backward_matches_numpy(data, dtype, shape, with_weight):
    x = data.draw(arrays(dtype, shape, -3, 5))
    g = data.draw(arrays(dtype, shape))
    k = data.draw(st.integers(1, len(shape)))
    w = data.draw(arrays(dtype, shape[len(shape) - k:])) if with_weight else None
    grad_input, grad_weight, grad_bias = nnkernels.layer_norm_backward(g, x, k, w, 1e-5)
    g64 = g.astype(np.float64)
    _, xhat = layer_norm_ref(x, k, None, None, 1e-5)
    axes = tuple(range(x.ndim - k, x.ndim))
    leading = tuple(range(x.ndim - k))
    gw = g64 * (1 if w is None else w)
    rstd = 1 / np.sqrt(x.astype(np.float64).var(axes, keepdims=True) + 1e-5)
    expected = rstd * (gw - gw.mean(axes, keepdims=True)
                       - xhat * (gw * xhat).mean(axes, keepdims=True))
    # the input's gradient sums terms of size |g w| rstd that cancel
    close(grad_input, expected, dtype, scale=float(np.abs(gw).max() * rstd.max()) * 10)
    rows = max(1, int(np.prod([x.shape[d] for d in leading])))
    close(grad_bias, g64.sum(leading), dtype, scale=rows * 6)
    if w is None:
        assert grad_weight is None
    else:
        close(grad_weight, (g64 * xhat).sum(leading), dtype, scale=rows * 20)


def erf(x):
    return np.vectorize(math.erf)(x)


def gelu_ref(x, tanh_mode):
    x = x.astype(np.float64)
    if tanh_mode:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def gelu_derivative_ref(x, tanh_mode):
    x = x.astype(np.float64)
    if tanh_mode:
        k = math.sqrt(2 / math.pi)
        t = np.tanh(k * (x + 0.044715 * x ** 3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)
    return 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), shapes, st.booleans())
def test_gelu_matches_numpy(data, dtype, shape, tanh_mode):
    x = data.draw(arrays(dtype, shape, -12, 12))
    out = out_like(x, data.draw)
    nnkernels.gelu(out, x, tanh_mode)
    close(out, gelu_ref(x, tanh_mode), dtype)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), shapes, st.booleans())
def test_gelu_backward_matches_numpy(data, dtype, shape, tanh_mode):
    x = data.draw(arrays(dtype, shape, -12, 12))
    g = data.draw(arrays(dtype, shape))
    out = out_like(x, data.draw)
    nnkernels.gelu_backward(out, g, x, tanh_mode)
    # 0.5 * (1 + tanh) cancels for large negative x in float32 (as in PyTorch's kernel)
    close(out, g.astype(np.float64) * gelu_derivative_ref(x, tanh_mode), dtype,
          scale=float(np.abs(g).max()))


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), shapes)
def test_tanh_backward_matches_numpy(data, dtype, shape):
    y = np.tanh(data.draw(arrays(dtype, shape, -4, 4)))
    g = data.draw(arrays(dtype, shape))
    out = out_like(y, data.draw)
    assert nnkernels.tanh_backward(out, g, y) is out
    close(out, g.astype(np.float64) * (1 - y.astype(np.float64) ** 2), dtype,
          scale=float(np.abs(g).max()))


@pytest.mark.parametrize("dtype", DTYPES)
def test_tanh_backward_special_values_and_in_place(dtype):
    y = np.array([-1.0, 0.0, 1.0, np.nan, 0.5, -0.0], dtype)
    g = np.array([2.0, 3.0, np.inf, 1.0, np.nan, -1.0], dtype)
    result = nnkernels.tanh_backward(g, g, y)   # written over the gradient it reads
    assert result is g
    np.testing.assert_array_equal(g, [0.0, 3.0, np.nan, np.nan, np.nan, -1.0])


@settings(max_examples=40, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), shapes)
def test_relu_backward_matches_numpy(data, dtype, shape):
    y = np.maximum(data.draw(arrays(dtype, shape, -4, 4)), 0)
    g = data.draw(arrays(dtype, shape))
    out = out_like(y, data.draw)
    assert nnkernels.relu_backward(out, g, y) is out
    np.testing.assert_array_equal(out, np.where(y > 0, g, 0))


def _window_max_reference(planes, lows, highs):
    """The maximum of each box window and its flat index, by PyTorch's rule: a value
    replaces the maximum when greater or NaN; -inf at the start of an empty window."""
    R, D, H, W = planes.shape
    out = tuple(lo.shape[1] for lo in lows)
    values, index = np.empty((R,) + out, planes.dtype), np.empty((R,) + out, np.int64)
    for r in range(R):
        bounds = [(lo[r % lo.shape[0]], hi[r % hi.shape[0]]) for lo, hi in zip(lows, highs)]
        for i, j, k in np.ndindex(*out):
            (ld, hd), (lh, hh), (lw, hw) = [(lo[n], hi[n]) for (lo, hi), n in
                                            zip(bounds, (i, j, k))]
            best, at = -np.inf, (ld * H + lh) * W + lw
            for a, b, c in np.ndindex(hd - ld, hh - lh, hw - lw):
                v = planes[r, ld + a, lh + b, lw + c]
                if v > best or v != v:
                    best, at = v, ((ld + a) * H + lh + b) * W + lw + c
            values[r, i, j, k], index[r, i, j, k] = best, at
    return values, index


@settings(max_examples=40, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), st.tuples(*[st.integers(1, 4)] * 4))
def test_window_max_matches_a_reference(data, dtype, shape):
    """Random box windows (shared or per plane, some empty) over planes holding ties and
    NaNs."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    planes = rng.integers(0, 3, shape).astype(dtype)
    planes[rng.random(shape) < 0.1] = np.nan
    lows, highs = [], []
    for size in shape[1:]:
        rows = shape[0] if data.draw(st.booleans()) else 1
        outputs = data.draw(st.integers(1, 3))
        a, b = rng.integers(0, size + 1, (2, rows, outputs))
        lows.append(np.minimum(a, b))
        highs.append(np.maximum(a, b))
    values, index = nnkernels.window_max(planes, lows, highs)
    expected_values, expected_index = _window_max_reference(planes, lows, highs)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(index, expected_index)


def test_window_max_refuses_bounds_outside_the_planes():
    planes = np.zeros((2, 1, 3, 4), np.float32)
    inside = [np.zeros((1, 1), np.int64), np.zeros((1, 2), np.int64), np.zeros((2, 2), np.int64)]
    ends = [np.ones((1, 1), np.int64), np.full((1, 2), 3), np.full((2, 2), 4)]
    assert nnkernels.window_max(planes, inside, ends)[0].shape == (2, 1, 2, 2)
    with pytest.raises(IndexError, match=r"W bounds must lie in \[0, 4\]"):
        nnkernels.window_max(planes, inside, ends[:2] + [np.full((2, 2), 5)])
    with pytest.raises(IndexError, match="H bounds"):
        nnkernels.window_max(planes, inside[:1] + [np.full((1, 2), -1)] + inside[2:], ends)
    with pytest.raises(ValueError, match="planes, outputs"):
        nnkernels.window_max(planes, inside[:2] + [np.zeros((3, 2), np.int64)], ends)
    with pytest.raises(TypeError, match="planes"):
        nnkernels.window_max(planes[0], inside, ends)


blocks = st.tuples(st.integers(1, 6), st.integers(1, 9), st.integers(1, 7))


@settings(max_examples=50, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), blocks, st.booleans())
def test_batch_norm_sums_match_numpy(data, dtype, shape, with_grad):
    x = data.draw(arrays(dtype, shape)) + data.draw(st.sampled_from([0.0, 100.0]))
    g = data.draw(arrays(dtype, shape)) if with_grad else None
    shift = np.asarray(data.draw(arrays(np.float64, (shape[1],))))
    s1, s2 = nnkernels.batch_norm_sums(x, g, shift)
    d = x.astype(np.float64) - shift[None, :, None]
    expected = (g.astype(np.float64), g * d) if with_grad else (d, d * d)
    for got, want in zip((s1, s2), expected):
        assert got.dtype == np.float64 and got.shape == (shape[1],)
        np.testing.assert_allclose(got, want.sum((0, 2)), rtol=1e-12,
                                   atol=1e-12 * float(np.abs(want).sum() + 1))


@settings(max_examples=50, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), blocks, st.booleans())
def test_batch_norm_apply_matches_numpy(data, dtype, shape, with_grad):
    x = data.draw(arrays(dtype, shape))
    g = data.draw(arrays(dtype, shape)) if with_grad else None
    kx, k0, kg = (data.draw(arrays(dtype, (shape[1],))) for _ in range(3))
    out = out_like(x, data.draw)
    assert nnkernels.batch_norm_apply(out, x, kx, k0, g, kg if with_grad else None) is out
    expected = x * kx[:, None] + k0[:, None] + (g * kg[:, None] if with_grad else 0)
    close(out, expected.astype(np.float64), dtype, scale=40.0)


def test_batch_norm_kernels_refuse_what_they_do_not_take():
    x = np.ones((2, 3, 4), np.float32)
    with pytest.raises(TypeError, match="outer, C, inner"):
        nnkernels.batch_norm_sums(np.ones((2, 3), np.float32), None, np.zeros(3))
    with pytest.raises(TypeError, match="one dtype and shape"):
        nnkernels.batch_norm_sums(x, None, np.zeros(2))
    with pytest.raises(TypeError, match="one dtype and shape"):
        nnkernels.batch_norm_apply(x.copy(), x, np.ones(3), np.ones(3, np.float32))
    with pytest.raises(TypeError, match="go together"):
        nnkernels.batch_norm_apply(x.copy(), x, np.ones(3, np.float32),
                                   np.ones(3, np.float32), x)


def test_batch_norm_statistics_do_not_cancel_for_a_large_mean():
    """float32 values near 1e4 with a spread of 1e-2: the shifted double sums give the
    variance to float32's resolution of the values, where sum(x**2)/n - mean**2 in
    float32 would give noise or a negative number."""
    rng = np.random.default_rng(0)
    x = (1e4 + 1e-2 * rng.standard_normal((64, 3, 50))).astype(np.float32)
    reference = x.astype(np.float64)
    mean = reference.mean((0, 2))
    s1, s2 = nnkernels.batch_norm_sums(x, None, reference[0, :, 0].copy())
    n = 64 * 50
    variance = s2 / n - (s1 / n) ** 2
    np.testing.assert_allclose(variance, reference.var((0, 2)), rtol=1e-6)
    np.testing.assert_allclose(reference[0, :, 0] + s1 / n, mean, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_relu_backward_selects_and_writes_in_place(dtype):
    y = np.array([1.0, 0.0, 0.0, 2.0, np.nan, 3.0], dtype)
    g = np.array([np.inf, np.inf, np.nan, np.nan, 5.0, -1.0], dtype)
    result = nnkernels.relu_backward(g, g, y)   # written over the gradient it reads
    assert result is g
    # PyTorch's threshold_backward: 0 where y <= 0; a NaN y passes the gradient
    np.testing.assert_array_equal(g, [np.inf, 0.0, 0.0, np.nan, 5.0, -1.0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tanh_mode", [False, True])
def test_gelu_special_values_and_in_place(dtype, tanh_mode):
    """PyTorch's values at the extremes (its float64 ones: its float32 erf GELU gives NaN at
    +inf), computed in place."""
    x = np.array([-np.inf, -50.0, 0.0, 50.0, np.inf, np.nan], dtype)
    grad = nnkernels.gelu_backward(np.empty_like(x), np.ones_like(x), x, tanh_mode)
    np.testing.assert_array_equal(grad, [np.nan, 0.0, 0.5, 1.0, np.nan, np.nan])
    result = nnkernels.gelu(x, x, tanh_mode)
    assert result is x
    np.testing.assert_array_equal(x, [np.nan, -0.0, 0.0, 50.0, np.inf, np.nan])


def test_refusals():
    f32 = np.ones((2, 3), np.float32)
    with pytest.raises(TypeError, match="float32 or float64"):
        nnkernels.gelu(np.ones((2, 3), np.int64), np.ones((2, 3), np.int64), False)
    with pytest.raises(TypeError, match="one dtype and shape"):
        nnkernels.softmax(f32.copy(), f32.astype(np.float64), False)
    with pytest.raises(TypeError, match="one dtype and shape"):
        nnkernels.gelu_backward(f32.copy(), f32, np.ones(3, np.float32), False)
    with pytest.raises(TypeError, match="one dtype and shape"):
        nnkernels.tanh_backward(f32.copy(), f32, f32.astype(np.float64))
    with pytest.raises(ValueError, match="trailing dims"):
        nnkernels.layer_norm(f32.copy(), f32, 3, None, None, 1e-5)
    with pytest.raises(TypeError, match="one dtype and shape"):
        nnkernels.layer_norm(f32.copy(), f32, 1, np.ones(2, np.float32), None, 1e-5)
    read_only = f32.copy()
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        nnkernels.softmax(read_only, f32, False)
    assert nnkernels.supports(f32, None, f32) and not nnkernels.supports(f32, f32 > 0)
    assert not nnkernels.supports(f32, f32.astype(np.float64))


def max_pool_ref(x, kernel, stride, padding, dilation, out_size):
    """Values and flat plane indices by brute force over the windows (first maximum)."""
    h, w = x.shape[-2:]
    lead = x.shape[:-2]
    planes = x.reshape((-1, h, w)).astype(np.float64)
    values = np.empty((planes.shape[0],) + out_size)
    indices = np.empty((planes.shape[0],) + out_size, np.int64)
    for i in range(out_size[0]):
        for j in range(out_size[1]):
            rows = [r for r in range(i * stride[0] - padding[0],
                                     i * stride[0] - padding[0] + dilation[0] * kernel[0],
                                     dilation[0]) if 0 <= r < h]
            cols = [c for c in range(j * stride[1] - padding[1],
                                     j * stride[1] - padding[1] + dilation[1] * kernel[1],
                                     dilation[1]) if 0 <= c < w]
            flat = np.array([r * w + c for r in rows for c in cols])
            window = planes.reshape(planes.shape[0], -1)[:, flat]
            values[:, i, j] = window.max(-1)
            indices[:, i, j] = flat[window.argmax(-1)]
    return values.reshape(lead + out_size), indices.reshape(lead + out_size)


@st.composite
def pool_geometries(draw):
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(2))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(2))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(2))
    padding = tuple(draw(st.integers(0, k // 2)) for k in kernel)
    size = tuple(draw(st.integers(e, e + 5)) for e in
                 (d * (k - 1) + 1 for d, k in zip(dilation, kernel)))
    out = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                for n, p, d, k, s in zip(size, padding, dilation, kernel, stride))
    return kernel, stride, padding, dilation, size, out


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), pool_geometries(),
       st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple))
def test_max_pool2d_matches_numpy(data, dtype, geometry, lead):
    kernel, stride, padding, dilation, size, out = geometry
    # distinct values: the first maximum is then the only one
    x = data.draw(arrays(dtype, lead + size))
    values, indices = nnkernels.max_pool2d(x, kernel, stride, padding, dilation, out)
    expected_values, expected_indices = max_pool_ref(x, kernel, stride, padding, dilation, out)
    np.testing.assert_array_equal(values, expected_values.astype(dtype))
    np.testing.assert_array_equal(indices, expected_indices)
    g = data.draw(arrays(dtype, values.shape))
    grad_input = nnkernels.max_pool_backward(g, indices, x.shape, 2)
    expected = np.zeros((int(np.prod(lead)), size[0] * size[1]))
    for plane, (gs, idx) in enumerate(zip(g.reshape(len(expected), -1),
                                          indices.reshape(len(expected), -1))):
        np.add.at(expected[plane], idx, gs)
    close(grad_input, expected.reshape(x.shape), dtype, scale=4)


def test_max_pool2d_ties_nan_and_infinities():
    """PyTorch's choices: the first of equal maxima, the last NaN, and a window of -inf
    (padding aside) pointing at its first position inside the plane."""
    x = np.array([[[1.0, 1.0, np.nan, np.nan], [-np.inf, -np.inf, 0.0, 2.0]]], np.float32)
    values, indices = nnkernels.max_pool2d(x, (1, 2), (1, 2), (0, 0), (1, 1), (2, 2))
    np.testing.assert_array_equal(indices, [[[0, 3], [4, 7]]])
    np.testing.assert_array_equal(values, [[[1.0, np.nan], [-np.inf, 2.0]]])
    values, indices = nnkernels.max_pool2d(x, (2, 2), (2, 2), (1, 1), (1, 1), (2, 3))
    np.testing.assert_array_equal(indices, [[[0, 2, 3], [4, 6, 7]]])
    x = np.array([[[-np.inf, -np.inf, 3.0], [-np.inf, -np.inf, 1.0]]])
    values, indices = nnkernels.max_pool2d(x, (2, 2), (1, 1), (1, 1), (1, 1), (3, 4))
    np.testing.assert_array_equal(indices, [[[0, 0, 2, 2], [0, 0, 2, 2], [3, 3, 5, 5]]])
    assert values[0, 0, 0] == -np.inf and values[0, 2, 3] == 1.0


def test_max_pool_refusals():
    x = np.zeros((1, 4, 4), np.float32)
    with pytest.raises(ValueError, match="overlap"):
        nnkernels.max_pool2d(x, (2, 2), (1, 1), (2, 2), (1, 1), (4, 4))
    with pytest.raises(TypeError, match="float32 or float64"):
        nnkernels.max_pool2d(x.astype(np.int64), (2, 2), (2, 2), (0, 0), (1, 1), (2, 2))
    with pytest.raises(IndexError, match="outside the plane"):
        nnkernels.max_pool_backward(np.ones((1, 2, 2), np.float32),
                                    np.full((1, 2, 2), 16, np.int64), (1, 4, 4), 2)
    with pytest.raises(TypeError, match="int64 indices"):
        nnkernels.max_pool_backward(np.ones((1, 2, 2), np.float32),
                                    np.zeros((1, 2, 2), np.int32), (1, 4, 4), 2)


@st.composite
def avg_pool_geometries(draw):
    kernel = tuple(draw(st.integers(1, 4)) for _ in range(2))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(2))
    padding = tuple(draw(st.integers(0, k // 2)) for k in kernel)
    size = tuple(draw(st.integers(k, k + 5)) for k in kernel)
    ceil_mode = draw(st.booleans())
    out = []
    for n, p, k, s in zip(size, padding, kernel, stride):
        o = (n + 2 * p - k + (s - 1 if ceil_mode else 0)) // s + 1
        out.append(o - 1 if ceil_mode and (o - 1) * s >= n + p else o)
    return kernel, stride, padding, size, tuple(out)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), avg_pool_geometries(),
       st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple), st.booleans(),
       st.sampled_from([None, 1, 3, -2]))
def test_avg_pool2d_matches_numpy(data, dtype, geometry, lead, count_include_pad, divisor):
    """Each window's sum over the plane, over the divisor PyTorch uses: the override, else
    the window clipped to the padded plane (count_include_pad) or to the plane; and the
    gradient, each value over that divisor spread over its window."""
    kernel, stride, padding, size, out = geometry
    x = data.draw(arrays(dtype, lead + size))
    values = nnkernels.avg_pool2d(x, kernel, stride, padding, out, count_include_pad, divisor)
    planes = x.reshape((-1,) + size).astype(np.float64)
    g = data.draw(arrays(dtype, values.shape))
    grad_input = nnkernels.avg_pool2d_backward(g, x.shape, kernel, stride, padding,
                                               count_include_pad, divisor)
    grads = g.reshape((-1,) + out).astype(np.float64)
    expected = np.empty((planes.shape[0],) + out)
    expected_grad = np.zeros(planes.shape)
    h, w = size
    for i in range(out[0]):
        for j in range(out[1]):
            r0, c0 = i * stride[0] - padding[0], j * stride[1] - padding[1]
            r1, c1 = min(r0 + kernel[0], h + padding[0]), min(c0 + kernel[1], w + padding[1])
            inside = (slice(None), slice(max(r0, 0), min(r1, h)), slice(max(c0, 0), min(c1, w)))
            window = planes[inside]
            count = divisor or ((r1 - r0) * (c1 - c0) if count_include_pad else
                                window.shape[1] * window.shape[2])
            expected[:, i, j] = window.sum((1, 2)) / count
            expected_grad[inside] += (grads[:, i, j] / count)[:, None, None]
    close(values, expected.reshape(lead + out), dtype, scale=4)
    close(grad_input, expected_grad.reshape(x.shape), dtype, scale=4)


def test_avg_pool2d_refusals():
    x = np.zeros((1, 4, 4), np.float32)
    with pytest.raises(ValueError, match="overlap"):
        nnkernels.avg_pool2d(x, (2, 2), (2, 2), (0, 0), (3, 2), True, None)
    with pytest.raises(ValueError, match="not be zero"):
        nnkernels.avg_pool2d(x, (2, 2), (2, 2), (0, 0), (2, 2), True, 0)
    with pytest.raises(TypeError, match="float32 or float64"):
        nnkernels.avg_pool2d(x.astype(np.int64), (2, 2), (2, 2), (0, 0), (2, 2), True, None)
    with pytest.raises(TypeError, match="leading dims"):
        nnkernels.avg_pool2d_backward(np.ones((2, 2, 2), np.float32), (1, 4, 4), (2, 2),
                                      (2, 2), (0, 0), True, None)
    with pytest.raises(ValueError, match="overlap"):
        nnkernels.avg_pool2d_backward(np.ones((1, 3, 2), np.float32), (1, 4, 4), (2, 2),
                                      (2, 2), (0, 0), True, None)


@st.composite
def conv_geometries(draw):
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(2))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(2))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(2))
    out = tuple(draw(st.integers(1, 4)) for _ in range(2))
    size = tuple((o - 1) * s + d * (k - 1) + 1 + draw(st.integers(0, 2))
                 for o, s, d, k in zip(out, stride, dilation, kernel))
    return kernel, stride, dilation, size, out


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), conv_geometries(), st.integers(1, 3),
       st.integers(1, 3), st.booleans())
def test_im2col2d_matches_numpy(data, dtype, geometry, n, c, positions_major):
    kernel, stride, dilation, size, out = geometry
    x = data.draw(arrays(dtype, (n, c) + size))
    columns = nnkernels.im2col2d(x, kernel, stride, dilation, out, positions_major)
    expected = np.empty((n, c, kernel[0], kernel[1], out[0], out[1]), dtype)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            expected[:, :, i, j] = x[:, :, i * dilation[0]::stride[0], j * dilation[1]::stride[1]][
                :, :, :out[0], :out[1]]
    if positions_major:
        expected = expected.transpose(0, 4, 5, 1, 2, 3).reshape(n * out[0] * out[1], -1)
    else:
        expected = expected.reshape(n, c * kernel[0] * kernel[1], -1)
    np.testing.assert_array_equal(columns, expected)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), st.integers(1, 4), st.integers(1, 5),
       st.integers(1, 6), st.integers(0, 5))
def test_col2im_matches_numpy(data, dtype, planes, k, length, spare):
    total = length + spare
    starts = [data.draw(st.integers(0, spare)) for _ in range(k)]
    blocks = data.draw(arrays(dtype, (planes, k, length)))
    expected = np.zeros((planes, total))
    for j, start in enumerate(starts):
        expected[:, start:start + length] += blocks[:, j]
    close(nnkernels.col2im(blocks, starts, total), expected, dtype, scale=k)


def test_im2col_col2im_refusals():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(ValueError, match="inside the input"):
        nnkernels.im2col2d(x, (3, 3), (1, 1), (1, 1), (3, 2), False)
    with pytest.raises(TypeError, match=r"\(N, C, H, W\)"):
        nnkernels.im2col2d(x[0], (3, 3), (1, 1), (1, 1), (2, 2), False)
    with pytest.raises(ValueError, match="starts in"):
        nnkernels.col2im(np.zeros((1, 2, 3), np.float32), [0, 2], 4)
    with pytest.raises(TypeError, match="float32 or float64"):
        nnkernels.col2im(np.zeros((1, 2, 3), np.int64), [0, 1], 4)


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "gelu", "gelu_tanh",
                                  "max_pool2d", "avg_pool2d", "conv2d"])
def test_ops_on_the_c_kernels_match_torch_in_float32(name):
    """The ops that call these kernels, float32 forward and backward against PyTorch."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 10, 12)).astype(np.float32)
    weight = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    scale = rng.standard_normal(12).astype(np.float32)

    def run(lib, f):
        lib_x = lib.tensor(x, requires_grad=True)
        lib_w = lib.tensor(weight, requires_grad=True)
        lib_s = lib.tensor(scale, requires_grad=True)
        out = f(lib, lib_x, lib_w, lib_s)
        grads = lib.autograd.grad((out * out).sum(), (lib_x, lib_w, lib_s), allow_unused=True)
        return [out.detach().numpy()] + [g.numpy() for g in grads if g is not None]
    calls = {
        "softmax": lambda lib, a, w, s: lib.nn.functional.softmax(a, -1) * s,
        "log_softmax": lambda lib, a, w, s: lib.nn.functional.log_softmax(a, -1) * s,
        "layer_norm": lambda lib, a, w, s: lib.nn.functional.layer_norm(a, (12,), s, s),
        "gelu": lambda lib, a, w, s: lib.nn.functional.gelu(a) * s,
        "gelu_tanh": lambda lib, a, w, s: lib.nn.functional.gelu(a, approximate="tanh") * s,
        "max_pool2d": lambda lib, a, w, s: lib.nn.functional.max_pool2d(a, 3, 2, 1) * s[:6],
        "avg_pool2d": lambda lib, a, w, s: lib.nn.functional.avg_pool2d(
            a, 3, 2, 1, ceil_mode=True, count_include_pad=False) * s[:7],
        "conv2d": lambda lib, a, w, s: lib.nn.functional.conv2d(a, w) * s[:10],
    }
    for ours, theirs in zip(run(mt, calls[name]), run(torch, calls[name])):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


def test_convolutions_reuse_their_scratch_buffers_safely():
    """The columns and blocks live in per-thread buffers reused between calls: results
    (forward, both gradients) never alias them, and a later call leaves earlier results
    intact."""
    rng = np.random.default_rng(1)
    xs = [mt.tensor(rng.standard_normal((2, 3, 9, 8)).astype(np.float32), requires_grad=True)
          for _ in range(2)]
    ws = [mt.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), requires_grad=True)
          for _ in range(2)]
    results = []
    for x, w in zip(xs, ws):
        out = mt.nn.functional.conv2d(x, w)
        results.append([out.detach()] + list(mt.autograd.grad(out.sum(), (x, w))))
    kept = [[t.numpy().copy() for t in r] for r in results]
    for x, w, expected in zip(xs, ws, kept):     # recomputed: the same values
        out = mt.nn.functional.conv2d(x, w)
        again = [out.detach()] + list(mt.autograd.grad(out.sum(), (x, w)))
        for a, b in zip(again, expected):
            np.testing.assert_array_equal(a.numpy(), b)
    for r, expected in zip(results, kept):       # and the first results were not touched
        for a, b in zip(r, expected):
            np.testing.assert_array_equal(a.numpy(), b)
    assert not np.array_equal(kept[0][0], kept[1][0])
