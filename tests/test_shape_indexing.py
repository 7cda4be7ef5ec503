"""Shape ops (ops/shape.py) and indexing (ops/indexing.py).

Each op's registered samples run forward against PyTorch (values, shapes, dtypes,
strides) and through first and second derivatives against PyTorch's autograd (the same
graph built in both); splits are checked to return views and to refuse in-place writes;
errors are compared with PyTorch's by type and message; Hypothesis draws advanced-indexing
patterns (index tensors with negative entries, lists, masks, mixed with ints, slices,
None and Ellipsis) for reads, writes and gradients.
"""
import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import microtensor as mt
from microtensor.ops.registry import REGISTRY
from microtensor.testing import maker, sample_ids, samples_of, seed_for

try:
    import torch
except ImportError:
    torch = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")
pytestmark = pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")

SHAPE_OPS = ["cat", "_cat", "stack", "split", "split_with_sizes", "chunk", "unbind", "roll",
             "flip", "repeat", "tril", "triu", "trace", "diag", "diag_embed"]
INDEX_OPS = ["index", "index_put", "index_select", "gather", "scatter", "scatter_add",
             "index_add", "index_fill", "masked_select", "take"]
INPLACE = ["index_put_", "scatter_", "scatter_add_", "index_add_", "index_fill_", "tril_",
           "triu_"]


# ------------------------------------------------------------------------------ helpers

def to_torch(x, requires_grad=False):
    if isinstance(x, mt.Tensor):
        t = torch.from_numpy(np.array(x.detach().numpy()))
        return t.requires_grad_() if requires_grad and t.is_floating_point() else t
    if isinstance(x, (list, tuple)):
        return type(x)(to_torch(v, requires_grad) for v in x)
    return x


def as_leaf(x):
    """A fresh leaf with ``x``'s values, requiring grad when it is floating point."""
    if isinstance(x, mt.Tensor):
        leaf = x.detach().clone()
        return leaf.requires_grad_() if leaf.dtype.is_floating_point else leaf
    if isinstance(x, (list, tuple)):
        return type(x)(as_leaf(v) for v in x)
    return x


def leaves_of(args):
    found = []
    for a in args:
        if isinstance(a, (mt.Tensor, torch.Tensor if torch else ())) and a.requires_grad:
            found.append(a)
        elif isinstance(a, (list, tuple)):
            found.extend(leaves_of(a))
    return found


def call_torch(name, args, kwargs):
    if name == "index":
        return torch.ops.aten.index.Tensor(args[0], list(args[1]))
    if name == "index_put":
        values = args[2] if len(args) > 2 else kwargs.pop("values")
        accumulate = args[3] if len(args) > 3 else kwargs.pop("accumulate", False)
        return torch.ops.aten.index_put(args[0], list(args[1]), values, accumulate)
    if name == "_cat":
        return torch.cat(args[0], args[1])
    if name in ("cat", "stack"):
        return getattr(torch, name)(*args, **kwargs)
    return getattr(args[0], name)(*args[1:], **kwargs)


def as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def assert_same(mine, theirs, strides=True):
    assert tuple(mine.shape) == tuple(theirs.shape)
    assert mine.dtype.name == str(theirs.dtype).replace("torch.", "")
    np.testing.assert_allclose(mine.detach().numpy(), theirs.detach().numpy(), rtol=1e-12,
                               atol=1e-12)
    if strides and mine.numel() > 1:
        assert mine.stride() == theirs.stride()


def assert_grads(mine, theirs):
    for m, t in zip(mine, theirs):
        if t is None:
            assert m is None or not m.detach().numpy().any()
        elif m is None:
            assert not t.detach().numpy().any()
        else:
            assert_same(m, t, strides=False)


# ------------------------------------------------------------------------------ forward

@requires_torch
@pytest.mark.parametrize("name,i", sample_ids(SHAPE_OPS + INDEX_OPS))
def test_forward_matches_torch(name, i):
    sample = samples_of(name)[i]
    mine = as_tuple(REGISTRY[name](*sample.args, **sample.kwargs))
    theirs = as_tuple(call_torch(name, to_torch(sample.args), to_torch(sample.kwargs)))
    assert len(mine) == len(theirs)
    for m, t in zip(mine, theirs):
        assert_same(m, t, strides=name not in ("split", "split_with_sizes", "unbind"))


