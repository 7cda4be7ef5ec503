"""Second-order gradients (``create_graph=True``) against PyTorch's, op by op and end to end.

Every differentiable op with samples is run on the same float64 (complex128 where the
sample is complex) inputs in microtensor and in PyTorch.  The first gradients are taken
with ``create_graph=True`` from a seeded upstream gradient, once an upstream gradient that
itself requires grad and once a plain one, and compared: which are None, which require
grad (PyTorch's answer: a piecewise-linear op's first gradient has a graph whenever its
input requires grad, its derivative wrt the input being zeros, not an error), and their
values.  Then a seeded random projection of the first gradients is differentiated wrt the
inputs and wrt the upstream gradients, with ``allow_unused=True`` (None exactly where
PyTorch gives None) and with ``materialize_grads=True``.  Then the programs that depend
on this: a WGAN-GP gradient penalty, the Hessian of a ReLU network and a MAML step.
"""
import numpy as np
import pytest

import microtensor as mt
from microtensor._C.tensor import TensorBase
from microtensor.ops import REGISTRY
from microtensor.testing import differentiable_places, maker, seed_for
from test_forward_ad import _paths
from test_op_registry import (CASES, GAUGE_DEPENDENT, _differentiable, _gradient_by_convention,
                              _sample, _to_torch, _torch_callable)

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the "
                                                       "oracle of these tests)")


# ------------------------------------------------------------------ every op

def _differentiable_outputs(result, requires_grad):
    """The floating and complex outputs of an op that require grad (``requires_grad``
    reads the flag: microtensor's and PyTorch's tensors alike)."""
    items = result if isinstance(result, (tuple, list)) else [result]
    return [i for i, r in enumerate(items)
            if hasattr(r, "requires_grad") and requires_grad(r)], items


def _first_order(lib, op_fn, inplace, args, kwargs, places, upstream_grad, seed, only=None):
    """The op on leaves at ``places`` (None: the differentiable places of the sample), its
    first gradients with ``create_graph=True`` and the upstream gradients used
    (``upstream_grad``: whether they require grad), from the outputs that require grad (or
    those of ``only``)."""
    if places is None:
        places = differentiable_places(op_fn, args, kwargs)
    leaves = []
    for container, key in places:
        leaf = container[key].detach().clone().requires_grad_()
        container[key] = leaf
        leaves.append(leaf)
    call_args = list(args)
    if inplace:
        call_args[0] = call_args[0].clone()
    chosen, items = _differentiable_outputs(op_fn(*call_args, **kwargs),
                                            lambda t: t.requires_grad)
    chosen = chosen if only is None else list(only)
    outputs = [items[i] for i in chosen]
    make = maker(seed)
    upstream = [_convert(lib, make(*o.shape, dtype=_mt_dtype(o.dtype)))
                .requires_grad_(upstream_grad) for o in outputs]
    firsts = lib.autograd.grad(outputs, leaves, upstream, create_graph=True,
                               allow_unused=True)
    return chosen, leaves, upstream, list(firsts)


def _mt_dtype(dtype):
    return getattr(mt, str(dtype).split(".")[-1])


def _convert(lib, t):
    return _to_torch(t) if lib is torch else t


def _projection(lib, firsts, seed):
    """A seeded random real projection of the first gradients that have a graph."""
    make = maker(seed)
    total = None
    for g in firsts:
        if g is None or not g.requires_grad:
            continue
        w = _convert(lib, make(*g.shape, dtype=_mt_dtype(g.dtype)))
        term = (g * w).sum()
        term = term.real if term.is_complex() else term
        total = term if total is None else total + term
    return total


def _torch_place(targs, tkwargs, path):
    """The ``(container, key)`` in PyTorch's arguments of a place in microtensor's (a
    tuple of tensors turned into a list once, so that each of its items can be set)."""
    top, index = path
    container = targs if isinstance(top, int) else tkwargs
    if index is None:
        return container, top
    if isinstance(container[top], tuple):
        container[top] = list(container[top])
    return container[top], index


def _array(t):
    if torch is not None and isinstance(t, torch.Tensor):
        # PyTorch's gradient of an op with a zero derivative may be a ZeroTensor
        return t.detach().resolve_conj().numpy(force=t._is_zerotensor())
    return np.array(t.detach()._array())


