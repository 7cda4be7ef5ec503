"""Gradients through in-place writes into views (CopySlices, regenerated view grad_fns).

Every case is a function of leaves written with in-place ops on views of a non-leaf.
Its gradients must equal (1) the same code run in PyTorch, when importable, and (2) always
a clone-based reference: the same function written out of place, where the view's new
values are computed on a clone and put back with ``overwrite``.
"""
import numpy as np
import pytest

import microtensor as mt
from microtensor.autograd import gradcheck, gradgradcheck

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def overwrite(x, view_fn, new):
    """``x`` with the elements ``view_fn`` selects replaced by ``new``, out of place:
    ``x * (1 - mask) + P @ new`` where P maps view positions to positions in ``x``."""
    positions = np.array(view_fn(mt.arange(x.numel()).view(x.shape))._array()).reshape(-1)
    placement = np.zeros((x.numel(), positions.size))
    placement[positions, np.arange(positions.size)] = 1.0
    mask = mt.tensor(placement.sum(1).reshape(tuple(x.shape)))
    scattered = (mt.tensor(placement) * new.reshape(1, -1)).sum(1).view(x.shape)
    return x * (1 - mask) + scattered


# Each case: (leaf shapes, in-place version, clone-based reference).  The in-place version
# is written once for both libraries (``lib`` is microtensor or torch).

def slice_mul(lib, a, w):
    x = a * 1
    x[1:3].mul_(w)
    return x


def slice_mul_ref(a, w):
    return overwrite(a, lambda t: t[1:3], a[1:3].clone() * w)


def select_exp(lib, a):
    x = a * 1
    x.select(1, 2).exp_()
    return x * x


def select_exp_ref(a):
    x = overwrite(a, lambda t: t.select(1, 2), a.select(1, 2).clone().exp())
    return x * x


def diagonal_add(lib, a, d):
    x = a * 1
    x.diagonal().add_(d)
    return x.sin()


def diagonal_add_ref(a, d):
    return overwrite(a, lambda t: t.diagonal(), a.diagonal().clone() + d).sin()


def transposed_row(lib, a):
    x = a * 1
    x.t()[1].mul_(x.t()[0].clone())
    return x


def transposed_row_ref(a):
    return overwrite(a, lambda t: t.t()[1], a.t()[1].clone() * a.t()[0])


def as_strided_view(lib, a, w):
    x = a * 1
    x.as_strided((2, 2), (1, 3), 1).mul_(w)
    return x


def as_strided_view_ref(a, w):
    view = (lambda t: t.as_strided((2, 2), (1, 3), t.storage_offset() + 1))
    return overwrite(a, view, view(a).clone() * w)


def setitem(lib, a, v):
    x = a * 1
    x[0, 1:] = v
    x[2] = 0.5
    return x * a


def setitem_ref(a, v):
    x = overwrite(a, lambda t: t[0, 1:], v.expand(3))
    return overwrite(x, lambda t: t[2], x[2] * 0 + 0.5) * a


def nested_views(lib, a):
    x = a * 1
    x[1:][:, 1:].narrow(0, 0, 1).mul_(3)
    return x.cos()


def nested_views_ref(a):
    view = (lambda t: t[1:][:, 1:].narrow(0, 0, 1))
    return overwrite(a, view, view(a).clone() * 3).cos()


def views_before_modification(lib, a, w):
    x = a * 1
    row, column = x[0], x[:, 1]          # taken before any write
    row.mul_(w)                         # the sibling ``column`` must see this write
    x.add_(1)                           # and this one, made through the base
    return column * column + row.sum()


def views_before_modification_ref(a, w):
    x = overwrite(a, lambda t: t[0], a[0].clone() * w) + 1
    return x[:, 1] * x[:, 1] + x[0].sum()


def chain_of_inplace(lib, a, w):
    x = a * 1
    x[0].mul_(2)
    x[:, 1].add_(w)
    x.mul_(a.sin())
    x[1:].tanh_()
    return x