@pytest.mark.parametrize("name,i", sample_ids(["split", "split_with_sizes", "chunk", "unbind"]))
def test_splits_are_views_of_the_input(name, i):
    sample = samples_of(name)[i]
    x = sample.args[0]
    pieces = REGISTRY[name](*sample.args, **sample.kwargs)
    assert isinstance(pieces, tuple)
    for piece in pieces:
        assert piece._base is x
        assert piece.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    if pieces and pieces[0].numel():
        pieces[0][(0,) * pieces[0].dim()] = 123.0
        assert 123.0 in x.numpy()


def test_against_numpy():
    make = maker(seed_for("test_against_numpy"))
    x = make(3, 4, 5)
    a = x.numpy()
    np.testing.assert_array_equal(mt.cat([x, x], 1).numpy(), np.concatenate([a, a], 1))
    np.testing.assert_array_equal(mt.stack([x, x], -1).numpy(), np.stack([a, a], -1))
    np.testing.assert_array_equal(x.roll((1, -2), (0, 2)).numpy(), np.roll(a, (1, -2), (0, 2)))
    np.testing.assert_array_equal(x.flip(0, 2).numpy(), np.flip(a, (0, 2)))
    np.testing.assert_array_equal(x.repeat(2, 1, 1, 3).numpy(), np.tile(a, (2, 1, 1, 3)))
    np.testing.assert_array_equal(x.triu(1).numpy(), np.triu(a, 1))
    np.testing.assert_array_equal(x[0].trace().numpy(), np.trace(a[0]))
    idx = mt.tensor([[2, -1], [0, 1]])
    np.testing.assert_array_equal(x[idx, :, idx].numpy(), a[idx.numpy(), :, idx.numpy()])
    np.testing.assert_array_equal(x[1:, idx].numpy(), a[1:, idx.numpy()])
    np.testing.assert_array_equal(x.take(mt.tensor([0, -1, 7])).numpy(),
                                  np.take(a, [0, -1, 7]))
    np.testing.assert_array_equal(
        mt.gather(x, 2, mt.tensor([[[4, 0]] * 4] * 3)).numpy(),
        np.take_along_axis(a, np.array([[[4, 0]] * 4] * 3), 2))


def test_cat_skips_legacy_empty_tensors_and_promotes():
    a = mt.ones(2, 3, dtype=mt.int64)
    out = mt.cat([mt.zeros(0), a, mt.zeros(0, dtype=mt.float64)], dim=1)
    assert out.shape == (2, 3) and out.dtype is mt.float64
    e = mt.zeros(0, requires_grad=True)
    b = mt.ones(2, 3, requires_grad=True)
    mt.cat([e, b], 1).sum().backward()
    assert e.grad.shape == (0,) and b.grad.shape == (2, 3)


@requires_torch
@pytest.mark.parametrize("build", [
    lambda M, x: M.hstack([x, x[:, :2]]), lambda M, x: M.hstack([x[0], M.tensor(1.0)]),
    lambda M, x: M.vstack([x, x[0]]), lambda M, x: x.tile((2,)), lambda M, x: x.tile(2, 1, 2),
    lambda M, x: x.T.flip(1), lambda M, x: x.T.roll(1, 0), lambda M, x: x.T.tril(),
    lambda M, x: x.T.repeat(1, 2), lambda M, x: M.cat([x.T, x.T], 1),
    lambda M, x: M.stack([x, x], 1), lambda M, x: x[1, [0, -1]],
    lambda M, x: x[True], lambda M, x: x[False], lambda M, x: x[None, [0, 1]],
    lambda M, x: x[M.tensor(1)], lambda M, x: x[[True, False, True]],
    lambda M, x: x[[[0, 1]], ..., [[1], [2]]], lambda M, x: x[:, [1, -1]],
    lambda M, x: list(x), lambda M, x: x.chunk(3, 1), lambda M, x: x.unbind(-1),
])
def test_more_forward_cases_match_torch(build):
    values = np.arange(12.0).reshape(3, 4)
    mine = build(mt, mt.tensor(values))
    theirs = build(torch, torch.tensor(values))
    for m, t in zip(as_tuple(tuple(mine) if isinstance(mine, list) else mine),
                    as_tuple(tuple(theirs) if isinstance(theirs, list) else theirs)):
        assert_same(m, t, strides=not isinstance(mine, (tuple, list)))