def _same(ours, theirs, what, zeros_for_none=False):
    """Lists of gradients equal: None where PyTorch's is None (or zeros, with
    ``zeros_for_none``), values elsewhere."""
    assert len(ours) == len(theirs), what
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if zeros_for_none and b is None and a is not None:
            assert not _array(a).any(), f"{what}[{i}]: PyTorch None, here not zeros"
            continue
        assert (a is None) == (b is None), \
            f"{what}[{i}]: {'None' if a is None else 'a tensor'}, PyTorch " \
            f"{'None' if b is None else 'a tensor'}"
        if a is not None:
            assert tuple(a.shape) == tuple(b.shape), f"{what}[{i}]: shape"
            np.testing.assert_allclose(_array(a), _array(b), rtol=1e-6, atol=1e-8,
                                       equal_nan=True, err_msg=f"{what}[{i}]")


# Outputs that PyTorch does not differentiate (LU's permutation, the saved statistics of
# native_batch_norm/native_layer_norm) and microtensor does: a difference of the forward,
# reported apart; the second order is compared on PyTorch's differentiable outputs
NON_DIFFERENTIABLE_OUTPUTS = {"linalg_lu", "lu_unpack", "native_batch_norm",
                              "native_layer_norm"}

# PyTorch has no double backward for these (its first gradient is computed by an op whose
# own derivative it does not implement), so there is nothing to compare with; by name, or
# by (name, sample index)
TORCH_HAS_NO_DOUBLE_BACKWARD = {
    "cdist": "PyTorch: the derivative for '_cdist_backward' is not implemented",
    "pdist": "PyTorch: the derivative for '_pdist_backward' is not implemented",
    "hardsigmoid": "PyTorch: derivative for aten::hardsigmoid_backward is not implemented "
                   "(microtensor gives its value, zeros: tested below)",
    "hardsigmoid_": "PyTorch: derivative for aten::hardsigmoid_backward is not implemented",
    "multi_margin_loss": "PyTorch: derivative for aten::multi_margin_loss_backward is not "
                         "implemented",
    "multilabel_margin_loss": "PyTorch: derivative for aten::multilabel_margin_loss_backward "
                              "is not implemented",
    "segment_reduce": "PyTorch: its first gradient requires grad, but its grad_fn is "
                      "NotImplemented (_segment_reduce_backward has no derivative)",
    ("native_batch_norm", 1): "PyTorch's double backward without weight fails (Expected a "
                              "proper Tensor but got None)",
    ("native_layer_norm", 1): "PyTorch's double backward without weight fails (Expected a "
                              "proper Tensor but got None)",
    ("layer_norm", 4): "PyTorch's double backward without weight fails (Expected a proper "
                       "Tensor but got None)",
}


# Where the first gradients already differ from PyTorch's, for a reason of the first order
FIRST_ORDER_DIFFERS = {
    **{name: "the first gradient reads one triangle of the factor (gradchecked in "
             "tests/test_op_registry.py); PyTorch's treats the factor whole"
       for name in ("cholesky", "linalg_cholesky", "linalg_cholesky_ex", "cholesky_solve",
                    "cholesky_inverse")},
    ("block_diag", 2): "PyTorch's first gradient is wrong here: a 1-d empty block makes a "
                       "row, and its backward reads the next block's gradient one row early",
    ("as_strided_scatter", 0): "PyTorch's first gradient wrt self is wrong here (it keeps the "
                               "scattered region and zeroes the rest)",
    ("as_strided_scatter", 2): "PyTorch's first gradient wrt self is wrong here (it keeps the "
                               "scattered region and zeroes the rest)",
    ("pad", 12): "PyTorch's first gradient of a circular pad that crops is wrong (its own "
                 "gradcheck fails)",
    ("cosine_similarity", 3): "at a zero vector PyTorch's second order is NaN (its formula "
                              "divides by the norm); here it is the derivative of the "
                              "eps-clamped function (gradgradchecked)",
    ("copy_", 4): "an integer self: PyTorch's result does not require grad, here it does "
                  "(a difference of the forward)",
}

