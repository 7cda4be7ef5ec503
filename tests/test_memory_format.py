"""Memory formats against PyTorch: ``is_contiguous(memory_format)``, ``contiguous``,
``clone``, the ``*_like`` factories and ``to(memory_format=...)`` give the very strides
PyTorch gives, for dense, non-dense, expanded (stride 0) and ambiguous (C=1, H=W=1, N=1)
4-D and 5-D inputs, plus hand-derived strides that need no oracle."""
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
fuzz = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

FORMATS = ["contiguous_format", "channels_last", "channels_last_3d", "preserve_format"]


def contiguous_strides(sizes):
    strides, acc = [], 1
    for s in reversed(sizes):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def over_storage(lib, sizes, strides, offset=0):
    reach = 0 if 0 in sizes else 1 + sum((s - 1) * st for s, st in zip(sizes, strides))
    return lib.arange(float(offset + max(reach, 1))).as_strided(sizes, strides, offset)


LAYOUTS = [
    # (sizes, strides); None means contiguous
    ((2, 3, 4, 5), None),
    ((2, 3, 4, 5), (60, 1, 15, 3)),          # channels_last
    ((1, 3, 1, 1), None),                    # ambiguous: H=W=1
    ((1, 3, 1, 1), (3, 1, 3, 3)),
    ((2, 1, 4, 5), None),                    # C=1
    ((2, 1, 4, 5), (20, 1, 5, 1)),
    ((2, 3, 1, 1), (3, 1, 3, 3)),
    ((1, 1, 1, 1), None),
    ((1, 3, 4, 5), (60, 1, 15, 3)),          # N=1
    ((2, 3, 4, 5), (0, 1, 0, 3)),            # expanded
    ((2, 3, 4, 5), (3, 0, 0, 1)),
    ((2, 3, 4, 5), (120, 2, 30, 6)),         # non-dense channels_last-like
    ((2, 3, 4, 5), (1, 2, 6, 24)),           # reversed order
    ((2, 3, 4, 5), (60, 20, 5, 1)),
    ((2, 3, 4, 1), (12, 1, 3, 3)),
    ((0, 3, 4, 5), None),                    # empty
    ((2, 3, 0, 5), (0, 1, 15, 3)),
    ((2, 3, 4, 5, 6), None),
    ((2, 3, 4, 5, 6), (360, 1, 90, 18, 3)),  # channels_last_3d
    ((1, 3, 1, 1, 1), None),
    ((2, 1, 2, 2, 2), None),
    ((2, 3, 1, 1, 1), (3, 1, 3, 3, 3)),
    ((2, 3, 4, 5, 6), (720, 2, 180, 36, 6)),  # non-dense
    ((3, 4), None),
    ((3, 4), (1, 3)),
]


def _layout_id(case):
    return f"{case[0]}-{case[1]}"


def _resolve(case):
    sizes, strides = case
    return sizes, strides if strides is not None else contiguous_strides(sizes)


def _both(fn, sizes, strides, fmt):
    """``fn(tensor, format, lib)`` on both libraries: a result or the exception type."""
    out = []
    for lib in (mt, torch):
        t = over_storage(lib, sizes, strides)
        try:
            out.append(fn(t, getattr(lib, fmt), lib))
        except Exception as error:
            out.append(type(error))
    return out


QUERIES = {
    "is_contiguous": lambda t, f, lib: t.is_contiguous(memory_format=f),
    "contiguous": lambda t, f, lib: t.contiguous(memory_format=f).stride(),
    "contiguous returns self": lambda t, f, lib: t.contiguous(memory_format=f) is t,
    "clone": lambda t, f, lib: t.clone(memory_format=f).stride(),
    "empty_like": lambda t, f, lib: lib.empty_like(t, memory_format=f).stride(),
    "zeros_like": lambda t, f, lib: lib.zeros_like(t, memory_format=f).stride(),
    "ones_like": lambda t, f, lib: lib.ones_like(t, memory_format=f).stride(),
    "full_like": lambda t, f, lib: lib.full_like(t, 7, memory_format=f).stride(),
    "rand_like": lambda t, f, lib: lib.rand_like(t, memory_format=f).stride(),
    "to": lambda t, f, lib: t.to(memory_format=f).stride(),
    "to returns self": lambda t, f, lib: t.to(memory_format=f) is t,
    "to dtype": lambda t, f, lib: t.to(lib.float64, memory_format=f).stride(),
    "to copy": lambda t, f, lib: t.to(copy=True, memory_format=f).stride(),
    "suggest_memory_format": lambda t, f, lib: str(t.suggest_memory_format()).split(".")[-1],
}