def test_scatter_gradient_for_a_src_larger_than_the_index():
    src = mt.arange(6.0).reshape(2, 3).requires_grad_()
    out = mt.zeros(3, 3).scatter(0, mt.tensor([[2], [0]]), src)
    grad, = mt.autograd.grad((out * mt.arange(9.0).reshape(3, 3)).sum(), src)
    np.testing.assert_array_equal(grad.numpy(), [[6, 0, 0], [0, 0, 0]])


def test_scatter_with_reduce():
    """As PyTorch: a Tensor src with reduce= is deprecated (scatter_reduce replaces it), and
    neither reduction has a derivative."""
    x = mt.zeros(4, requires_grad=True)
    src = mt.ones(2, requires_grad=True)
    with pytest.warns(UserWarning, match="reduce argument of torch.scatter with Tensor src "
                                         "is deprecated"):
        out = x.scatter(0, mt.tensor([1, 1]), src, reduce="add")
    np.testing.assert_array_equal(out.detach().numpy(), [0, 2, 0, 0])
    with pytest.raises(RuntimeError, match="derivative for aten::scatter is not implemented"):
        out.sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # a scalar value is not deprecated
        out = x.scatter(0, mt.tensor([1, 1]), 2.0, reduce="multiply")
    with pytest.raises(RuntimeError, match="derivative for aten::scatter is not implemented"):
        out.sum().backward()


def test_setitem_casts_scalars_and_refuses_other_dtypes_like_torch():
    x = mt.zeros(3, dtype=mt.int64)
    x[mt.tensor([0, 2])] = 2.7
    assert x.tolist() == [2, 0, 2]
    with pytest.raises(RuntimeError, match="Index put requires the source and destination "
                                           "dtypes match, got Long for the destination and "
                                           "Float for the source."):
        x[mt.tensor([0])] = mt.tensor([3.9])


# ------------------------------------------------------------------------------ gradients

def _first_and_second_derivatives(lib, name, args, kwargs, seed):
    """Gradients of sum(w * out * out) (w random, requiring grad), then of the sum of
    those gradients weighted by random tensors: the derivative formulas' own backward."""
    rng = np.random.default_rng(seed)
    grad = torch.autograd.grad if lib == "torch" else mt.autograd.grad
    out = call_torch(name, args, kwargs) if lib == "torch" else REGISTRY[name](*args, **kwargs)
    floats = [o for o in as_tuple(out) if o.dtype.is_floating_point]
    weights = [rng.uniform(-1, 1, tuple(o.shape)) for o in floats]
    if lib == "torch":
        weights = [torch.from_numpy(w).requires_grad_() for w in weights]
    else:
        weights = [mt.from_numpy(w).requires_grad_() for w in weights]
    loss = sum((w * o * o).sum() for w, o in zip(weights, floats))
    inputs = leaves_of(args) + leaves_of(list(kwargs.values())) + weights
    first = grad(loss, inputs, create_graph=True, allow_unused=True)
    directions = [rng.uniform(-1, 1, tuple(g.shape)) if g is not None else None for g in first]
    second_loss = sum((g * (torch.from_numpy(v) if lib == "torch" else mt.from_numpy(v))).sum()
                      for g, v in zip(first, directions) if g is not None)
    second = grad(second_loss, inputs, allow_unused=True)
    return first, second


