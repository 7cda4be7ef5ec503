"""Stride math (microtensor._C.meta) against PyTorch, the oracle, plus hand-written edge cases."""
import copy
import math
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from microtensor._C import meta

try:
    import torch
except ImportError:
    torch = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")
fuzz = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

FORMATS = [meta.contiguous_format, meta.preserve_format, meta.channels_last, meta.channels_last_3d]


def torch_format(fmt):
    return getattr(torch, fmt.name)


def error_of(fn):
    with pytest.raises(Exception) as info:
        fn()
    return info.type, str(info.value)


# ------------------------------------------------------------------------------ strategies

sizes_st = st.one_of(st.just(1), st.integers(0, 4), st.integers(2, 4))


@st.composite
def layouts(draw, sizes=None, max_dims=5):
    """(sizes, strides): dense in a random dim order, gapped, expanded (stride 0), overlapping
    or arbitrary; size-1 dims sometimes get arbitrary strides (PyTorch ignores them)."""
    if sizes is None:
        sizes = tuple(draw(st.lists(sizes_st, max_size=max_dims)))
    n = len(sizes)
    kind = draw(st.sampled_from(["dense", "dense", "gapped", "expanded", "random"]))
    if kind == "random":
        strides = draw(st.lists(st.integers(0, 30), min_size=n, max_size=n))
    else:
        strides = [0] * n
        step = 1
        for d in draw(st.permutations(range(n))):
            strides[d] = step
            step *= max(sizes[d], 1) * (draw(st.integers(1, 3)) if kind == "gapped" else 1)
        if kind == "expanded" and n:
            for d in draw(st.sets(st.integers(0, n - 1), max_size=n)):
                strides[d] = 0
    if draw(st.booleans()):
        for d in range(n):
            if sizes[d] == 1:
                strides[d] = draw(st.sampled_from([0, 1, strides[d], 7]))
    return tuple(sizes), tuple(strides)


# 4-D and 5-D layouts rich in size-1 dims: the ambiguous channels-last cases
cl_layouts = st.lists(st.one_of(st.sampled_from([1, 1, 2, 3]), sizes_st), min_size=4, max_size=5).flatmap(
    lambda sizes: layouts(sizes=tuple(sizes)))


def strided(sizes, strides):
    return torch.empty_strided(sizes, strides)


# ------------------------------------------------------------------------ memory formats

def test_memory_format_objects():
    assert repr(meta.channels_last) == "microtensor.channels_last"
    assert repr(meta.contiguous_format) == "microtensor.contiguous_format"
    assert len({id(f) for f in FORMATS}) == 4
    for fmt in FORMATS:
        assert pickle.loads(pickle.dumps(fmt)) is fmt
        assert copy.deepcopy(fmt) is fmt


@requires_torch
@fuzz
@given(st.lists(sizes_st, max_size=6).map(tuple))
def test_fresh_strides_match_torch(sizes):
    assert meta.contiguous_strides(sizes) == torch.empty(sizes).stride()
    for fmt in (meta.contiguous_format, meta.channels_last, meta.channels_last_3d):
        try:
            expected = torch.empty(sizes, memory_format=torch_format(fmt)).stride()
        except RuntimeError as error:
            with pytest.raises(RuntimeError, match=str(error)):
                meta.strides_for_format(sizes, fmt)
        else:
            assert meta.strides_for_format(sizes, fmt) == expected


def test_channels_last_rank_errors():
    with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last format"):
        meta.channels_last_strides((2, 3, 4))
    with pytest.raises(RuntimeError, match="required rank 5 tensor to use channels_last_3d format"):
        meta.channels_last_3d_strides((2, 3, 4, 5))
    with pytest.raises(RuntimeError, match="unsupported memory format"):
        meta.strides_for_format((2, 3), meta.preserve_format)
    assert meta.channels_last_strides([2, 3, 4, 5]) == (60, 1, 15, 3)
    assert meta.channels_last_3d_strides((2, 3, 4, 5, 6)) == (360, 1, 90, 18, 3)
    assert meta.contiguous_strides(()) == ()
    assert meta.contiguous_strides((2, 0, 3, 1)) == (3, 3, 1, 1)


# --------------------------------------------------------------------- contiguity / density