# Where PyTorch's first gradient comes from a backward op whose double backward gives no
# gradient (None) for an input: the gradient here is linked to that input (see
# ``ops.copy._with_zero_derivative``) and gives its value, zeros
ZEROS_WHERE_TORCH_HAS_NONE = {("batch_norm", 4), ("grid_sampler", 3)}

# Second-order divergences found and not fixed yet: (name, sample index, upstream mode) ->
# why; each is expected to fail (strictly: fixing one fails its entry, to be removed)
def _known(reason, *cases):
    """``{(name, index, mode): reason}`` for cases written "name:0g 1p" (g: the upstream
    gradient requires grad, p: plain)."""
    table = {}
    for case in cases:
        name, entries = case.split(":")
        for entry in entries.split():
            mode = "grad-requires-grad" if entry[-1] == "g" else "plain"
            table[name, int(entry[:-1]), mode] = reason
    return table


KNOWN_DIVERGENCES = {
    **_known("composite: the first gradient does not depend on the input, PyTorch's "
             "backward op takes it (zeros, not None or an error, for the second order)",
             "adaptive_avg_pool1d:0g 0p 1g 1p 2g 2p", "adaptive_avg_pool2d:0g 0p 2g 2p",
             "adaptive_avg_pool3d:0g 0p"),
    **_known("1x1 (or single-point) case: the first gradient depends on the input here, "
             "PyTorch's does not", "det:2g 2p", "linalg_det:2g 2p", "linalg_vander:2g 2p"),
    **_known("the first gradient is the upstream gradient itself (no grad_fn); PyTorch's "
             "is a view or a copy of it with a grad_fn", "linear:1g", "nanmedian:2g",
             "native_dropout:0g 1g", "put:1g", "t_copy:1g 2g", "cat:3g", "cummax:3g 5g",
             "cummin:3g 5g", "cumsum:3g", "kthvalue:3g", "max:6g", "median:5g", "min:6g",
             "mode:4g", "rot90:4g", "sort:4g", "squeeze:3g", "squeeze_copy:3g", "topk:4g"),
    **_known("an empty input: PyTorch's first gradient requires grad without a grad_fn",
             "cummax:5p", "cummin:5p"),
    **_known("reflect and replicate pads: PyTorch's backward op takes the input (zeros for "
             "the second order); linking here would save the input of every pad, the "
             "constant ones too", "pad:3g 3p 4g 4p 5g 5p 6g 6p 7g 7p 10g 10p 11g 11p"),
}


def _double_backward_cases():
    """Every sample of every differentiable op (an in-place variant's first: its base op
    has the others), in both upstream modes."""
    cases = []
    for case in CASES:
        name, index = case.values
        op = REGISTRY[name]
        if not _differentiable(op) or (op.kind == "inplace" and index > 0):
            continue
        for mode in ("grad-requires-grad", "plain"):
            reason = KNOWN_DIVERGENCES.get((name, index, mode))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            cases.append(pytest.param(name, index, mode == "grad-requires-grad", marks=marks,
                                      id=f"{name}-{index}-{mode}"))
    return cases