@requires_torch
@pytest.mark.parametrize("name,i", sample_ids(SHAPE_OPS + INDEX_OPS))
def test_gradients_match_torch(name, i):
    sample = samples_of(name)[i]
    if not any(t.dtype.is_floating_point for t in leaves_of(as_leaf(sample.args))):
        pytest.skip("no floating-point input")
    if sample.kwargs.get("reduce") is not None:
        pytest.skip("PyTorch has no derivative for scatter with reduce")
    mine = _first_and_second_derivatives("mt", name, as_leaf(sample.args),
                                         as_leaf(sample.kwargs), i)
    theirs = _first_and_second_derivatives("torch", name, to_torch(sample.args, True),
                                           to_torch(sample.kwargs, True), i)
    assert_grads(mine[0], theirs[0])
    assert_grads(mine[1], theirs[1])


@requires_torch
@pytest.mark.parametrize("name,i", sample_ids(INPLACE))
def test_inplace_variants_match_torch(name, i):
    sample = samples_of(name)[i]
    if sample.kwargs.get("reduce") is not None:
        return
    results = []
    for lib in ("mt", "torch"):
        args = as_leaf(sample.args) if lib == "mt" else to_torch(sample.args, True)
        kwargs = as_leaf(sample.kwargs) if lib == "mt" else to_torch(sample.kwargs, True)
        target = args[0].clone()
        if lib == "mt":
            out = REGISTRY[name](target, *args[1:], **kwargs)
            grads = mt.autograd.grad(out.sum() * 2, leaves_of(args), allow_unused=True)
        else:
            out = torch.ops.aten.index_put_(target, list(args[1]), *args[2:], **kwargs) \
                if name == "index_put_" else getattr(target, name)(*args[1:], **kwargs)
            grads = torch.autograd.grad(out.sum() * 2, leaves_of(args), allow_unused=True)
        assert out is target
        results.append((out, grads))
    assert_same(results[0][0], results[1][0])
    assert_grads(results[0][1], results[1][1])


def test_index_derivative_runs_on_the_incoming_grad():
    x = mt.zeros(4, 3, dtype=mt.float64, requires_grad=True)
    y = x[mt.tensor([0, 0, 3])]
    g, = mt.autograd.grad(y.sum(), x)
    np.testing.assert_array_equal(g.numpy(), [[2] * 3, [0] * 3, [0] * 3, [1] * 3])


# ------------------------------------------------------------------------------ in-place on views

@pytest.mark.parametrize("split", [lambda x: x.unbind(), lambda x: x.split(2),
                                   lambda x: x.split([1, 3]), lambda x: x.chunk(2)])
def test_inplace_on_multi_output_views_raises(split):
    x = mt.randn(4, 2, requires_grad=True).clone()
    pieces = split(x)
    with pytest.raises(RuntimeError, match=r"Output 1 of \w+ is a view and is being modified "
                                           r"inplace. This view is the output of a function "
                                           r"that returns multiple views"):
        pieces[1].mul_(2)
    pieces[1].mul(2)  # out-of-place use is fine


@pytest.mark.parametrize("split", [lambda x: x.unbind(), lambda x: x.split(2),
                                   lambda x: x.chunk(2)])
def test_multi_output_view_refusal_names_the_function_as_pytorch(split):
    torch = pytest.importorskip("torch", reason="PyTorch (the oracle) is not installed")
    messages = []
    for lib in (mt, torch):
        with pytest.raises(RuntimeError) as error:
            split(lib.randn(4, 2, requires_grad=True).clone())[1].mul_(2)
        messages.append(str(error.value))
    assert messages[0] == messages[1]


@st.composite
def _permuted_and_index(draw):
    """A permuted tensor's values and permutation, and an advanced index for it: per dim
    a full slice, a 1-D or 2-D integer tensor (2-D ones maybe transposed) or a mask."""
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    order = draw(st.permutations(range(len(shape))))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    parts = []
    for dim in order:
        size = shape[dim]
        kind = draw(st.sampled_from(["slice", "int", "int2", "int2t", "mask"]))
        if kind == "slice":
            parts.append(slice(None))
        elif kind == "mask":
            mask = rng.random(size) < 0.6
            mask[rng.integers(size)] = True
            parts.append(mask)
        else:
            rows = rng.integers(-size, size, size=(draw(st.integers(1, 3)),) * (kind != "int")
                                + (draw(st.integers(1, 3)),))
            parts.append((rows, kind == "int2t"))
    if all(isinstance(p, slice) for p in parts):
        parts[0] = np.array([0])
    return np.arange(math.prod(shape), dtype=np.float64).reshape(shape), order, parts