def chain_of_inplace_ref(a, w):
    x = overwrite(a, lambda t: t[0], a[0].clone() * 2)
    x = overwrite(x, lambda t: t[:, 1], x[:, 1].clone() + w)
    x = x * a.sin()
    return overwrite(x, lambda t: t[1:], x[1:].clone().tanh())


def view_of_non_leaf_without_grad(lib, a, b):
    base = lib.zeros(3, 4, dtype=lib.float64)     # needs no grad until written into
    base[1].copy_(a[0] * b)
    return base * base.sum()


def view_of_non_leaf_without_grad_ref(a, b):
    base = mt.zeros(3, 4, dtype=mt.float64)
    base = overwrite(base, lambda t: t[1], a[0] * b)
    return base * base.sum()


CASES = {
    "slice": (((4, 3), (3,)), slice_mul, slice_mul_ref),
    "select": (((3, 4),), select_exp, select_exp_ref),
    "diagonal": (((3, 3), (3,)), diagonal_add, diagonal_add_ref),
    "transposed_rows": (((3, 4),), transposed_row, transposed_row_ref),
    "as_strided": (((3, 3), (2, 2)), as_strided_view, as_strided_view_ref),
    "setitem": (((3, 4), ()), setitem, setitem_ref),
    "nested_views": (((3, 4),), nested_views, nested_views_ref),
    "views_taken_before_modification": (((3, 3), (3,)), views_before_modification,
                                        views_before_modification_ref),
    "chain": (((3, 3), (3,)), chain_of_inplace, chain_of_inplace_ref),
    "non_leaf_without_grad": (((2, 4), (4,)), view_of_non_leaf_without_grad,
                              view_of_non_leaf_without_grad_ref),
}


def _data(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, shape) for shape in shapes]


def _grads(lib, fn, arrays, create_graph=False):
    leaves = [lib.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*leaves)
    weight = lib.tensor(np.linspace(-1, 1, int(np.prod(out.shape))).reshape(tuple(out.shape)))
    grads = (lib.autograd.grad((out * weight).sum(), leaves, create_graph=create_graph))
    return out, grads, leaves


def _np(t):
    return np.array(t.detach()._array()) if isinstance(t, mt.Tensor) else t.detach().numpy()


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_clone_reference(case):
    shapes, fn, reference = CASES[case]
    arrays = _data(shapes)
    out, grads, _ = _grads(mt, lambda *xs: fn(mt, *xs), arrays)
    ref_out, ref_grads, _ = _grads(mt, reference, arrays)
    np.testing.assert_allclose(_np(out), _np(ref_out), rtol=1e-12, atol=1e-14)
    for g, r in zip(grads, ref_grads):
        np.testing.assert_allclose(_np(g), _np(r), rtol=1e-10, atol=1e-12)


