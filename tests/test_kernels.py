"""Tests for microtensor._C.kernels: strided copy/cast, fill, sum and the tensor's C arithmetic,
checked against NumPy on random shapes, strides, offsets, broadcasts and overlaps."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from microtensor._C import kernels

DTYPES = [np.float32, np.float64, np.int64, np.int32, np.bool_]


def random_values(rng, dtype, size):
    if dtype == np.bool_:
        return rng.random(size) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-1000, 1000, size).astype(dtype)
    values = rng.uniform(-1000, 1000, size)
    values[rng.random(size) < 0.1] = 0.0  # exercises the "!= 0" rule of casts to bool
    return values.astype(dtype)


@st.composite
def strided_views(draw, dtype, shape=None):
    """A view into a larger random buffer: (buffer, view) with steps, an offset and a
    permutation of dims, so the view may be non-contiguous or transposed."""
    if shape is None:
        shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=4)))
    steps = [draw(st.integers(1, 3)) for _ in shape]
    offset = draw(st.integers(0, 3))
    perm = draw(st.permutations(range(len(shape))))
    # Build the view in the permuted order, then transpose back to the requested shape.
    permuted_shape = [shape[p] for p in perm]
    permuted_steps = [steps[p] for p in perm]
    base_shape = [max(1, n * s) for n, s in zip(permuted_shape, permuted_steps)]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    buffer = random_values(rng, dtype, offset + int(np.prod(base_shape)))
    base = buffer[offset:].reshape(base_shape)
    view = base[tuple(slice(0, n * s, s) for n, s in zip(permuted_shape, permuted_steps)) + (...,)]
    view = view.transpose(np.argsort(perm))
    assert view.shape == tuple(shape)
    return buffer, view


def broadcast_source(data, dtype, shape):
    """A source of `shape` whose dims are randomly stride-0 broadcasts of size-1 dims."""
    keep = [data.draw(st.booleans()) for _ in shape]
    small_shape = tuple(n if k else 1 for n, k in zip(shape, keep))
    _, small = data.draw(strided_views(dtype, small_shape))
    return np.broadcast_to(small, shape)


def expected_copy(dst_buffer, dst, src):
    """Reference result: NumPy's unsafe-cast copy applied to a copy of the whole buffer."""
    expected_buffer = dst_buffer.copy()
    if dst.size:
        offset = (dst.__array_interface__["data"][0]
                  - dst_buffer.__array_interface__["data"][0])
        expected_view = np.lib.stride_tricks.as_strided(
            expected_buffer[offset // dst.itemsize:], dst.shape, dst.strides)
        with np.errstate(invalid="ignore"):
            np.copyto(expected_view, src, casting="unsafe")
    return expected_buffer


@settings(max_examples=150, deadline=None)
@given(data=st.data(), dst_dtype=st.sampled_from(DTYPES), src_dtype=st.sampled_from(DTYPES))
def test_copy_matches_numpy_on_random_layouts(data, dst_dtype, src_dtype):
    dst_buffer, dst = data.draw(strided_views(dst_dtype))
    if data.draw(st.booleans()):
        src = broadcast_source(data, src_dtype, dst.shape)
    else:
        _, src = data.draw(strided_views(src_dtype, dst.shape))
    expected = expected_copy(dst_buffer, dst, src)
    kernels.copy_(dst, src)
    np.testing.assert_array_equal(dst_buffer, expected)  # also: nothing outside dst written


@pytest.mark.parametrize("dst_dtype,src_dtype", list(itertools.product(DTYPES, DTYPES)))
def test_copy_every_dtype_pair_through_the_tiled_path(dst_dtype, src_dtype):
    rng = np.random.default_rng(0)
    src = random_values(rng, src_dtype, 3 * 70 * 45).reshape(3, 70, 45).transpose(2, 0, 1)
    dst = np.zeros(src.shape, dst_dtype)
    kernels.copy_(dst, src)
    np.testing.assert_array_equal(dst, src.astype(dst_dtype))


def test_copy_casts_like_numpy_unsafe_cast():
    src = np.array([-2.7, -0.0, 0.0, 0.5, np.nan, 3.9], np.float64)
    dst = np.empty(6, np.bool_)
    kernels.copy_(dst, src)
    np.testing.assert_array_equal(dst, [True, False, False, True, True, True])
    dst = np.empty(6, np.int32)
    kernels.copy_(dst, src[[0, 1, 2, 3, 5, 5]])
    np.testing.assert_array_equal(dst, [-2, 0, 0, 0, 3, 3])
    dst = np.empty(3, np.float32)
    kernels.copy_(dst, np.array([True, False, True]))
    np.testing.assert_array_equal(dst, [1.0, 0.0, 1.0])


def test_copy_large_transpose_and_contiguous():
    a = np.random.default_rng(1).random((300, 517), dtype=np.float32)
    out = np.empty((517, 300), np.float32)
    kernels.copy_(out, a.T)
    np.testing.assert_array_equal(out, a.T)
    out64 = np.empty((300, 517), np.float64)
    kernels.copy_(out64, a)
    np.testing.assert_array_equal(out64, a)
    # Tiled with non-unit steps on both sides, and a stride-0 dim riding along outside.
    dst_buffer = np.zeros((2 * 173, 3, 150), np.int32)
    dst = dst_buffer[::2, 1, :]
    src = a[::2, ::3].T
    kernels.copy_(dst, src)
    np.testing.assert_array_equal(dst, src.astype(np.int32))
    assert not dst_buffer[1::2].any() and not dst_buffer[:, [0, 2]].any()
    wide = np.empty((4, 173, 150), np.float64)
    kernels.copy_(wide, np.broadcast_to(src, (4, 173, 150)))
    np.testing.assert_array_equal(wide, np.broadcast_to(src, (4, 173, 150)))


# Transposing copies work in tiles of one cache line (64 bytes) of the source by one line
# of the destination, the first tile of each side cut short at a line boundary, in bands
# of kernels.copy_band_rows(row stride) source rows: sizes and offsets around all three.
TILE_EDGES = [1, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 130]


@settings(max_examples=120, deadline=None)
@given(rows=st.sampled_from(TILE_EDGES), cols=st.sampled_from(TILE_EDGES),
       dst_dtype=st.sampled_from(DTYPES), src_dtype=st.sampled_from(DTYPES),
       src_steps=st.tuples(st.sampled_from([-3, -2, -1, 1, 2, 3]),
                           st.sampled_from([-2, -1, 1, 3])),
       dst_step=st.sampled_from([-2, -1, 1, 2]),
       offsets=st.tuples(st.integers(0, 17), st.integers(0, 17)),
       seed=st.integers(0, 2**32 - 1))
def test_copy_transposes_across_tile_edges_steps_and_offsets(rows, cols, dst_dtype, src_dtype,
                                                             src_steps, dst_step, offsets, seed):
    rng = np.random.default_rng(seed)
    row_step, col_step = src_steps
    # The source runs fastest along the destination's rows: a transposed, sliced buffer.
    src_size = cols * abs(col_step) * rows * abs(row_step)
    src_base = random_values(rng, src_dtype, offsets[0] + src_size)
    src = src_base[offsets[0]:].reshape(cols * abs(col_step), rows * abs(row_step))
    src = src[::col_step, ::row_step].T
    dst_buffer = np.zeros(offsets[1] + rows * cols * abs(dst_step), dst_dtype)
    dst = dst_buffer[offsets[1]:].reshape(rows, cols * abs(dst_step))[:, ::dst_step]
    expected = expected_copy(dst_buffer, dst, src)
    kernels.copy_(dst, src)
    np.testing.assert_array_equal(dst_buffer, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.bool_])
def test_copy_transposes_across_bands(dtype):
    # Source rows 4400 bytes apart: more than a page, so a band is at most 256 rows (fewer
    # with a small L2); 600 source rows cross band boundaries off line boundaries.
    band = kernels.copy_band_rows(4400)
    assert band < 600
    rng = np.random.default_rng(3)
    base = random_values(rng, dtype, 600 * 4400 // np.dtype(dtype).itemsize)
    src = base.reshape(600, -1)[:, 3:43].T
    assert src.strides[1] == 4400
    dst = np.zeros((40, 600), dtype)
    kernels.copy_(dst, src)
    np.testing.assert_array_equal(dst, src)
    dst3 = np.zeros((2, 40, 600), np.float64)
    kernels.copy_(dst3, np.broadcast_to(src, (2, 40, 600)))
    np.testing.assert_array_equal(dst3[1], src.astype(np.float64))


@given(row_stride=st.integers(-(1 << 24), 1 << 24),
       page=st.sampled_from([4096, 16384, 65536, 2 << 20]),
       l2=st.integers(64 << 10, 64 << 20))
def test_copy_band_fits_the_tlb_and_half_the_l2(row_stride, page, l2):
    band = kernels.copy_band_rows(row_stride, page, l2)
    # Pages holding the band's lines: one per row at most, else the span of the rows.
    pages = min(band, -(-band * abs(row_stride) // page) + 1)
    assert band >= 64                                    # a line of the narrowest dtype
    if band > 64:
        assert pages <= 256 + 1 and band * 64 <= l2 // 2


def test_copy_band_for_known_machines():
    # 4096-wide float32 rows (16 KiB apart), 4 KiB pages: one page per row, 256 pages.
    assert kernels.copy_band_rows(16384, 4096, 1 << 20) == 256
    assert kernels.copy_band_rows(16384, 4096, 4 << 20) == 256
    # Rows 256 bytes apart share pages: the L2 bound (half of 256 KiB in lines) decides.
    assert kernels.copy_band_rows(256, 4096, 256 << 10) == 2048
    assert kernels.copy_band_rows(-256, 4096, 256 << 10) == 2048


def test_copy_geometry_reads_the_machine_or_falls_back(monkeypatch):
    import os
    assert kernels.copy_geometry(read=False) == {"page": 4096, "l2": 1 << 20}
    sizes = kernels.copy_geometry()
    assert sizes["page"] == os.sysconf("SC_PAGESIZE")
    assert 4096 <= sizes["l2"] <= 1 << 30

    def broken_sysconf(name):
        if name == "SC_PAGESIZE":
            return 1                                 # implausible: ignored
        raise ValueError(name)                       # unknown name on this libc
    monkeypatch.setattr(os, "sysconf", broken_sysconf)
    monkeypatch.setattr(kernels, "_sysfs_cache_bytes", lambda level: None)
    assert kernels.copy_geometry() == {"page": 4096, "l2": 1 << 20}
    monkeypatch.setattr(kernels, "_sysfs_cache_bytes", lambda level: 2 << 20)
    assert kernels.copy_geometry()["l2"] == 2 << 20


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_copy_between_overlapping_views(dtype):
    rng = np.random.default_rng(2)
    cases = [
        (lambda b: b[10:60], lambda b: b[0:50]),            # dst after src
        (lambda b: b[0:50], lambda b: b[10:60]),            # dst before src
        (lambda b: b[0:80:2], lambda b: b[1:81:2]),         # interleaved, disjoint elements
        (lambda b: b[:64].reshape(8, 8), lambda b: b[:64].reshape(8, 8).T),
        (lambda b: b[:30][::-1], lambda b: b[:30]),         # reversed onto itself
        (lambda b: b[5:35], lambda b: b[0:1]),              # broadcast from inside dst's range
        (lambda b: b[0:40], lambda b: b[0:40]),             # the same view
    ]
    for make_dst, make_src in cases:
        buffer = random_values(rng, dtype, 100)
        expected = buffer.copy()
        np.copyto(make_dst(expected), np.broadcast_to(make_src(expected).copy(),
                                                      make_dst(expected).shape))
        dst, src = make_dst(buffer), make_src(buffer)
        kernels.copy_(dst, src)
        np.testing.assert_array_equal(buffer, expected)


def test_copy_overlapping_with_cast():
    buffer = np.arange(40, dtype=np.float64)
    ints = buffer.view(np.int64)
    kernels.copy_(ints[:20], buffer[10:30])
    np.testing.assert_array_equal(ints[:20], np.arange(10, 30))


def test_copy_zero_size_and_zero_dim():
    kernels.copy_(np.empty((0, 3), np.float32), np.empty((0, 3), np.int64))
    dst = np.array(0.0, np.float32)
    kernels.copy_(dst, np.array(7, np.int64))
    assert dst == 7.0
    dst = np.zeros((2, 3), np.int32)
    kernels.copy_(dst, np.array(5.5))  # a 0-d source broadcasts
    np.testing.assert_array_equal(dst, 5)


def test_copy_errors():
    with pytest.raises(RuntimeError, match="broadcast"):
        kernels.copy_(np.zeros((2, 3)), np.zeros(4))
    readonly = np.zeros(3)
    readonly.flags.writeable = False
    with pytest.raises(RuntimeError, match="read-only"):
        kernels.copy_(readonly, np.ones(3))


def test_copy_falls_back_for_unaligned_and_other_dtypes():
    raw = np.zeros(4 * 10 + 1, np.uint8)
    unaligned = raw[1:].view(np.float32)
    kernels.copy_(unaligned, np.arange(10, dtype=np.int64))
    np.testing.assert_array_equal(unaligned, np.arange(10))
    halves = np.zeros(4, np.float16)
    kernels.copy_(halves, np.arange(4.0))
    np.testing.assert_array_equal(halves, np.arange(4.0))


@settings(max_examples=100, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_sum_all_matches_numpy_on_random_layouts(data, dtype):
    _, view = data.draw(strided_views(dtype))
    total = kernels.sum_all(view)
    if dtype in (np.float32, np.float64):
        assert isinstance(total, float)
        reference = view.astype(np.float64).sum()
        # a float32 sum's rounding error grows with the sum of the magnitudes, not with
        # the (possibly cancelled) total: bound it by that, with room for ~16 roundings
        magnitude = np.abs(view.astype(np.float64)).sum()
        assert abs(total - reference) <= 16 * np.finfo(dtype).eps * magnitude + 1e-12
    else:
        assert isinstance(total, int)
        assert total == int(view.sum(dtype=np.int64))


@pytest.mark.parametrize("shape,index", [
    ((1000, 37), np.s_[:, ::2]), ((64, 64), np.s_[::-1, ::3]), ((5, 4, 3), np.s_[..., 1]),
    ((3000,), np.s_[::7]), ((20000,), np.s_[:]),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_all_strided_and_long(shape, index, dtype):
    view = random_values(np.random.default_rng(3), dtype, int(np.prod(shape))).reshape(shape)
    view = view[index]
    reference = view.astype(np.float64).sum()
    assert kernels.sum_all(view) == pytest.approx(reference, rel=1e-6)
    assert kernels.sum_all(view.T) == pytest.approx(reference, rel=1e-6)


def test_sum_all_float32_is_as_accurate_as_numpy():
    # Both sum 16 values per float32 accumulator, so they share the per-block error bound;
    # whichever cancels more by luck may differ by about one float32 ulp of the total.
    rng = np.random.default_rng(4)
    for values in (rng.random(1_000_003, dtype=np.float32),
                   np.full(2_000_000, 0.1, np.float32),
                   (rng.standard_normal(500_000) * 1e3).astype(np.float32)):
        exact = values.astype(np.float64).sum()
        numpy_error = abs(float(values.sum()) - exact)
        one_ulp = 2.0**-23 * np.abs(values.astype(np.float64)).sum()
        assert abs(kernels.sum_all(values) - exact) <= numpy_error + one_ulp


def test_sum_all_integers_wrap_like_int64_and_bool_counts():
    big = np.array([2**62, 2**62, 2**62], np.int64)
    assert kernels.sum_all(big) == int(big.sum())  # wraps to a negative, like torch
    assert kernels.sum_all(np.array([True, False, True] * 100)) == 200
    assert kernels.sum_all(np.full(10, -2**31, np.int32)) == -10 * 2**31


def test_sum_all_empty_and_zero_dim():
    assert kernels.sum_all(np.empty((0, 4), np.float32)) == 0.0
    assert kernels.sum_all(np.empty(0, np.int32)) == 0
    assert kernels.sum_all(np.array(2.5, np.float32)) == 2.5
    assert kernels.sum_all(np.array(True)) == 1


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(DTYPES),
       value=st.one_of(st.booleans(), st.integers(-1000, 1000),
                       st.floats(-1e3, 1e3, allow_nan=False)))
def test_fill_matches_numpy(data, dtype, value):
    buffer, view = data.draw(strided_views(dtype))
    expected = buffer.copy()
    if view.size:
        expected_view = np.lib.stride_tricks.as_strided(
            expected[(view.__array_interface__["data"][0]
                      - buffer.__array_interface__["data"][0]) // view.itemsize:],
            view.shape, view.strides)
        expected_view[...] = np.asarray(value).astype(dtype)
    kernels.fill_(view, value)
    np.testing.assert_array_equal(buffer, expected)


def test_fill_rejects_non_scalars():
    with pytest.raises(TypeError):
        kernels.fill_(np.zeros(3), [1, 2, 3])
    with pytest.raises(TypeError):
        kernels.fill_(np.zeros(3), 1j)


ARITHMETIC = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide}


def _apply(symbol, left, right):
    return {"+": lambda: left + right, "-": lambda: left - right,
            "*": lambda: left * right, "/": lambda: left / right}[symbol]()


@st.composite
def broadcast_pairs(draw):
    """Two shapes that broadcast together: some dims of one stretched to 1 or dropped."""
    shape = draw(st.lists(st.integers(0, 4), min_size=0, max_size=4))
    other = [1 if draw(st.booleans()) else n for n in shape]
    return tuple(shape), tuple(other[draw(st.integers(0, len(other))):])


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([np.float32, np.float64]), broadcast_pairs(), st.booleans(),
       st.sampled_from(sorted(ARITHMETIC)), st.data())
def test_tensor_arithmetic_fast_path_matches_numpy(dtype, shapes, swap, symbol, data):
    """The C path of ``a + b`` (and - * /): any strides and offsets, broadcasting both ways,
    results equal to NumPy's and laid out by PyTorch's rule (``elementwise_output_strides``)."""
    import microtensor as mt
    from microtensor._C import meta
    a_view = data.draw(strided_views(dtype, shapes[0]))[1]
    b_view = data.draw(strided_views(dtype, shapes[1]))[1]
    if swap:
        a_view, b_view = b_view, a_view
    a, b = mt.from_numpy(a_view), mt.from_numpy(b_view)
    with np.errstate(all="ignore"):
        expected = ARITHMETIC[symbol](a_view, b_view)
    out = _apply(symbol, a, b)
    assert out.dtype == a.dtype and tuple(out.shape) == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)
    assert out.stride() == meta.elementwise_output_strides(
        expected.shape, [(a._sizes, a._strides), (b._sizes, b._strides)])


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([np.float32, np.float64]), st.sampled_from(sorted(ARITHMETIC)),
       st.sampled_from([1.3, -2, 0.0, 7]), st.booleans(), st.data())
def test_tensor_number_fast_path_rounds_the_number_first(dtype, symbol, number, reflected, data):
    """``t <op> number`` and ``number <op> t``: the number is rounded to the tensor's dtype,
    as PyTorch does, and the result keeps a dense input's layout."""
    import microtensor as mt
    view = data.draw(strided_views(dtype))[1]
    t = mt.from_numpy(view)
    cast = dtype(number)
    with np.errstate(all="ignore"):
        expected = ARITHMETIC[symbol](cast, view) if reflected else ARITHMETIC[symbol](view, cast)
    out = _apply(symbol, number, t) if reflected else _apply(symbol, t, number)
    assert out.dtype == t.dtype
    np.testing.assert_array_equal(out.numpy(), expected.astype(dtype))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([np.float32, np.float64]), st.data())
def test_tensor_sum_fast_path_on_strided_views(dtype, data):
    import microtensor as mt
    view = data.draw(strided_views(dtype))[1]
    total = mt.from_numpy(view).sum()
    assert total.dtype == mt.from_numpy(view).dtype and total.shape == ()
    np.testing.assert_allclose(total.item(), view.astype(np.float64).sum(),
                               rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-3)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([np.float32, np.float64, np.int64, np.int32]), st.data())
def test_gather_and_scatter_add_along_a_dim_match_numpy(dtype, data):
    """``gather_``/``scatter_add_`` on strided views, repeated positions included, against
    NumPy's ``take_along_axis`` and ``add.at``; an out-of-range position is reported and
    nothing is written."""
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    dim = data.draw(st.integers(0, len(shape) - 1))
    source = data.draw(strided_views(dtype, shape))[1]
    index_shape = tuple(data.draw(st.integers(0, n)) if k != dim else data.draw(st.integers(0, 5))
                        for k, n in enumerate(shape))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    positions = rng.integers(0, shape[dim], index_shape).astype(np.int64)
    if data.draw(st.booleans()) and positions.ndim > 1:
        positions = positions.swapaxes(0, -1).copy().swapaxes(0, -1)  # non-contiguous
    grids = list(np.indices(index_shape, sparse=True))
    grids[dim] = positions
    out = np.empty(index_shape, dtype)
    assert kernels.gather_(out, source, positions, dim) is None
    np.testing.assert_array_equal(out, source[tuple(grids)])

    values = random_values(rng, dtype, index_shape)
    target = source.copy()
    expected = target.copy()
    np.add.at(expected, tuple(grids), values)
    assert kernels.scatter_add_(target, positions, values, dim) is None
    np.testing.assert_allclose(target, expected, rtol=1e-6)
    if positions.size:
        bad = positions.copy()
        bad.flat[-1] = shape[dim]
        before = target.copy()
        assert kernels.scatter_add_(target, bad, values, dim) == shape[dim]
        np.testing.assert_array_equal(target, before)
        assert kernels.gather_(out, source, -1 - bad, dim) is not None


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([np.float32, np.float64]), st.booleans(), st.data())
def test_softmax_along_an_axis_matches_numpy(dtype, log_of, data):
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    axis = data.draw(st.integers(0, len(shape) - 1))
    source = data.draw(strided_views(dtype, shape))[1] / 100   # exp stays finite
    shifted = source.astype(np.float64) - source.max(axis=axis, keepdims=True)
    expected = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True)) if log_of \
        else np.exp(shifted) / np.exp(shifted).sum(axis=axis, keepdims=True)
    out = np.empty(shape, dtype).swapaxes(0, -1).copy().swapaxes(0, -1)   # any layout
    kernels.softmax_(out, source, axis, log_of)
    np.testing.assert_allclose(out, expected, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-6 if dtype == np.float32 else 1e-14)