@requires_torch
@given(_permuted_and_index())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_advanced_index_of_a_permuted_tensor_lays_out_its_result_as_pytorch(case):
    """PyTorch's index kernel orders the result's dims by the strides of the (permuted)
    source and of the index tensors; the strides of every dim longer than 1 agree."""
    values, order, parts = case
    results = []
    for lib in (torch, mt):
        key = []
        for part in parts:
            if isinstance(part, tuple):
                rows, transposed = part
                index = lib.tensor(rows.T.copy() if transposed else rows)
                key.append(index.t() if transposed else index)
            else:
                key.append(part if isinstance(part, slice) else lib.tensor(part))
        try:
            results.append(lib.tensor(values).permute(*order)[tuple(key)])
        except IndexError as error:   # index shapes that do not broadcast together
            assert lib is mt or "shape mismatch" in str(error)
            results.append(type(error))
    theirs, mine = results
    if theirs is IndexError:
        assert mine is IndexError
        return
    assert tuple(mine.shape) == tuple(theirs.shape)
    np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    assert [s for s, n in zip(mine.stride(), mine.shape) if n > 1] == \
        [s for s, n in zip(theirs.stride(), theirs.shape) if n > 1]


def test_setitem_with_advanced_index_into_view_goes_through_copyslices():
    x = mt.arange(12.0).reshape(3, 4).requires_grad_()
    y = x * 1
    y[1:, mt.tensor([0, 3])] = mt.tensor(-1.0, requires_grad=True) * 2
    y.sum().backward()
    expected = np.ones((3, 4))
    expected[1:, [0, 3]] = 0
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def test_setitem_on_leaf_that_requires_grad_raises_like_torch():
    x = mt.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used "
                                           "in an in-place operation."):
        x[mt.tensor([0])] = 1.0


# ------------------------------------------------------------------------------ errors