@requires_torch
@fuzz
@given(st.one_of(layouts(), cl_layouts))
def test_is_contiguous_matches_torch(layout):
    x = strided(*layout)
    for fmt in FORMATS:
        assert meta.is_contiguous(*layout, fmt) == x.is_contiguous(memory_format=torch_format(fmt))
    assert meta.is_contiguous(*layout) == x.is_contiguous()


@requires_torch
@fuzz
@given(st.one_of(layouts(), cl_layouts))
def test_density_and_storage_size_match_torch(layout):
    x = strided(*layout)
    # empty_like keeps the strides exactly when (and only when) the input is dense
    assert meta.is_non_overlapping_and_dense(*layout) == (torch.empty_like(x).stride() == x.stride())
    assert meta.storage_size_for(*layout) == x.untyped_storage().nbytes() // x.element_size()


def test_density_and_storage_edge_cases():
    assert meta.is_non_overlapping_and_dense((), ())
    assert meta.is_non_overlapping_and_dense((0, 3), (7, 7))
    assert meta.is_non_overlapping_and_dense((3, 1), (1, 100))
    assert not meta.is_non_overlapping_and_dense((3,), (2,))
    assert not meta.is_non_overlapping_and_dense((2, 2), (1, 1))
    assert meta.storage_size_for((2, 0), (1, 1)) == 0
    assert meta.storage_size_for((), ()) == 1
    assert meta.storage_size_for((2, 3), (3, 1)) == 6
    with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
        meta.storage_size_for((2**40, 2**40), (2**40, 1))
    with pytest.raises(RuntimeError, match=r"dimensionality of sizes \(2\) must match dimensionality of strides \(1\)"):
        meta.is_contiguous((2, 3), (1,))
    with pytest.raises(TypeError):
        meta.is_contiguous((2, 3), (3, 1), "channels_last")


# ----------------------------------------------------------------- preserve_format layouts

@requires_torch
@fuzz
@given(st.one_of(layouts(), cl_layouts))
def test_preserve_format_strides_match_empty_like_and_clone(layout):
    x = strided(*layout)
    expected = torch.empty_like(x).stride()
    assert meta.preserve_format_strides(*layout) == expected
    assert x.clone().stride() == expected


@requires_torch
@fuzz
@given(st.one_of(layouts(), cl_layouts))
def test_infer_dense_strides_matches_torch(layout):
    sizes, strides = layout
    # doubling keeps the stride order (so the answer) and makes most layouts non-dense, where
    # empty_like exposes PyTorch's infer_dense_strides
    doubled = tuple(2 * s for s in strides)
    if not meta.is_non_overlapping_and_dense(sizes, doubled):
        assert meta.infer_dense_strides(sizes, strides) == torch.empty_like(strided(sizes, doubled)).stride()
    assert meta.infer_dense_strides(sizes, strides) == meta.infer_dense_strides(sizes, doubled)


@requires_torch
@fuzz
@given(st.one_of(layouts(), cl_layouts))
def test_suggest_memory_format_matches_torch(layout):
    sizes, strides = layout
    ours = meta.suggest_memory_format(sizes, strides)
    if len(sizes) not in (4, 5) or 0 in sizes:
        assert ours is meta.contiguous_format
        return
    # upsampling allocates its output in input.suggest_memory_format()
    upsample = torch._C._nn.upsample_nearest2d if len(sizes) == 4 else torch._C._nn.upsample_nearest3d
    out = upsample(strided(sizes, strides), list(sizes[2:]))
    assert out.stride() == meta.strides_for_format(sizes, ours)


# N, C, H, W sizes where strides alone cannot tell NCHW from NHWC
AMBIGUOUS_CL_SIZES = [(2, 1, 3, 4), (2, 3, 1, 1), (1, 3, 4, 5), (2, 1, 1, 1), (1, 1, 1, 1), (1, 3, 1, 1),
                      (2, 1, 1, 4), (3, 2, 1, 4), (2, 3, 4, 1, 1), (2, 1, 3, 4, 5), (1, 1, 1, 1, 1)]