def _column_and_row_stacks(data, dtype, sizes, batch_dims):
    """Strided views of a column stack (..., m, 1) and a row stack (..., 1, n) whose batch
    dims (each of size ``sizes`` or 1) broadcast against each other either way."""
    batch = tuple(data.draw(sizes) for _ in range(data.draw(batch_dims)))
    m, n = data.draw(sizes), data.draw(sizes)
    a_batch = tuple(1 if data.draw(st.booleans()) else s for s in batch)
    b_batch = tuple(1 if data.draw(st.booleans()) else s for s in batch)
    return (data.draw(strided_views(dtype, a_batch + (m, 1)))[1],
            data.draw(strided_views(dtype, b_batch + (1, n)))[1])


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([np.float32, np.float64]), st.data())
def test_stacked_outer_products_match_numpy(dtype, data):
    """``outer_products_``: (..., m, 1) times (..., 1, n) on strided views, batch dims
    broadcast either way, against NumPy's broadcast multiply."""
    a, b = _column_and_row_stacks(data, dtype, sizes=st.integers(0, 5),
                                  batch_dims=st.integers(1, 2))
    out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]),
                   dtype)
    kernels.outer_products_(out, a, b)
    np.testing.assert_array_equal(out, a * b)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([np.float32, np.float64]), st.booleans(), st.data())