ERRORS = [
    lambda M, a: M.cat([]),
    lambda M, a: M.cat([a, M.zeros(3, 5)]),
    lambda M, a: M.cat([a, M.zeros(3)]),
    lambda M, a: M.cat([M.tensor(1.0)]),
    lambda M, a: M.cat([a, a], 2),
    lambda M, a: M.stack([]),
    lambda M, a: M.stack([M.zeros(2), M.zeros(3)]),
    lambda M, a: M.hstack([]),
    lambda M, a: a.split(0),
    lambda M, a: a.split(-1),
    lambda M, a: a.split([1, 1]),
    lambda M, a: a.split_with_sizes([-1, 4]),
    lambda M, a: a.chunk(0),
    lambda M, a: M.tensor(1.0).chunk(2),
    lambda M, a: M.tensor(1.0).unbind(),
    lambda M, a: M.tensor(1.0).split(1),
    lambda M, a: a.index_select(0, M.tensor([[0]])),
    lambda M, a: a.index_select(0, M.tensor([0.0])),
    lambda M, a: a.index_select(0, M.tensor([7])),
    lambda M, a: a.index_select(0, M.tensor([-1])),
    lambda M, a: a.gather(0, M.tensor([[7]])),
    lambda M, a: a.gather(0, M.tensor([[-1]])),
    lambda M, a: a.gather(0, M.tensor([[0] * 5])),
    lambda M, a: a.gather(0, M.tensor([0])),
    lambda M, a: a.gather(0, M.tensor([[0.0]])),
    lambda M, a: a.scatter(0, M.tensor([[7]]), 1.0),
    lambda M, a: a.scatter(0, M.tensor([[0] * 5]), M.zeros(3, 4)),
    lambda M, a: a.scatter(0, M.tensor([[0] * 5]), 1.0),
    lambda M, a: a.scatter(0, M.tensor([[0]]), M.zeros(3, 4, dtype=M.float64)),
    lambda M, a: a.scatter(0, M.tensor([0]), 1.0),
    lambda M, a: a.scatter(0, M.tensor([[0]]), 2.0, reduce="mean"),
    lambda M, a: a.scatter_add(0, M.tensor([[0]]), 1.0),
    lambda M, a: a.index_add(0, M.tensor([0, 1]), M.zeros(3, 4)),
    lambda M, a: a.index_add(0, M.tensor([0]), M.zeros(1, 5)),
    lambda M, a: a.index_add(0, M.tensor([7]), M.zeros(1, 4)),
    lambda M, a: a.index_add(0, M.tensor([0]), M.zeros(1, 4, dtype=M.float64)),
    lambda M, a: a.index_add(0, M.tensor([[0]]), M.zeros(1, 4)),
    lambda M, a: a.index_add(0, M.tensor([0.0]), M.zeros(1, 4)),
    lambda M, a: a.index_fill(0, M.tensor([-4]), 1.0),
    lambda M, a: a.index_fill(0, M.tensor([0], dtype=M.int32), 1.0),
    lambda M, a: a.index_fill(0, M.tensor([0]), M.tensor([1.0, 2.0])),
    lambda M, a: a.take(M.tensor([12])),
    lambda M, a: a.take(M.tensor([-13])),
    lambda M, a: a.take(M.tensor([0], dtype=M.int32)),
    lambda M, a: M.zeros(0).take(M.tensor([0])),
    lambda M, a: a.masked_select(M.tensor([1, 0, 1, 1])),
    lambda M, a: a.roll((1, 2), (0,)),
    lambda M, a: a.flip((0, 0)),
    lambda M, a: M.zeros(3).tril(),
    lambda M, a: M.zeros(3).triu_(),
    lambda M, a: M.zeros(3).trace(),
    lambda M, a: a.repeat(2),
    lambda M, a: a.repeat(-1, 2),
    lambda M, a: M.zeros(3, 3, 3).diag(),
    lambda M, a: M.diag_embed(M.zeros(2, 3), 0, 0, 0),
    lambda M, a: a[[5]],
    lambda M, a: a[:, [5]],
    lambda M, a: a[[0], [9]],
    lambda M, a: a[[0], [-5]],
    lambda M, a: a[M.tensor([1.0])],
    lambda M, a: a[M.tensor([True, False])],
    lambda M, a: a[[0, 1], [0, 1, 2]],
    lambda M, a: a[[[0]], [0, 1, 2], 1],
    lambda M, a: a[[0, 1], 1.5],
    lambda M, a: a[0, M.ones(3, dtype=M.bool)],
    lambda M, a: a[M.ones(3, dtype=M.bool), M.ones(4, dtype=M.bool)],
    lambda M, a: a.__setitem__(([0, 1],), M.zeros(3)),
    lambda M, a: a.__setitem__(([0, 1],), M.zeros(2, 4, dtype=M.float64)),
    lambda M, a: a.index_put_((M.tensor([0]),), M.zeros(4, dtype=M.float64)),
    lambda M, a: a.index_put_((M.tensor([0]),), 1.0),
]


@requires_torch
@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_errors_match_torch(i):
    with pytest.raises(Exception) as theirs:
        ERRORS[i](torch, torch.zeros(3, 4))
    with pytest.raises(Exception) as mine:
        ERRORS[i](mt, mt.zeros(3, 4))
    assert type(mine.value) is type(theirs.value)
    assert str(mine.value) == str(theirs.value).replace("torch.", "")


def test_never_reads_or_writes_outside_the_storage():
    x = mt.arange(12.0).reshape(3, 4)[1:, 1:3]     # a view into the middle of a storage
    before = x._base.numpy().copy()
    for bad in (lambda: x[mt.tensor([2])], lambda: x.__setitem__(mt.tensor([-3]), 1.0),
                lambda: x.take(mt.tensor([4])), lambda: x.index_put_((mt.tensor([2]),),
                                                                      mt.tensor(1.0))):
        with pytest.raises(IndexError):
            bad()
    for bad in (lambda: x.scatter_(0, mt.tensor([[2]]), 1.0),
                lambda: x.index_add_(1, mt.tensor([2]), mt.ones(2, 1))):
        with pytest.raises(RuntimeError):
            bad()
    np.testing.assert_array_equal(x._base.numpy(), before)