@needs_torch
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_torch_including_double_backward(case):
    shapes, fn, _ = CASES[case]
    arrays = _data(shapes)
    out, grads, leaves = _grads(mt, lambda *xs: fn(mt, *xs), arrays, create_graph=True)
    t_out, t_grads, t_leaves = _grads(torch, lambda *xs: fn(torch, *xs), arrays,
                                      create_graph=True)
    np.testing.assert_allclose(_np(out), _np(t_out), rtol=1e-12, atol=1e-14)
    for g, t in zip(grads, t_grads):
        np.testing.assert_allclose(_np(g), _np(t), rtol=1e-10, atol=1e-12)
    second = sum((g * g).sum() for g in grads if g.requires_grad)
    t_second = sum((g * g).sum() for g in t_grads if g.requires_grad)
    if not isinstance(second, int):
        gg = mt.autograd.grad(second, leaves, allow_unused=True)
        tgg = torch.autograd.grad(t_second, t_leaves, allow_unused=True)
        for g, t in zip(gg, tgg):
            if t is None:
                assert g is None or not _np(g).any()
            else:
                np.testing.assert_allclose(_np(g), _np(t), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", ["slice", "diagonal", "as_strided", "chain", "setitem"])
def test_gradcheck_and_gradgradcheck(case):
    shapes, fn, _ = CASES[case]
    leaves = [mt.tensor(a, requires_grad=True) for a in _data(shapes, seed=1)]
    assert gradcheck(lambda *xs: fn(mt, *xs), leaves)
    assert gradgradcheck(lambda *xs: fn(mt, *xs), leaves)


# ------------------------------------------------------------------ graph structure

@needs_torch
def test_node_names_match_torch():
    for lib in (mt, torch):
        a = lib.tensor(np.ones((4, 5)), requires_grad=True)
        base = a * a
        view = base[0]
        view.cos_()
        assert base.grad_fn.name().split("::")[-1] == "CopySlices"
        assert view.grad_fn.name() == "AsStridedBackward0"


def test_saved_view_modified_by_the_inplace_op_itself_raises():
    x = mt.tensor(np.ones((3, 2)), requires_grad=True) * 1
    x.t()[1].mul_(x.t()[0])                 # mul_ saved x.t()[0], then wrote x's storage
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        x.sum().backward()


def test_pytorch_ported_cases():
    # test_inplace_view_backprop_base
    root = mt.tensor(np.ones((2, 2)), requires_grad=True)
    x = root.clone()
    x.narrow(0, 0, 1).mul_(2)
    x.sum().backward()
    assert root.grad.tolist() == [[2, 2], [1, 1]]
    # test_inplace_view_backprop_view_of_view
    root = mt.tensor(np.ones((2, 2)), requires_grad=True)
    x = root.clone()
    v1, v2 = x.narrow(0, 0, 1), x.narrow(0, 0, 1)
    v1.mul_(2)
    v2.sum().backward()
    assert root.grad.tolist() == [[2, 2], [0, 0]]
    # test_inplace_view_of_view
    root = mt.tensor(np.ones((2, 2)), requires_grad=True)
    x = root.clone()
    x.narrow(0, 0, 1).narrow(1, 1, 1).mul_(2)
    x.sum().backward()
    assert root.grad.tolist() == [[1, 2], [1, 1]]
    # test_inplace_view_non_contig
    data = mt.ones(2, 3, 2, dtype=mt.float64).select(2, 1).t()
    root = data.detach().requires_grad_()
    x = root.clone()
    x.narrow(0, 0, 1).narrow(1, 1, 1).mul_(2)
    x.sum().backward()
    assert root.grad.tolist() == [[1, 2], [1, 1], [1, 1]]
    # test_inplace_view_backprop_view
    a = mt.tensor([2.0, 5.0], dtype=mt.float64)
    b = mt.tensor([3.0], dtype=mt.float64, requires_grad=True)
    res = a.narrow(0, 1, 1).mul_(b)
    res.sum().backward()
    assert b.grad.tolist() == [5] and a.grad is None


def test_view_requires_grad_after_base_is_modified():
    # test_inplace_view_modify_base
    def fn(r):
        x = mt.ones(5, dtype=mt.float64)
        v = x.select(0, 1)
        assert not v.requires_grad and v.grad_fn is None
        x.add_(r)
        assert v.requires_grad
        return v
    r = mt.tensor(np.linspace(0, 1, 5), requires_grad=True)
    assert gradcheck(fn, (r,))
    assert gradgradcheck(fn, (r,))


def test_copy_slices_uses_batched_friendly_allocations():
    """CopySlices allocates with ``grad.new_empty_strided`` and clones the slice with
    ``contiguous_format``: the gradient of a view of a transposed base still lands right."""
    a = mt.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
    base = (a * 1).t()                                   # non-contiguous base view
    base = base.clone()                                  # transposed-layout non-leaf
    base[1:3, 0].mul_(mt.tensor([2.0, 3.0], dtype=mt.float64))
    (g,) = mt.autograd.grad((base * base).sum(), a)
    expected = 2 * np.arange(12.0).reshape(3, 4)
    expected[0, 1:3] *= np.array([4.0, 9.0])
    np.testing.assert_allclose(_np(g), expected)