def test_tensor_sum_over_dims_fast_path_matches_numpy(dtype, keepdim, data):
    """``t.sum(dims, keepdim)`` on strided views (the C path for small tensors)."""
    import microtensor as mt
    view = data.draw(strided_views(dtype))[1]
    if view.ndim == 0:
        return
    dims = data.draw(st.lists(st.integers(-view.ndim, view.ndim - 1), min_size=1,
                              max_size=view.ndim, unique_by=lambda d: d % view.ndim))
    dim = dims[0] if len(dims) == 1 and data.draw(st.booleans()) else tuple(dims)
    out = mt.from_numpy(view).sum(dim, keepdim=keepdim)
    expected = view.astype(np.float64).sum(axis=dim, keepdims=keepdim)
    assert out.dtype == mt.from_numpy(view).dtype and tuple(out.shape) == expected.shape
    assert out.is_contiguous()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5 if dtype == np.float32
                               else 1e-12, atol=1e-3)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([np.float32, np.float64]), st.booleans(), st.data())
def test_broadcast_multiply_as_stacked_outer_products(dtype, column_first, data):
    """``a * b`` of a column stack (..., m, 1) and a row stack (..., 1, n), in either order,
    on strided views with batch dims broadcast either way (the C fast path runs these as
    whole outer-product blocks), exactly NumPy's products."""
    import microtensor as mt
    column, row = _column_and_row_stacks(data, dtype, sizes=st.integers(1, 6),
                                         batch_dims=st.integers(0, 2))
    x, y = (column, row) if column_first else (row, column)
    out = mt.from_numpy(x) * mt.from_numpy(y)
    np.testing.assert_array_equal(out.numpy(), x * y)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([np.float32, np.float64]), st.booleans(), st.data())