@requires_torch
@pytest.mark.parametrize("sizes", AMBIGUOUS_CL_SIZES)
def test_ambiguous_channels_last_inputs(sizes):
    fmts = (torch.contiguous_format, torch.channels_last if len(sizes) == 4 else torch.channels_last_3d)
    candidates = [torch.empty(sizes, memory_format=f) for f in fmts]
    candidates += [c[..., :1] if sizes[-1] > 1 else c.expand(sizes) for c in candidates]
    candidates.append(torch.empty(sizes[::-1]).permute(*range(len(sizes) - 1, -1, -1)))
    for x in candidates:
        layout = (tuple(x.shape), x.stride())
        for fmt in FORMATS:
            assert meta.is_contiguous(*layout, fmt) == x.is_contiguous(memory_format=torch_format(fmt))
        assert meta.preserve_format_strides(*layout) == torch.empty_like(x).stride()
        upsample = torch._C._nn.upsample_nearest2d if x.dim() == 4 else torch._C._nn.upsample_nearest3d
        out = upsample(x, list(x.shape[2:]))
        assert out.stride() == meta.strides_for_format(x.shape, meta.suggest_memory_format(*layout))


def test_ambiguous_channels_last_rules():
    # N111 with equal strides falls back to contiguous; a zero C stride never suggests channels_last
    assert meta.suggest_memory_format((2, 1, 1, 1), (1, 1, 1, 1)) is meta.contiguous_format
    assert meta.suggest_memory_format((2, 3, 4, 5), (60, 0, 15, 3)) is meta.contiguous_format
    assert meta.suggest_memory_format((2, 3, 4, 5), (60, 1, 15, 3)) is meta.channels_last
    assert meta.suggest_memory_format((2, 3, 4, 5, 6), (360, 1, 90, 18, 3)) is meta.channels_last_3d
    assert meta.suggest_memory_format((2, 3, 4), (12, 1, 3)) is meta.contiguous_format
    # both contiguous and channels_last at once when C == 1 and the rest is row-major
    assert meta.is_contiguous((2, 1, 3, 4), (12, 12, 4, 1))
    assert meta.is_contiguous((2, 1, 3, 4), (12, 1, 4, 1), meta.channels_last)


# -------------------------------------------------------------------------- view / reshape

def _prime_factors(n):
    factors, p = [], 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    return factors