# ------------------------------------------------------------------------------ Hypothesis

@st.composite
def indexing_cases(draw):
    """A shape and an index for it mixing basic and advanced entries (sometimes only basic
    ones, sometimes invalid: the two libraries must then agree on the error type)."""
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=1, max_size=3)))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    broadcast = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    items, dim, advanced, masked, used_ellipsis = [], 0, False, False, False
    while dim < len(shape):
        kind = draw(st.sampled_from(["int", "slice", "tensor", "list", "mask", "none",
                                     "ellipsis", "full"]))
        size = shape[dim]
        if kind == "int" and size:
            items.append(int(rng.integers(-size, size)))
        elif kind == "slice":
            start, stop = sorted(int(v) for v in rng.integers(-size - 1, size + 2, 2))
            items.append(slice(start, stop, int(rng.integers(1, 3))))
        elif kind in ("tensor", "list") and not masked and size:
            sub = broadcast[int(rng.integers(0, len(broadcast) + 1)):]
            values = rng.integers(-size, size, sub)
            items.append(mt.tensor(values) if kind == "tensor" or not sub
                         else values.tolist())
            advanced = True
        elif kind == "mask" and not advanced:
            span = min(int(rng.integers(1, 3)), len(shape) - dim)
            items.append(mt.tensor(rng.random(shape[dim:dim + span]) < 0.5))
            advanced = masked = True
            dim += span - 1
        elif kind == "none":
            items.append(None)
            continue
        elif kind == "ellipsis" and not used_ellipsis:
            items.append(Ellipsis)
            used_ellipsis = True
            dim = len(shape) - int(rng.integers(0, len(shape) - dim + 1))
            continue
        else:
            items.append(slice(None))
        dim += 1
    return shape, tuple(items)


def torch_index(index):
    return tuple(torch.from_numpy(np.array(i.numpy())) if isinstance(i, mt.Tensor) else i
                 for i in index)


def _outcome(fn):
    try:
        return fn(), None
    except Exception as e:  # compared between the two libraries below
        return None, e


@requires_torch
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(indexing_cases())
def test_advanced_indexing_reads_writes_and_gradients_match_torch(case):
    shape, index = case
    values = np.random.default_rng(0).uniform(-1, 1, shape)
    x = mt.tensor(values.copy(), requires_grad=True)
    tx = torch.from_numpy(values.copy()).requires_grad_()
    mine, my_error = _outcome(lambda: x[index])
    theirs, their_error = _outcome(lambda: tx[torch_index(index)])
    assert type(my_error) is type(their_error), (my_error, their_error)
    if their_error is not None:
        return
    assert_same(mine, theirs, strides=False)

    weights = np.random.default_rng(1).uniform(-1, 1, tuple(theirs.shape))
    mine.backward(mt.tensor(weights))
    theirs.backward(torch.from_numpy(weights))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-12)

    y, ty = mt.tensor(values.copy()), torch.from_numpy(values.copy())
    y[index] = 7.5
    ty[torch_index(index)] = 7.5
    np.testing.assert_array_equal(y.numpy(), ty.numpy())
    fill = np.random.default_rng(2).uniform(-1, 1, tuple(theirs.shape)[1:])
    y[index] = mt.tensor(fill.copy())
    ty[torch_index(index)] = torch.from_numpy(fill.copy())
    np.testing.assert_array_equal(y.numpy(), ty.numpy())


@requires_torch
@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4), st.integers(0, 6), st.integers(0, 2 ** 16))
def test_index_put_accumulate_matches_torch(rows, cols, count, seed):
    rng = np.random.default_rng(seed)
    base = rng.uniform(-1, 1, (rows, cols))
    where = rng.integers(-rows, rows, count)
    values = rng.uniform(-1, 1, (count, cols))
    mine = mt.from_numpy(base.copy()).index_put_((mt.from_numpy(where),),
                                                 mt.from_numpy(values), accumulate=True)
    theirs = torch.from_numpy(base.copy()).index_put_((torch.from_numpy(where),),
                                                      torch.from_numpy(values), accumulate=True)
    np.testing.assert_allclose(mine.numpy(), theirs.numpy(), atol=1e-12)