def test_tensor_sum_over_size_one_dims_is_a_copy(dtype, keepdim, data):
    """``t.sum(dims)`` where every summed dim has size 1 (a stacked bias's gradient,
    ``(B, 1, n).sum(-2)``) on strided views: exactly the values, reshaped."""
    import microtensor as mt
    shape = list(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    ones = data.draw(st.lists(st.integers(0, len(shape)), min_size=1, max_size=2))
    for at in sorted(ones, reverse=True):
        shape.insert(at, 1)
    view = data.draw(strided_views(dtype, tuple(shape)))[1]
    dims = tuple(d for d, size in enumerate(shape) if size == 1)
    out = mt.from_numpy(view).sum(dims, keepdim=keepdim)
    np.testing.assert_array_equal(out.numpy(), view.sum(axis=dims, keepdims=keepdim))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-3, 3), max_size=12), st.integers(-3, 3), st.integers(1, 3),
       st.booleans())
def test_holds_int64_matches_in(values, value, step, as_matrix):
    """``holds_int64`` (whether a target is ignored) on strided and 2-D int64 arrays,
    against ``value in array``."""
    array = np.array(values, np.int64)[::step]
    if as_matrix:
        array = array[:len(array) // 2 * 2].reshape(2, -1).T   # not contiguous
    assert kernels.holds_int64(array, value) == (value in array)


def test_holds_int64_refuses_other_dtypes():
    with pytest.raises(TypeError, match="int64"):
        kernels.holds_int64(np.zeros(3, np.int32), 0)