@requires_torch
@pytest.mark.parametrize("query", list(QUERIES))
@pytest.mark.parametrize("case", LAYOUTS, ids=[_layout_id(c) for c in LAYOUTS])
def test_memory_format_matches_torch(case, query):
    sizes, strides = _resolve(case)
    for fmt in FORMATS:
        ours, theirs = _both(QUERIES[query], sizes, strides, fmt)
        assert ours == theirs, (fmt, ours, theirs)


@pytest.mark.parametrize("case", LAYOUTS, ids=[_layout_id(c) for c in LAYOUTS])
def test_copies_keep_values_in_every_format(case):
    sizes, strides = _resolve(case)
    t = over_storage(mt, sizes, strides)
    expected = t.numpy().copy()
    for fmt in ("contiguous_format", "preserve_format") + \
            (("channels_last",) if len(sizes) == 4 else ("channels_last_3d",)
             if len(sizes) == 5 else ()):
        f = getattr(mt, fmt)
        for result in (t.clone(memory_format=f), t.to(mt.float64, memory_format=f),
                       t.to(memory_format=f, copy=True)):
            np.testing.assert_array_equal(result.numpy(), expected)
            assert result.is_non_overlapping_and_dense()
        if f is not mt.preserve_format:
            assert t.contiguous(memory_format=f).is_contiguous(memory_format=f)


def test_hand_derived_strides():
    x = mt.empty(2, 3, 4, 5)
    assert x.contiguous(memory_format=mt.channels_last).stride() == (60, 1, 15, 3)
    assert mt.empty(2, 3, 4, 5, memory_format=mt.channels_last).stride() == (60, 1, 15, 3)
    cl3d = mt.empty(2, 3, 4, 5, 6, memory_format=mt.channels_last_3d)
    assert cl3d.stride() == (360, 1, 90, 18, 3)
    assert cl3d.is_contiguous(memory_format=mt.channels_last_3d)
    assert not cl3d.is_contiguous() and not cl3d.is_contiguous(memory_format=mt.channels_last)
    # ambiguous: C=1 and H=W=1 tensors are contiguous in both formats at once
    for sizes in ((2, 1, 4, 5), (2, 3, 1, 1), (1, 1, 1, 1)):
        t = mt.empty(sizes)
        assert t.is_contiguous() and t.is_contiguous(memory_format=mt.channels_last)
    # preserve_format keeps dense strides, and densifies gapped ones in the same order
    gapped = mt.empty(2, 3, 8, 10)[:, :, ::2, ::2].permute(0, 2, 3, 1)
    assert mt.empty_like(gapped).stride() == (60, 5, 1, 20)
    expanded = mt.empty(1, 3, 1, 1).expand(2, 3, 4, 5)
    assert mt.empty_like(expanded).stride() == (60, 20, 5, 1)
    assert mt.empty_like(mt.empty(2, 3, 4, 5).permute(0, 2, 3, 1)).stride() == (60, 5, 1, 20)


def test_preserve_format_is_refused_by_contiguous_only_when_a_copy_is_needed():
    x = mt.empty(2, 3)
    assert x.contiguous(memory_format=mt.preserve_format) is x
    with pytest.raises(RuntimeError, match="preserve"):
        x.t().contiguous(memory_format=mt.preserve_format)


def test_channels_last_needs_the_right_rank():
    with pytest.raises(RuntimeError, match="rank 4"):
        mt.empty(2, 3).contiguous(memory_format=mt.channels_last)
    with pytest.raises(RuntimeError, match="rank 5"):
        mt.empty(2, 3, 4, 5).clone(memory_format=mt.channels_last_3d)
    assert not mt.empty(2, 3).is_contiguous(memory_format=mt.channels_last)


@st.composite
def layouts_4d_5d(draw):
    n = draw(st.sampled_from([4, 5]))
    sizes = tuple(draw(st.lists(st.sampled_from([0, 1, 1, 2, 3]), min_size=n, max_size=n)))
    kind = draw(st.sampled_from(["permuted", "gapped", "expanded", "random"]))
    if kind == "random":
        strides = tuple(draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)))
    else:
        order = draw(st.permutations(range(n)))
        strides, acc = [0] * n, 1
        for d in reversed(order):
            strides[d] = acc
            acc *= max(sizes[d], 1) * (2 if kind == "gapped" and draw(st.booleans()) else 1)
        if kind == "expanded":
            for d in range(n):
                if draw(st.booleans()):
                    strides[d] = 0
        strides = tuple(strides)
    return sizes, strides


@requires_torch
@given(layouts_4d_5d())
@fuzz
def test_random_layouts_match_torch(case):
    sizes, strides = case
    for query in ("is_contiguous", "contiguous", "clone", "empty_like", "to", "to returns self",
                  "suggest_memory_format"):
        for fmt in FORMATS:
            ours, theirs = _both(QUERIES[query], sizes, strides, fmt)
            assert ours == theirs, (query, fmt, ours, theirs)