@pytest.mark.parametrize("index, error", [("a", TypeError), (1.5, IndexError),
                                          ((0, object()), IndexError)])
def test_index_of_an_unusable_type_is_refused_like_pytorch(index, error):
    with pytest.raises(error, match="are valid indices"):
        mt.ones(3, 2)[index]


@pytest.mark.parametrize("index, shape", [((Ellipsis, Ellipsis), (2, 3, 4)),
                                          ((Ellipsis, 0, Ellipsis), (2, 3)),
                                          ((Ellipsis, None, Ellipsis), (2, 3, 4, 1)),
                                          ((Ellipsis, [0, 1], Ellipsis), (2, 3, 2))])
def test_a_second_ellipsis_takes_no_dims_as_in_pytorch(index, shape):
    x = mt.arange(24.0).reshape(2, 3, 4)
    assert tuple(x[index].shape) == shape
    if torch is not None:
        np.testing.assert_array_equal(x[index].numpy(),
                                      torch.arange(24.0).reshape(2, 3, 4)[index].numpy())


def test_tensor_where_method_matches_pytorch_argument_order():
    x = mt.tensor([1.0, -2.0, 3.0])
    assert x.where(x > 0, mt.zeros(3)).tolist() == [1.0, 0.0, 3.0]


# ------------------------------------------------------------------------------ arguments

@requires_torch
@pytest.mark.parametrize("call", [
    lambda lib, x: x.flip(0.5), lambda lib, x: x.repeat(2.0), lambda lib, x: x.permute(0.0),
    lambda lib, x: x.view(2, 1.5), lambda lib, x: lib.zeros(True), lambda lib, x: x.tile((1.0,)),
    lambda lib, x: x.sum_to_size(3.0)])
def test_integer_arguments_refuse_floats_and_bools_as_pytorch(call):
    x, tx = mt.ones(3), torch.ones(3)
    with pytest.raises(TypeError) as theirs:
        call(torch, tx)
    with pytest.raises(TypeError) as ours:
        call(mt, x)
    for name in ("dims", "repeats", "size"):   # the message names the argument, as PyTorch's
        if f"'{name}'" in str(theirs.value):
            assert f"'{name}'" in str(ours.value)


@requires_torch
def test_integer_arguments_accept_numpy_ints_and_integer_tensors():
    x, tx = mt.ones(2, 3), torch.ones(2, 3)
    for size in [(np.int64(3), 2), (mt.tensor(3), 2), [3, np.int32(2)]]:
        torch_size = tuple(torch.tensor(int(s)) if isinstance(s, mt.Tensor) else s for s in size)
        assert tuple(x.view(*size).shape) == tuple(tx.view(*torch_size).shape)
        assert tuple(mt.zeros(size).shape) == tuple(torch.zeros(torch_size).shape)
    assert x.flip(np.int64(1)).tolist() == tx.flip(1).tolist()


def test_may_overlap_never_misses_an_overlap():
    """The conservative self-overlap test: whenever two indices reach one location (found
    by enumerating them), it says so."""
    import itertools
    from microtensor.ops.loops import may_overlap
    for sizes in itertools.product(range(4), repeat=2):
        for strides in itertools.product(range(5), repeat=2):
            places = [sum(i * s for i, s in zip(index, strides))
                      for index in itertools.product(*map(range, sizes))]
            if len(set(places)) < len(places):
                assert may_overlap(sizes, strides), (sizes, strides)
            if 0 in sizes or len(places) == 1:
                assert not may_overlap(sizes, strides)
    assert not may_overlap((2, 3), (3, 1)) and not may_overlap((3, 2), (1, 3))
    assert may_overlap((3, 2), (1, 1)) and may_overlap((2,), (0,))