@needs_torch
@pytest.mark.parametrize("name, index, upstream_grad", _double_backward_cases())
def test_double_backward_matches_torch(name, index, upstream_grad):
    op = REGISTRY[name]
    if op.random:
        pytest.skip("random: the gradient depends on the draw (dropout is checked below)")
    if name == "nll_loss_backward":
        pytest.skip("PyTorch's op takes other arguments (self, total_weight); nll_loss's "
                    "double backward, through it, is compared")
    if name in GAUGE_DEPENDENT or _gradient_by_convention(name, index):
        pytest.skip("the derivative is fixed by a convention (gauge, padding, CTC's) that "
                    "tests/test_op_registry.py checks")
    for key in (name, (name, index)):
        if key in TORCH_HAS_NO_DOUBLE_BACKWARD:
            pytest.skip(TORCH_HAS_NO_DOUBLE_BACKWARD[key])
        if key in FIRST_ORDER_DIFFERS:
            pytest.skip(FIRST_ORDER_DIFFERS[key])
    fn = _torch_callable(op)
    if fn is None:
        pytest.skip(f"PyTorch has no {name}")
    args, kwargs = _sample(name, index)
    places = differentiable_places(op, args, kwargs)
    if not places:
        pytest.skip("no float64 or complex128 input to differentiate")
    paths = _paths(args, kwargs, places)
    targs, tkwargs = list(_to_torch(list(args))), _to_torch(dict(kwargs))
    tplaces = [_torch_place(targs, tkwargs, path) for path in paths]
    seed = seed_for(f"{name}-{index}-double")
    inplace = op.kind == "inplace"
    try:
        t_chosen, t_leaves, t_up, t_first = _first_order(torch, fn, inplace, targs, tkwargs,
                                                         tplaces, upstream_grad, seed)
    except (TypeError, AttributeError, NotImplementedError, RuntimeError) as e:
        pytest.skip(f"PyTorch's {name} takes other arguments or has no derivative: {e}")
    chosen, leaves, up, first = _first_order(mt, op, inplace, args, kwargs, places,
                                             upstream_grad, seed)
    if name in NON_DIFFERENTIABLE_OUTPUTS:     # compared on those PyTorch differentiates
        assert set(t_chosen) <= set(chosen), "the outputs that require grad"
        chosen, leaves, up, first = _first_order(mt, op, inplace, *_sample(name, index),
                                                 None, upstream_grad, seed, t_chosen)
    assert chosen == t_chosen, "the outputs that require grad"
    _same(first, t_first, "first gradient")
    assert [g is not None and g.requires_grad for g in first] == \
        [g is not None and g.requires_grad for g in t_first], \
        "which first gradients require grad (PyTorch's answer)"
    assert [g is not None and g.grad_fn is not None for g in first] == \
        [g is not None and g.grad_fn is not None for g in t_first], "grad_fn"
    t_total = _projection(torch, t_first, seed + 1)
    total = _projection(mt, first, seed + 1)
    if t_total is None:
        assert total is None
        return
    wrt = leaves + (up if upstream_grad else [])
    t_wrt = t_leaves + (t_up if upstream_grad else [])
    try:
        expected = torch.autograd.grad(t_total, t_wrt, allow_unused=True, retain_graph=True)
    except (RuntimeError, NotImplementedError) as e:
        pytest.fail(f"PyTorch has no double backward here: list {name} in "
                    f"TORCH_HAS_NO_DOUBLE_BACKWARD with the reason ({e})")
    got = mt.autograd.grad(total, wrt, allow_unused=True, retain_graph=True)
    _same(got, expected, "second-order gradient (allow_unused)",
          (name, index) in ZEROS_WHERE_TORCH_HAS_NONE)
    _same(mt.autograd.grad(total, wrt, materialize_grads=True),
          torch.autograd.grad(t_total, t_wrt, materialize_grads=True),
          "second-order gradient (materialize_grads)")


# ------------------------------------------------------------------ programs

def both(program):
    """``program(lib)`` on microtensor and on PyTorch: the lists of arrays (or None) they
    return must agree."""
    ours = program(mt)
    theirs = program(torch)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert (a is None) == (b is None), i
        if a is not None:
            np.testing.assert_allclose(_array(a), _array(b), rtol=1e-7, atol=1e-10,
                                       err_msg=str(i))
    return ours


RNG = np.random.default_rng(7)


def t64(lib, values, **kwargs):
    return lib.tensor(np.asarray(values), dtype=lib.float64, **kwargs)


@needs_torch
def test_relu_gradient_differentiated_again_is_zeros():
    def program(lib):
        x = t64(lib, [-1.0, 2.0, 3.0], requires_grad=True)
        g, = lib.autograd.grad(lib.relu(x).sum(), x, create_graph=True)
        assert g.requires_grad and g.grad_fn is not None
        gg, = lib.autograd.grad(g.sum(), x)
        return [g, gg]
    _, gg = both(program)
    assert not _array(gg).any()


@needs_torch
@pytest.mark.parametrize("activation", ["relu", "leaky_relu", "hardtanh", "relu6", "elu",
                                        "hardswish", "softshrink", "hardshrink"])
def test_activation_hessian_vector_products(activation):
    values = RNG.standard_normal((3, 4)) * 2

    def program(lib):
        x = t64(lib, values, requires_grad=True)
        fn = getattr(lib.nn.functional, activation)
        g, = lib.autograd.grad((fn(x) * x).sum(), x, create_graph=True)
        hv, = lib.autograd.grad(g, x, t64(lib, np.ones((3, 4))))
        return [g, hv]
    both(program)