@st.composite
def view_cases(draw):
    sizes, strides = draw(layouts(max_dims=4))
    numel = math.prod(sizes)
    if numel == 0:
        new = draw(st.one_of(st.just(sizes), st.lists(sizes_st, min_size=1, max_size=4).map(
            lambda s: tuple(s) if 0 in s else tuple(s) + (0,))))
        return sizes, strides, new
    factors = [f for s in sizes for f in _prime_factors(s)]
    if draw(st.integers(0, 3)) == 0:
        factors = draw(st.permutations(factors))
    for _ in range(draw(st.integers(0, 2))):
        factors.insert(draw(st.integers(0, len(factors))), 1)
    cuts = sorted(draw(st.sets(st.integers(1, max(len(factors) - 1, 1)), max_size=4)))
    bounds = [0] + [c for c in cuts if c < len(factors)] + [len(factors)]
    new = tuple(math.prod(factors[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a)
    return sizes, strides, new


@requires_torch
@settings(max_examples=250, deadline=None)
@given(view_cases())
def test_view_strides_match_torch(case):
    sizes, strides, new = case
    x = strided(sizes, strides)
    try:
        expected = x.view(new).stride()
    except RuntimeError as error:
        assert "view size is not compatible" in str(error)
        expected = None
    assert meta.view_strides(sizes, strides, new) == expected


def test_view_strides_examples():
    assert meta.view_strides((2, 6), (1, 2), (6, 2)) is None  # randn(6, 2).t().view(6, 2)
    assert meta.view_strides((3, 2, 4), (4, 12, 1), (3, 2, 2, 2)) == (4, 12, 2, 1)
    assert meta.view_strides((3, 2, 4), (4, 12, 1), (6, 4)) is None
    assert meta.view_strides((), (), (1, 1)) == (1, 1)
    assert meta.view_strides((0, 3), (5, 7), (0, 3)) == (5, 7)
    assert meta.view_strides((0, 3), (5, 7), (3, 0, 2)) == (2, 2, 1)


@requires_torch
@fuzz
@given(st.lists(st.integers(-3, 4), max_size=4).map(tuple), st.integers(0, 30))
def test_infer_size_matches_torch(shape, numel):
    try:
        expected = tuple(torch.empty(numel).view(shape).shape)
    except RuntimeError as error:
        assert error_of(lambda: meta.infer_size(shape, numel)) == (RuntimeError, str(error))
    else:
        assert meta.infer_size(shape, numel) == expected


def test_infer_size_messages():
    with pytest.raises(RuntimeError, match=r"^shape '\[2, 3\]' is invalid for input of size 5$"):
        meta.infer_size((2, 3), 5)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        meta.infer_size((-1, -1), 4)
    with pytest.raises(RuntimeError, match="invalid shape dimension -2"):
        meta.infer_size((2, -2), 4)
    with pytest.raises(RuntimeError, match="unspecified dimension size -1 can be any value"):
        meta.infer_size((-1, 0), 0)
    with pytest.raises(RuntimeError, match="is invalid for input of size 0"):
        meta.infer_size((2**40, 2**40, 2**40), 0)
    assert meta.infer_size((2**40, 2**40, 0), 0) == (2**40, 2**40, 0)
    assert meta.infer_size([3, -1], 12) == (3, 4)


# ------------------------------------------------------------------ broadcasting and expand

@requires_torch
@fuzz
@given(st.lists(st.lists(sizes_st, max_size=4).map(tuple), min_size=1, max_size=3))
def test_broadcast_shapes_match_torch(shapes):
    try:
        expected = tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        if len(shapes) == 2:
            error = error_of(lambda: torch.empty(shapes[0]) + torch.empty(shapes[1]))
            assert error_of(lambda: meta.broadcast_shapes(*shapes)) == error
        else:
            with pytest.raises(RuntimeError, match="must match the size of tensor b"):
                meta.broadcast_shapes(*shapes)
    else:
        assert meta.broadcast_shapes(*shapes) == expected


def test_broadcast_examples():
    assert meta.broadcast_shapes() == ()
    assert meta.broadcast_shapes((2, 1), (3,), 1) == (2, 3)
    assert meta.broadcast_shapes((1,), (0,)) == (0,)
    with pytest.raises(RuntimeError, match=r"The size of tensor a \(3\) must match the size of tensor b "
                                           r"\(4\) at non-singleton dimension 1"):
        meta.broadcast_shapes((2, 3), (4,))
    with pytest.raises(RuntimeError, match="negative dimension -1"):
        meta.broadcast_pair((2, -1), (2, 1))


@st.composite
def expand_cases(draw):
    sizes, strides = draw(layouts(max_dims=3))
    target = [draw(st.sampled_from([-1, s, s, 2, 3])) if s != 1 else draw(st.sampled_from([-1, 1, 0, 3]))
              for s in sizes]
    target = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(0, 2)))] + target
    if draw(st.integers(0, 5)) == 0 and target:
        target.pop(0)
    return sizes, strides, tuple(target)


@requires_torch
@settings(max_examples=200, deadline=None)
@given(expand_cases())
def test_expand_matches_torch(case):
    sizes, strides, target = case
    x = strided(sizes, strides)
    try:
        y = x.expand(target)
    except RuntimeError as error:
        kind, message = error_of(lambda: meta.expand_strides(sizes, strides, target))
        assert kind is RuntimeError
        # PyTorch's count message starts with the tensor's type name, which meta does not know
        assert message.split("): ")[-1] == str(error).split("): ")[-1]
    else:
        assert meta.expand_geometry(sizes, strides, target) == (tuple(y.shape), y.stride())
        assert meta.expand_strides(sizes, strides, target) == y.stride()


def test_expand_messages():
    with pytest.raises(RuntimeError, match=r"The expanded size of the tensor \(4\) must match the existing "
                                           r"size \(3\) at non-singleton dimension 1\.  Target sizes: "
                                           r"\[2, 4\]\.  Tensor sizes: \[2, 3\]"):
        meta.expand_strides((2, 3), (3, 1), (2, 4))
    with pytest.raises(RuntimeError, match=r"the number of sizes provided \(1\) must be greater or equal to "
                                           r"the number of dimensions in the tensor \(2\)"):
        meta.expand_strides((2, 3), (3, 1), (1,))
    with pytest.raises(RuntimeError, match="isn't allowed in a leading, non-existing dimension 0"):
        meta.expand_strides((3,), (1,), (-1, 3))
    with pytest.raises(RuntimeError, match="negative dimension -2"):
        meta.expand_strides((1,), (1,), (-2,))
    assert meta.expand_geometry((), (), (2, 3)) == ((2, 3), (0, 0))
    assert meta.expand_geometry((2, 1), (1, 1), (3, 2, 4)) == ((3, 2, 4), (0, 1, 0))


