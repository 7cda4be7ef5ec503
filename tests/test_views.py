"""View ops against PyTorch (the oracle) and NumPy: sizes, strides, storage offsets,
contiguity, values, ``_base``, shared storage and the shared version counter, for fixed
cases and for random geometries and random chains of views (Hypothesis)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import microtensor as mt

try:
    import torch
except ImportError:
    torch = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")
fuzz = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def layout(t):
    return tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.is_contiguous()


def assert_same(ours, theirs):
    """Same geometry and values as the torch tensor ``theirs``."""
    assert layout(ours) == layout(theirs)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def pair(*shape):
    """The same float64 arange tensor in microtensor and (if present) PyTorch."""
    n = int(np.prod(shape))
    ours = mt.arange(n, dtype=mt.float64).reshape(shape).clone()
    theirs = torch.arange(n, dtype=torch.float64).reshape(shape).clone() if torch else None
    return ours, theirs


# --------------------------------------------------------------- fixed cases, with NumPy values

VIEW_CASES = [
    # name, shape, the view (same call on both libraries), the NumPy equivalent
    ("view", (2, 3, 4), lambda t: t.view(6, 4), lambda a: a.reshape(6, 4)),
    ("view -1", (2, 3, 4), lambda t: t.view(-1, 2), lambda a: a.reshape(-1, 2)),
    ("view tuple", (2, 3, 4), lambda t: t.view((4, 6)), lambda a: a.reshape(4, 6)),
    ("view of permuted", (2, 3, 4), lambda t: t.permute(1, 0, 2).view(3, 2, 2, 2),
     lambda a: a.transpose(1, 0, 2).reshape(3, 2, 2, 2)),
    ("view 0-d", (), lambda t: t.view(1, 1), lambda a: a.reshape(1, 1)),
    ("view empty", (2, 0, 3), lambda t: t.view(0, 6), lambda a: a.reshape(0, 6)),
    ("view_as", (2, 3, 4), lambda t: t.view_as(t.new_empty(4, 6)), lambda a: a.reshape(4, 6)),
    ("reshape view", (2, 3, 4), lambda t: t.reshape(3, 8), lambda a: a.reshape(3, 8)),
    ("reshape copy", (2, 3, 4), lambda t: t.transpose(0, 2).reshape(-1),
     lambda a: a.transpose(2, 1, 0).reshape(-1)),
    ("transpose", (2, 3, 4), lambda t: t.transpose(0, 2), lambda a: a.swapaxes(0, 2)),
    ("transpose neg", (2, 3, 4), lambda t: t.transpose(-1, -2), lambda a: a.swapaxes(-1, -2)),
    ("t", (3, 4), lambda t: t.t(), lambda a: a.T),
    ("t 1-d", (4,), lambda t: t.t(), lambda a: a),
    ("t 0-d", (), lambda t: t.t(), lambda a: a),
    ("T", (3, 4), lambda t: t.T, lambda a: a.T),
    ("mT", (2, 3, 4), lambda t: t.mT, lambda a: a.swapaxes(-1, -2)),
    ("permute", (2, 3, 4), lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    ("permute list", (2, 3, 4), lambda t: t.permute([1, -1, 0]), lambda a: a.transpose(1, 2, 0)),
    ("movedim", (2, 3, 4), lambda t: t.movedim(0, -1), lambda a: np.moveaxis(a, 0, -1)),
    ("movedim tuple", (2, 3, 4, 5), lambda t: t.movedim((0, 1), (3, 0)),
     lambda a: np.moveaxis(a, (0, 1), (3, 0))),
    ("select", (2, 3, 4), lambda t: t.select(1, 2), lambda a: a[:, 2]),
    ("select neg", (2, 3, 4), lambda t: t.select(-1, -4), lambda a: a[..., -4]),
    ("narrow", (2, 3, 4), lambda t: t.narrow(2, 1, 2), lambda a: a[:, :, 1:3]),
    ("narrow neg start", (2, 3, 4), lambda t: t.narrow(-1, -3, 3), lambda a: a[..., 1:4]),
    ("narrow empty", (2, 3, 4), lambda t: t.narrow(1, 3, 0), lambda a: a[:, 3:3]),
    ("getitem int", (2, 3, 4), lambda t: t[1], lambda a: a[1]),
    ("getitem neg", (2, 3, 4), lambda t: t[-1, -2], lambda a: a[-1, -2]),
    ("getitem slices", (2, 3, 4), lambda t: t[:, 1:, ::3], lambda a: a[:, 1:, ::3]),
    ("getitem neg slice", (2, 3, 4), lambda t: t[:, -2:-1, 1::2], lambda a: a[:, -2:-1, 1::2]),
    ("getitem none", (2, 3, 4), lambda t: t[None, 1, None, ..., 2],
     lambda a: a[None, 1, None, ..., 2]),
    ("getitem ellipsis", (2, 3, 4), lambda t: t[..., 1:3], lambda a: a[..., 1:3]),
    ("getitem empty slice", (2, 3, 4), lambda t: t[:, 5:], lambda a: a[:, 5:]),
    ("getitem big step", (2, 3, 4), lambda t: t[:, ::7], lambda a: a[:, ::7]),
    ("getitem all", (2, 3, 4), lambda t: t[:], lambda a: a[:]),
    ("getitem scalar", (2, 3, 4), lambda t: t[1, 2, 3], lambda a: a[1, 2, 3]),
    ("unsqueeze", (2, 3), lambda t: t.unsqueeze(1), lambda a: a[:, None]),
    ("unsqueeze end", (2, 3), lambda t: t.unsqueeze(-1), lambda a: a[..., None]),
    ("unsqueeze 0-d", (), lambda t: t.unsqueeze(0), lambda a: a[None]),
    ("squeeze all", (1, 3, 1, 2), lambda t: t.squeeze(), lambda a: a.squeeze()),
    ("squeeze dim", (1, 3, 1, 2), lambda t: t.squeeze(2), lambda a: a.squeeze(2)),
    ("squeeze non-1", (1, 3, 1, 2), lambda t: t.squeeze(1), lambda a: a),
    ("squeeze dims", (1, 3, 1, 2), lambda t: t.squeeze((0, 2)), lambda a: a.squeeze((0, 2))),
    ("flatten", (2, 3, 4), lambda t: t.flatten(), lambda a: a.reshape(-1)),
    ("flatten range", (2, 3, 4, 5), lambda t: t.flatten(1, 2), lambda a: a.reshape(2, 12, 5)),
    ("flatten 0-d", (), lambda t: t.flatten(), lambda a: a.reshape(1)),
    ("flatten copy", (2, 3, 4), lambda t: t.mT.flatten(1),
     lambda a: a.swapaxes(1, 2).reshape(2, 12)),
    ("unflatten", (2, 12), lambda t: t.unflatten(1, (3, -1)), lambda a: a.reshape(2, 3, 4)),
    ("expand", (3, 1), lambda t: t.expand(2, 3, 4), lambda a: np.broadcast_to(a, (2, 3, 4))),
    ("expand -1", (3, 1), lambda t: t.expand(-1, 5), lambda a: np.broadcast_to(a, (3, 5))),
    ("expand 0-d", (), lambda t: t.expand(2, 2), lambda a: np.broadcast_to(a, (2, 2))),
    ("expand to 0", (3, 1), lambda t: t.expand(3, 0), lambda a: np.broadcast_to(a, (3, 0))),
    ("expand_as", (1, 4), lambda t: t.expand_as(t.new_empty(3, 4)),
     lambda a: np.broadcast_to(a, (3, 4))),
    ("broadcast_to", (4,), lambda t: t.broadcast_to((2, 4)), lambda a: np.broadcast_to(a, (2, 4))),
    ("diagonal", (3, 4), lambda t: t.diagonal(), lambda a: a.diagonal()),
    ("diagonal offset", (3, 4), lambda t: t.diagonal(1), lambda a: a.diagonal(1)),
    ("diagonal neg offset", (3, 4), lambda t: t.diagonal(-2), lambda a: a.diagonal(-2)),
    ("diagonal past end", (3, 4), lambda t: t.diagonal(5), lambda a: a.diagonal(5)),
    ("diagonal dims", (2, 3, 4), lambda t: t.diagonal(0, 2, 0), lambda a: a.diagonal(0, 2, 0)),
    ("unfold", (2, 5), lambda t: t.unfold(1, 2, 1),
     lambda a: np.lib.stride_tricks.sliding_window_view(a, 2, axis=1)),
    ("unfold step", (7,), lambda t: t.unfold(0, 3, 2),
     lambda a: np.lib.stride_tricks.sliding_window_view(a, 3)[::2]),
    ("unfold 0-d", (), lambda t: t.unfold(0, 1, 1), lambda a: a.reshape(1)),
    ("as_strided", (12,), lambda t: t.as_strided((3, 3), (2, 1), 1),
     lambda a: np.lib.stride_tricks.as_strided(a[1:], (3, 3), (16, 8))),
    ("as_strided stride 0", (12,), lambda t: t.as_strided((2, 3), (0, 4)),
     lambda a: np.lib.stride_tricks.as_strided(a, (2, 3), (0, 32))),
    ("alias", (2, 3),
     lambda t: mt.alias(t) if isinstance(t, mt.Tensor) else torch.ops.aten.alias(t), lambda a: a),
]


@pytest.mark.parametrize("name, shape, fn, np_fn", VIEW_CASES, ids=[c[0] for c in VIEW_CASES])
def test_view_values_match_numpy(name, shape, fn, np_fn):
    ours, _ = pair(*shape)
    expected = np_fn(ours.numpy().copy())
    np.testing.assert_array_equal(fn(ours).numpy(), expected)


@requires_torch
@pytest.mark.parametrize("name, shape, fn, np_fn", VIEW_CASES, ids=[c[0] for c in VIEW_CASES])
def test_view_matches_torch(name, shape, fn, np_fn):
    ours, theirs = pair(*shape)
    result, expected = fn(ours), fn(theirs)
    assert_same(result, expected)
    assert (result._base is None) == (expected._base is None)
    if expected._base is not None:
        assert result._base is ours
        assert result.data_ptr() == ours.data_ptr() + \
            (result.storage_offset() - ours.storage_offset()) * ours.element_size()


@pytest.mark.parametrize("name, shape, fn, np_fn", VIEW_CASES, ids=[c[0] for c in VIEW_CASES])
def test_writes_through_view_show_in_base(name, shape, fn, np_fn):
    base, _ = pair(*shape)
    view = fn(base)
    if view._base is None or view.numel() == 0 or 0 in view.stride():
        return  # copies, and stride-0 views PyTorch will not write through
    version = base._version
    view.copy_(mt.full(tuple(view.shape), -1.0, dtype=mt.float64))
    assert base._version == view._version == version + 1
    expected = np.arange(base.numel(), dtype=np.float64)
    written = np.asarray(np_fn(np.arange(base.numel()).reshape(shape)))
    expected[written.ravel()] = -1.0
    np.testing.assert_array_equal(base.numpy().ravel(), expected)


def test_base_is_the_root_and_views_of_views_share_it():
    x = mt.zeros(4, 6)
    v = x[1:].t()[2:]
    assert v._base is x and x._base is None
    assert v.untyped_storage() is x.untyped_storage()
    x.add_(1)
    assert v._version == x._version == 1
    v.fill_(5)
    assert x._version == 2 and x[1:, 2:].numpy().tolist() == [[5.0] * 4] * 3


def test_reshape_views_when_possible_and_copies_otherwise():
    x = mt.arange(24.).reshape(2, 3, 4).clone()
    as_view = x.transpose(0, 1).reshape(3, 2, 2, 2)
    assert as_view._base is x and as_view.data_ptr() == x.data_ptr()
    copied = x.transpose(0, 2).reshape(-1)
    assert copied._base is None and copied.is_contiguous()
    copied.fill_(0)
    assert x.sum().item() == sum(range(24))


def test_detach_shares_storage_and_version_but_is_not_a_view():
    x = mt.ones(3, requires_grad=True)
    d = x.detach()
    assert d._base is None and not d.requires_grad and d.grad_fn is None
    assert d.data_ptr() == x.data_ptr()
    d.mul_(2)
    assert x._version == d._version == 1
    assert x.tolist() == [2.0, 2.0, 2.0]
    v = x[1:].detach()
    assert v._base is None and v.storage_offset() == 1


def test_flatten_returns_self_when_nothing_to_merge():
    x = mt.arange(6.)
    assert x.flatten() is x
    y = x.view(2, 3)
    assert y.flatten(1, 1) is y


def test_expand_and_as_strided_geometry_by_hand():
    x = mt.arange(3.).view(3, 1)
    e = x.expand(2, 3, 4)
    assert e.stride() == (0, 1, 0) and e.shape == (2, 3, 4) and not e.is_contiguous()
    s = mt.arange(10.).as_strided((2, 2), (3, 1), 2)
    assert s.tolist() == [[2.0, 3.0], [5.0, 6.0]] and s.storage_offset() == 2


def test_empty_slice_keeps_pytorch_offset():
    x = mt.arange(24.).view(2, 3, 4)
    assert x[:, 3:].storage_offset() == 12
    assert x[:, 5:].storage_offset() == 12
    assert x[:, 1:1].storage_offset() == 4


# --------------------------------------------------------------- random geometries

@st.composite
def strided_geometry(draw, max_dims=4):
    """(sizes, strides, offset, storage size): any geometry that fits in its storage,
    including stride 0, overlapping, gapped and size-0 dims."""
    n = draw(st.integers(0, max_dims))
    sizes = tuple(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)))
    strides = tuple(draw(st.lists(st.integers(0, 12), min_size=n, max_size=n)))
    offset = draw(st.integers(0, 5))
    reach = 0 if 0 in sizes else offset + 1 + sum((s - 1) * st for s, st in zip(sizes, strides))
    extra = draw(st.integers(0, 3))
    return sizes, strides, offset, max(reach, offset) + extra


def make_pair(sizes, strides, offset, storage):
    ours = mt.arange(storage, dtype=mt.float64).as_strided(sizes, strides, offset)
    theirs = torch.arange(storage, dtype=torch.float64).as_strided(sizes, strides, offset) \
        if torch else None
    return ours, theirs


@given(strided_geometry())
@fuzz
def test_as_strided_reads_exactly_what_numpy_reads(geometry):
    sizes, strides, offset, storage = geometry
    ours, _ = make_pair(sizes, strides, offset, storage)
    flat = np.arange(storage, dtype=np.float64)
    expected = np.lib.stride_tricks.as_strided(flat[offset:], sizes, [s * 8 for s in strides]) \
        if storage > offset else np.empty(sizes)
    assert ours.shape == sizes and ours.stride() == strides and ours.storage_offset() == offset
    np.testing.assert_array_equal(ours.numpy(), expected)


@requires_torch
@given(strided_geometry())
@fuzz
def test_as_strided_contiguity_matches_torch(geometry):
    ours, theirs = make_pair(*geometry)
    assert_same(ours, theirs)
    assert ours._base is not None and theirs._base is not None


def _random_view(draw, t):
    """Draw one view op valid or not for ``t``'s shape: (description, function)."""
    n = t.dim()
    shape = tuple(t.shape)
    dim = st.integers(-max(n, 1), max(n, 1) - 1)
    kind = draw(st.sampled_from([
        "transpose", "permute", "select", "narrow", "slice", "unsqueeze", "squeeze",
        "view", "reshape", "flatten", "expand", "diagonal", "unfold", "movedim", "t", "mT",
        "detach", "unflatten", "index"]))
    if kind == "transpose":
        a, b = draw(dim), draw(dim)
        return f"transpose({a}, {b})", lambda x: x.transpose(a, b)
    if kind == "permute":
        order = draw(st.permutations(range(n)))
        return f"permute({order})", lambda x: x.permute(*order)
    if kind == "movedim":
        a, b = draw(dim), draw(dim)
        return f"movedim({a}, {b})", lambda x: x.movedim(a, b)
    if kind == "select":
        d = draw(dim)
        i = draw(st.integers(-5, 5))
        return f"select({d}, {i})", lambda x: x.select(d, i)
    if kind == "narrow":
        d, start, length = draw(dim), draw(st.integers(-4, 4)), draw(st.integers(0, 4))
        return f"narrow({d}, {start}, {length})", lambda x: x.narrow(d, start, length)
    if kind == "slice" and n:
        d = draw(st.integers(0, n - 1))
        start = draw(st.none() | st.integers(-5, 5))
        stop = draw(st.none() | st.integers(-5, 5))
        step = draw(st.integers(1, 3))
        index = (slice(None),) * d + (slice(start, stop, step),)
        return f"[{index}]", lambda x: x[index]
    if kind == "unsqueeze":
        d = draw(st.integers(-n - 1, n))
        return f"unsqueeze({d})", lambda x: x.unsqueeze(d)
    if kind == "squeeze":
        d = draw(st.none() | dim)
        return f"squeeze({d})", (lambda x: x.squeeze()) if d is None else (lambda x: x.squeeze(d))
    if kind in ("view", "reshape"):
        numel = int(np.prod(shape))
        target = list(draw(st.permutations(shape)))
        if target and draw(st.booleans()):
            target[draw(st.integers(0, len(target) - 1))] = -1
        if draw(st.booleans()) and numel:
            target = [numel]
        target = tuple(target)
        return f"{kind}({target})", lambda x: getattr(x, kind)(target)
    if kind == "flatten":
        a, b = draw(dim), draw(dim)
        return f"flatten({a}, {b})", lambda x: x.flatten(a, b)
    if kind == "unflatten" and n:
        d = draw(st.integers(0, n - 1))
        size = shape[d]
        split = (1, size) if draw(st.booleans()) else (-1, 1)
        return f"unflatten({d}, {split})", lambda x: x.unflatten(d, split)
    if kind == "expand":
        lead = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
        target = lead + tuple(draw(st.sampled_from([s, -1, 3])) if s == 1 else
                              draw(st.sampled_from([s, -1])) for s in shape)
        return f"expand({target})", lambda x: x.expand(*target)
    if kind == "diagonal" and n >= 2:
        off, a, b = draw(st.integers(-3, 3)), draw(dim), draw(dim)
        return f"diagonal({off}, {a}, {b})", lambda x: x.diagonal(off, a, b)
    if kind == "unfold":
        d, size, step = draw(dim), draw(st.integers(0, 3)), draw(st.integers(1, 3))
        return f"unfold({d}, {size}, {step})", lambda x: x.unfold(d, size, step)
    if kind == "t" and n <= 2:
        return "t()", lambda x: x.t()
    if kind == "mT" and n >= 2:
        return "mT", lambda x: x.mT
    if kind == "index" and n:
        i = draw(st.integers(-shape[0] - 1, shape[0]))
        return f"[{i}, None, ...]", lambda x: x[i, None, ...]
    return "detach()", lambda x: x.detach()


@requires_torch
@given(strided_geometry(max_dims=4), st.data())
@fuzz
def test_random_chains_of_views_match_torch(geometry, data):
    ours, theirs = make_pair(*geometry)
    for _ in range(data.draw(st.integers(1, 6))):
        name, fn = _random_view(data.draw, ours)
        try:
            expected = fn(theirs)
        except Exception as error:  # PyTorch refuses: we must refuse with the same type
            with pytest.raises(type(error)):
                fn(ours)
            return
        result = fn(ours)
        assert layout(result) == layout(expected), name
        np.testing.assert_array_equal(result.numpy(), expected.numpy(), err_msg=name)
        assert (result._base is None) == (expected._base is None), name
        if result._base is not None:  # a view: the storage of the tensor it was taken from
            assert result.untyped_storage() is ours.untyped_storage(), name
        ours, theirs = result, expected