def test_hardsigmoid_second_derivative_is_zeros():
    """PyTorch has no double backward for hardsigmoid (an error); its value is zeros."""
    x = mt.tensor([-4.0, -1.0, 0.5, 4.0], dtype=mt.float64, requires_grad=True)
    g, = mt.autograd.grad(mt.nn.functional.hardsigmoid(x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), [0, 1 / 6, 1 / 6, 0])
    gg, = mt.autograd.grad(g.sum(), x)
    assert not gg.detach().numpy().any()


@needs_torch
@pytest.mark.parametrize("case", ["div_floor", "div_trunc", "pow0", "copysign", "fill_"])
def test_zero_derivatives_have_no_graph(case):
    """Where PyTorch's derivative is ``zeros_like`` (rounded division, ``x ** 0``,
    copysign's sign source, a filled tensor), the first gradient is zeros without a graph
    even when the upstream gradient requires grad: the second order finds no path."""
    def program(lib):
        x = t64(lib, [1.5, -2.5], requires_grad=True)
        o = t64(lib, [2.0, 3.0], requires_grad=True)
        v = t64(lib, [1.0, float("inf")], requires_grad=True)
        y = {"div_floor": lambda: lib.div(x, o, rounding_mode="floor"),
             "div_trunc": lambda: lib.div(x, o, rounding_mode="trunc"),
             "pow0": lambda: x.pow(0), "copysign": lambda: lib.copysign(x, o),
             "fill_": lambda: (x * 1).fill_(2.0)}[case]()
        gs = lib.autograd.grad(y, [x, o], v, create_graph=True, allow_unused=True)
        assert [g is not None and g.requires_grad for g in gs] == \
            {"copysign": [True, False]}.get(case, [False, False])
        return list(gs)
    both(program)


@needs_torch
@pytest.mark.parametrize("name", ["addmm", "addmv", "addr", "baddbmm", "addbmm"])
def test_ignored_self_of_the_addmm_family_gets_zeros(name):
    """With ``beta=0``, ``self`` is ignored (its NaN too) and gets PyTorch's gradient,
    ``grad * 0``: zeros, not None."""
    shapes = {"addmm": ((2, 3), (2, 4), (4, 3)), "addmv": ((2,), (2, 4), (4,)),
              "addr": ((2, 3), (2,), (3,)), "baddbmm": ((2, 2, 3), (2, 2, 4), (2, 4, 3)),
              "addbmm": ((2, 3), (2, 2, 4), (2, 4, 3))}[name]
    values = [RNG.standard_normal(shape) for shape in shapes]
    values[0].flat[0] = np.nan

    def program(lib):
        args = [t64(lib, v, requires_grad=True) for v in values]
        out = getattr(lib, name)(*args, beta=0, alpha=2)
        v = t64(lib, np.ones(tuple(out.shape)), requires_grad=True)
        gs = lib.autograd.grad(out, args, v, create_graph=True)
        assert gs[0].requires_grad
        return [out, *gs]
    both(program)


@needs_torch
def test_wgan_gp_gradient_penalty():
    """The critic's gradient penalty (Gulrajani et al.) through Linear-LeakyReLU-Linear:
    the penalty's gradients wrt the critic's parameters need the double backward of
    leaky_relu and linear."""
    w1, b1 = RNG.standard_normal((8, 5)), RNG.standard_normal(8)
    w2, b2 = RNG.standard_normal((1, 8)), RNG.standard_normal(1)
    real, fake = RNG.standard_normal((6, 5)), RNG.standard_normal((6, 5))
    alpha = RNG.uniform(size=(6, 1))

    def program(lib):
        critic = lib.nn.Sequential(lib.nn.Linear(5, 8), lib.nn.LeakyReLU(0.2),
                                   lib.nn.Linear(8, 1)).double()
        with lib.no_grad():
            for p, v in zip(critic.parameters(), (w1, b1, w2, b2)):
                p.copy_(t64(lib, v))
        mixed = (t64(lib, alpha) * t64(lib, real) + (1 - t64(lib, alpha)) * t64(lib, fake))
        mixed.requires_grad_(True)
        scores = critic(mixed)
        g, = lib.autograd.grad(scores, mixed, lib.ones_like(scores), create_graph=True)
        penalty = ((g.norm(2, dim=1) - 1) ** 2).mean()
        loss = critic(t64(lib, fake)).mean() - critic(t64(lib, real)).mean() + 10 * penalty
        loss.backward()
        return [penalty] + [p.grad for p in critic.parameters()]
    both(program)