# --------------------------------------------------------------- elementwise output layout

@st.composite
def elementwise_cases(draw):
    out = tuple(draw(st.lists(sizes_st, max_size=5)))
    inputs = []
    for _ in range(draw(st.integers(1, 3))):
        rank = draw(st.integers(0, len(out))) if draw(st.integers(0, 2)) == 0 else len(out)
        shape = tuple(1 if draw(st.integers(0, 4)) == 0 else s for s in out[len(out) - rank:])
        inputs.append(draw(st.one_of(layouts(sizes=shape), st.just((shape, meta.contiguous_strides(shape))))))
    if draw(st.booleans()):  # make all operands share one layout sometimes (the fast paths)
        inputs = [inputs[0]] * len(inputs)
    return inputs


@requires_torch
@settings(max_examples=250, deadline=None)
@given(elementwise_cases())
def test_elementwise_output_strides_match_torch(inputs):
    tensors = [strided(*layout) for layout in inputs]
    out_sizes = tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))
    if len(tensors) == 1:
        result = torch.neg(tensors[0])
    elif len(tensors) == 2:
        result = tensors[0] + tensors[1]
    else:
        result = torch.addcmul(*tensors)
    assert meta.elementwise_output_strides(out_sizes, inputs) == result.stride()


def test_elementwise_examples():
    t = ((3, 4), (1, 3))  # a transposed (4, 3)
    assert meta.elementwise_output_strides((3, 4), [t, t]) == (1, 3)
    cl = ((2, 3, 4, 5), (60, 1, 15, 3))
    assert meta.elementwise_output_strides((2, 3, 4, 5), [cl, ((5,), (1,))]) == (60, 1, 15, 3)
    assert meta.elementwise_output_strides((2, 3), [((2, 3), (3, 1)), ((), ())]) == (3, 1)
    assert meta.elementwise_output_strides((), [((), ())]) == ()
    assert meta.elementwise_output_strides((2, 3), []) == (3, 1)


# --------------------------------------------------------------------------- argument checks

@requires_torch
@fuzz
@given(st.integers(0, 4), st.integers(-7, 7))
def test_wrap_dim_matches_torch(ndim, dim):
    x = torch.empty(tuple(range(2, 2 + ndim)))
    try:
        x.sum(dim)
    except IndexError as error:
        assert error_of(lambda: meta.wrap_dim(dim, ndim)) == (IndexError, str(error))
    else:
        wrapped = meta.wrap_dim(dim, ndim)
        assert 0 <= wrapped < max(ndim, 1)
        if ndim:
            assert x.size(dim) == x.size(wrapped)


def test_wrap_dim_messages():
    with pytest.raises(IndexError, match=r"^Dimension out of range \(expected to be in range of \[-2, 1\], but got 5\)$"):
        meta.wrap_dim(5, 2)
    with pytest.raises(IndexError, match=r"range of \[-1, 0\], but got 1"):
        meta.wrap_dim(1, 0)
    assert meta.wrap_dim(-1, 0) == 0
    assert meta.wrap_dim(-2, 3) == 1


@requires_torch
def test_check_size_nonnegative_matches_torch():
    error = error_of(lambda: torch.empty((2, -1)))
    assert error_of(lambda: meta.check_size_nonnegative((2, -1))) == error
    with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
        torch.empty((2**62, 4))


def test_check_size_nonnegative():
    meta.check_size_nonnegative(())
    meta.check_size_nonnegative((2, 0, 3))
    meta.check_size_nonnegative((0, 2**62, 2**62))  # a 0 first: the product never overflows
    with pytest.raises(RuntimeError, match="overflowed"):  # PyTorch: a later 0 does not excuse
        meta.check_size_nonnegative((2**62, 2**62, 0))
    with pytest.raises(RuntimeError, match=r"^Trying to create tensor with negative dimension -1: \[2, -1\]$"):
        meta.check_size_nonnegative((2, -1))
    with pytest.raises(RuntimeError, match=r"negative dimension -\d+: "):
        meta.check_size_nonnegative((-2**70, 3))
    with pytest.raises(RuntimeError, match=r"overflowed with sizes=\[4611686018427387904, 4\]"):
        meta.check_size_nonnegative((2**62, 4))
    with pytest.raises(RuntimeError, match="overflowed"):
        meta.check_size_nonnegative((2**70,))
    meta.check_size_nonnegative((2**62, 1))