def _relu_mlp(lib, w1, w2):
    def f(x):
        return (lib.relu(x @ w1).tanh() @ w2).relu().sum() + (lib.relu(x) ** 3).sum()
    return f


@needs_torch
def test_hessian_of_a_relu_network():
    w1, w2 = RNG.standard_normal((4, 6)), RNG.standard_normal((6, 2))
    x = RNG.standard_normal(4)

    def program(lib):
        f = _relu_mlp(lib, t64(lib, w1), t64(lib, w2))
        by_functional = lib.autograd.functional.hessian(f, t64(lib, x), create_graph=False)
        by_func = lib.func.hessian(f)(t64(lib, x))
        return [by_functional, by_func]
    h, h_func = both(program)
    np.testing.assert_allclose(_array(h), _array(h_func), rtol=1e-10, atol=1e-12)


@needs_torch
def test_hessian_of_a_piecewise_linear_network_is_zeros():
    """A network of linear layers, ReLUs and max pooling only: its Hessian is zeros (an
    error before, the first gradient having no graph)."""
    w = RNG.standard_normal((6, 8))
    x = RNG.standard_normal(6)

    def program(lib):
        def f(v):
            h = lib.relu(v @ t64(lib, w)).reshape(1, 1, 8)
            return lib.nn.functional.max_pool1d(h, 2).sum() + lib.nn.functional.avg_pool1d(
                lib.nn.functional.leaky_relu(h), 2).sum()
        v = t64(lib, x, requires_grad=True)
        g, = lib.autograd.grad(f(v), v, create_graph=True)
        hvp, = lib.autograd.grad(g, v, lib.ones_like(g))    # by hand: reverse over reverse
        return [lib.autograd.functional.hessian(f, t64(lib, x)),
                lib.func.hessian(f)(t64(lib, x)), hvp]
    for h in both(program):
        assert not _array(h).any()


@needs_torch
def test_maml_inner_step_with_create_graph():
    """One MAML step: an SGD-style inner update of a ReLU network's parameters on the
    support set with ``create_graph=True``, the outer loss on the query set differentiated
    through the update wrt the original parameters."""
    params = [RNG.standard_normal((4, 3)), RNG.standard_normal(4), RNG.standard_normal((1, 4)),
              RNG.standard_normal(1)]
    xs, ys = RNG.standard_normal((5, 3)), RNG.standard_normal((5, 1))
    xq, yq = RNG.standard_normal((5, 3)), RNG.standard_normal((5, 1))

    def program(lib):
        ps = [t64(lib, p, requires_grad=True) for p in params]
        F = lib.nn.functional

        def net(x, w1, b1, w2, b2):
            return F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)
        inner = F.mse_loss(net(t64(lib, xs), *ps), t64(lib, ys))
        grads = lib.autograd.grad(inner, ps, create_graph=True)
        adapted = [p - 0.1 * g for p, g in zip(ps, grads)]
        outer = F.mse_loss(net(t64(lib, xq), *adapted), t64(lib, yq))
        return [outer] + list(lib.autograd.grad(outer, ps))
    both(program)


@needs_torch
def test_dropout_double_backward_follows_the_mask():
    """dropout's gradient is the upstream gradient times the drawn mask (scaled): its own
    gradient wrt the upstream one is the same mask; the input gets none, as PyTorch."""
    def program(lib):
        lib.manual_seed(0)
        x = t64(lib, np.linspace(1.0, 2.0, 6), requires_grad=True)
        y = lib.nn.functional.dropout(x, 0.5, training=True)
        mask = (y != 0).double() * 2
        v = t64(lib, np.arange(6.0), requires_grad=True)
        g, = lib.autograd.grad(y, x, v, create_graph=True)
        gv, gx = lib.autograd.grad((g * g).sum(), [v, x], allow_unused=True)
        return [g - v * mask, gv - 2 * v * mask * mask, gx]
    both(program)

