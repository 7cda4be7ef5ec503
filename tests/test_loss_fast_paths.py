"""The C fast paths of ``log_softmax``, ``nll_loss`` and their backward agree with the
ops' general paths.

``nnkernels.softmax_rows``, ``log_softmax_backward_rows``, ``nll_loss_rows`` and
``nll_loss_backward_rows`` serve float32/float64 CPU tensors (any strides for nll_loss's
input and targets, contiguous rows for log_softmax) and return None for every other call,
which the op's general path then computes.  Each case here runs the op twice, once with
the fast paths switched off (the module's ``nnkernels`` replaced by one whose fast paths
serve nothing), and compares values, shapes, dtypes and errors; the fast paths are also
checked to serve (or refuse) the calls they should.
"""
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import microtensor as mt
from microtensor.vmap import vmap
from microtensor._C import nnkernels
from microtensor.ops import loss as loss_ops
from microtensor.ops import reduction as reduction_ops

F = mt.nn.functional
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
FAST = ("softmax_rows", "log_softmax_backward_rows", "nll_loss_rows",
        "nll_loss_backward_rows")


def _general_only():
    """``nnkernels`` with the tensor fast paths serving nothing."""
    module = types.SimpleNamespace(**{k: getattr(nnkernels, k) for k in dir(nnkernels)
                                      if not k.startswith("__")})
    for name in FAST:
        setattr(module, name, lambda *args: None)
    return module


def general(fn):
    """``fn()`` with the fast paths off."""
    modules = (loss_ops, reduction_ops)
    saved = [m.nnkernels for m in modules]
    try:
        for m in modules:
            m.nnkernels = _general_only()
        return fn()
    finally:
        for m, kept in zip(modules, saved):
            m.nnkernels = kept


def _same(a, b, exact=True):
    assert a.shape == b.shape and a.dtype == b.dtype
    if exact:
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    else:
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)


def _layout(t, layout):
    """``t``'s values in a layout: contiguous, a transposed copy's transpose (strided), or
    every other column of a wider tensor."""
    if layout == "contiguous" or t.dim() < 2:
        return t
    if layout == "transposed":
        return t.mT.contiguous().mT
    wide = mt.zeros(t.shape[:-1] + (2 * t.shape[-1],), dtype=t.dtype)
    wide[..., ::2] = t
    return wide[..., ::2]


@st.composite
def nll_cases(draw):
    dtype = draw(st.sampled_from([mt.float32, mt.float64]))
    classes = draw(st.integers(1, 5))
    rows = draw(st.sampled_from([None, 0, 1, 3, 7]))   # None: one (C,) sample, 0-d target
    seed = draw(st.integers(0, 2 ** 16))
    r = np.random.default_rng(seed)
    n = 1 if rows is None else rows
    ignore_index = draw(st.sampled_from([-100, 0, classes - 1]))
    targets = r.integers(0, classes, n)
    if n and draw(st.booleans()):
        targets[r.integers(0, n)] = ignore_index
    weighted = draw(st.sampled_from(["no", "contiguous", "strided"]))
    weight = None
    if weighted != "no":
        weight = mt.tensor(r.uniform(0.5, 2.0, 2 * classes), dtype=dtype)
        weight = weight[::2] if weighted == "strided" else weight[classes:]   # offset
    values = mt.tensor(r.standard_normal((n, classes)), dtype=dtype).log_softmax(-1)
    if rows is None:
        values, target = values[0], mt.tensor(int(targets[0]))
    else:
        target = mt.tensor(targets)
        if n > 1 and draw(st.booleans()):    # strided targets
            target = mt.tensor(np.repeat(targets, 2))[::2]
    layout = draw(st.sampled_from(["contiguous", "transposed", "every other"]))
    reduction = draw(st.sampled_from(["none", "mean", "sum"]))
    return _layout(values, layout), target, weight, reduction, ignore_index


@SETTINGS
@given(nll_cases())
def test_nll_loss_fast_path_matches_general(case):
    values, target, weight, reduction, ignore_index = case

    def forward():
        return F.nll_loss(values, target, weight, ignore_index=ignore_index,
                          reduction=reduction)
    fast = forward()
    # the fast path serves every one of these calls
    assert nnkernels.nll_loss_rows(values, target, weight, reduction, ignore_index) \
        is not None
    # the reductions add in double on the fast path, in the dtype on the general one
    _same(fast, general(forward), exact=reduction == "none")


@SETTINGS
@given(nll_cases())
def test_nll_loss_backward_fast_path_matches_general(case):
    values, target, weight, reduction, ignore_index = case
    shape = tuple(values.shape)
    grad = mt.randn(tuple(target.shape) if reduction == "none" else (), dtype=values.dtype)
    backward = loss_ops.nll_loss_backward

    def run():
        return backward(grad, shape, target, weight, reduction, ignore_index)
    fast = run()
    assert nnkernels.nll_loss_backward_rows(grad, shape, target, weight, reduction,
                                            ignore_index) is not None
    _same(fast, general(run), exact=reduction != "mean")


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_loss_out_of_bounds_target_is_the_same_error(reduction):
    values = mt.randn(3, 4).log_softmax(1)
    for bad in (4, -1, -7):
        target = mt.tensor([0, bad, 1])
        messages = []
        for run in (lambda f: f(), general):
            with pytest.raises(IndexError, match=f"Target {bad} is out of bounds") as info:
                run(lambda: F.nll_loss(values, target, reduction=reduction))
            messages.append(str(info.value))
            with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
                run(lambda: loss_ops.nll_loss_backward(
                    mt.ones(3) if reduction == "none" else mt.tensor(1.0), (3, 4), target,
                    None, reduction, -100))
        assert messages[0] == messages[1]


def test_nll_loss_checks_come_first():
    """PyTorch's checks, made before the fast path: its error types and messages."""
    values = mt.randn(3, 4).log_softmax(1)
    with pytest.raises(ValueError, match="is not a valid value for reduction"):
        F.nll_loss(values, mt.tensor([0, 1, 2]), reduction="avg")
    with pytest.raises(RuntimeError, match="expected target dtype to be Long"):
        F.nll_loss(values, mt.tensor([0, 1, 2], dtype=mt.int32))
    with pytest.raises(ValueError, match=r"Expected input batch_size \(3\) to match target"):
        F.nll_loss(values, mt.tensor([0, 1]))
    with pytest.raises(RuntimeError, match="weight tensor should be defined"):
        F.nll_loss(values, mt.tensor([0, 1, 2]), weight=mt.ones(3))
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
        F.nll_loss(values, mt.tensor([0, 1, 2]), weight=mt.ones(4, dtype=mt.float64))


def test_nll_loss_every_target_ignored_is_nan_and_zero_gradient():
    values = mt.randn(2, 3).log_softmax(1).requires_grad_()
    target = mt.tensor([-100, -100])
    loss = F.nll_loss(values, target)
    assert np.isnan(loss.item())
    loss.backward()
    assert (values.grad.numpy() == 0).all()


def test_nll_loss_fast_paths_refuse_what_they_do_not_serve():
    values = mt.randn(3, 4).log_softmax(1)
    target = mt.tensor([0, 1, 2])
    half = values.to(mt.float16)
    assert nnkernels.nll_loss_rows(half, target, None, "mean", -100) is None
    assert nnkernels.nll_loss_rows(values, target, mt.ones(4, dtype=mt.float64), "mean",
                                   -100) is None
    assert nnkernels.nll_loss_rows(values.reshape(1, 3, 4), target, None, "mean", -100) \
        is None
    # shapes the op's checks refuse are never read
    assert nnkernels.nll_loss_rows(values, target[:2], None, "mean", -100) is None
    assert nnkernels.nll_loss_rows(values, target, mt.ones(3), "mean", -100) is None
    assert nnkernels.nll_loss_rows(values[0], target, None, "mean", -100) is None
    assert nnkernels.nll_loss_backward_rows(mt.tensor(1.0), (2, 4), target, None, "mean",
                                            -100) is None
    assert nnkernels.nll_loss_backward_rows(mt.ones(2), (3, 4), target, None, "none",
                                            -100) is None
    ignored = mt.tensor([-100, -100, -100])
    for shape in ((3, -1), (3, 4.0)):     # sizes the general path refuses
        assert nnkernels.nll_loss_backward_rows(mt.tensor(1.0), shape, ignored, None,
                                                "mean", -100) is None
        with pytest.raises((ValueError, TypeError)):
            loss_ops.nll_loss_backward(mt.tensor(1.0), shape, ignored, None, "mean", -100)
    # and the op still computes the half-precision call, on its general path
    expected = F.nll_loss(values, target).item()
    assert F.nll_loss(half, target).item() == pytest.approx(expected, rel=1e-2)


@pytest.mark.parametrize("dtype", [mt.float32, mt.float64])
@pytest.mark.parametrize("shape,dim", [((3, 5), 1), ((3, 5), -1), ((2, 3, 4), 2), ((6,), 0),
                                       ((0, 4), 1), ((3, 0), -1), ((3, 5), 0)])
def test_log_softmax_fast_path_matches_general(dtype, shape, dim):
    x = mt.randn(*shape, dtype=dtype)
    _same(x.log_softmax(dim), general(lambda: x.log_softmax(dim)))
    _same(x.softmax(dim), general(lambda: x.softmax(dim)))
    y = x.log_softmax(dim)
    g = mt.randn(*shape, dtype=dtype)
    backward = reduction_ops._log_softmax_backward_data
    _same(backward(g, y, dim), general(lambda: backward(g, y, dim)))
    served = nnkernels.softmax_rows(x, dim, True) is not None
    assert served == (dim in (len(shape) - 1, -1))
    assert (nnkernels.log_softmax_backward_rows(g, y, dim) is not None) == served


def test_log_softmax_fast_paths_refuse_other_layouts_and_dtypes():
    x = mt.randn(4, 3)
    strided = x.t()
    assert nnkernels.softmax_rows(strided, 1, True) is None
    _same(strided.log_softmax(1), general(lambda: strided.log_softmax(1)))
    assert nnkernels.softmax_rows(x.to(mt.float16), 1, True) is None
    assert nnkernels.softmax_rows(x, True, True) is None       # a bool is not a dim
    assert nnkernels.softmax_rows(mt.tensor(1.0), 0, True) is None
    y = x.log_softmax(1)
    assert nnkernels.log_softmax_backward_rows(x, y.to(mt.float64), 1) is None
    assert nnkernels.log_softmax_backward_rows(x, y[:2], 1) is None
    with pytest.raises(RuntimeError, match="must have one shape and dtype"):
        reduction_ops._log_softmax_backward_data(x, y[:2], 1)
    with pytest.raises(IndexError):
        x.log_softmax(2)
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        mt.tensor([1, 2]).log_softmax(0)


# --------------------------------------------------------------------------- batching rules

def _loop(fn, in_dims, *args):
    """``fn`` per sample, stacked: what ``vmap`` must give."""
    size = next(a.shape[d] for a, d in zip(args, in_dims) if d is not None)
    rows = [fn(*[a if d is None else a.select(d, i) for a, d in zip(args, in_dims)])
            for i in range(size)]
    return mt.stack(rows)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("layout", ["both in front", "logits at dim 1", "targets unbatched",
                                    "weighted", "rows per sample"])
def test_nll_loss_rule_matches_a_loop(reduction, layout):
    """The rule's shortcut (logits and targets batched in front, no class weights) and its
    general path, against one call per sample; sample 1 has every target ignored."""
    r = np.random.default_rng(3)
    rows = 3 if layout == "rows per sample" else 1
    logits = mt.tensor(r.standard_normal((4, rows, 5)), dtype=mt.float64)
    targets = mt.tensor(r.integers(0, 5, (4, rows)))
    targets[1] = -100
    weight = mt.tensor(r.uniform(0.5, 2, 5), dtype=mt.float64) if layout == "weighted" \
        else None
    in_dims = (0, 0)
    if layout == "logits at dim 1":
        logits, in_dims = logits.movedim(0, 1).contiguous(), (1, 0)
    if layout == "targets unbatched":
        targets, in_dims = targets[0], (0, None)

    def loss(x, t):
        return F.nll_loss(x.log_softmax(-1), t, weight, reduction=reduction)
    got = vmap(loss, in_dims=in_dims)(logits, targets)
    expected = _loop(loss, in_dims, logits, targets)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12, equal_nan=True)
    if reduction == "mean" and layout != "targets unbatched":
        assert np.isnan(got.numpy()[1])


def test_nll_loss_rule_checks_per_sample_shapes():
    logits, targets = mt.randn(4, 3, 5), mt.randint(0, 5, (4, 2))
    with pytest.raises(ValueError, match=r"Expected input batch_size \(3\) to match target "
                                         r"batch_size \(2\)"):
        vmap(F.nll_loss)(logits, targets)
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        vmap(F.nll_loss)(logits, mt.full((4, 3), 7))


@pytest.mark.parametrize("name,dim", [("log_softmax", 1), ("log_softmax", -1),
                                      ("softmax", 0), ("sum", 1), ("cumsum", -2),
                                      ("logsumexp", 0), ("argmax", 1)])
@pytest.mark.parametrize("bdim", [0, 1, 2])
def test_reduction_rule_with_a_positional_dim_matches_a_loop(name, dim, bdim):
    x = mt.randn(3, 4, 5, dtype=mt.float64)

    def fn(s):
        return getattr(s, name)(dim)
    got = vmap(fn, in_dims=bdim)(x)
    np.testing.assert_allclose(got.numpy(), _loop(fn, (bdim,), x).numpy(), rtol=1e-12)


def test_reduction_rule_positional_dim_errors_and_other_parameters():
    x = mt.randn(3, 4)
    with pytest.raises(IndexError, match="Dimension out of range"):
        vmap(lambda s: s.log_softmax(1))(x)
    # a per-sample scalar takes the general path (its size-1 dim)
    got = vmap(lambda s: s.log_softmax(0))(mt.randn(3, dtype=mt.float64))
    np.testing.assert_array_equal(got.numpy(), np.zeros(3))
    # ``norm``'s second parameter is ``p``, not ``dim``: bound by name as before
    v = mt.randn(3, 4, dtype=mt.float64)
    np.testing.assert_allclose(vmap(lambda s: mt.norm(s, 1))(v).numpy(),
                               np.abs(v.numpy()).sum(1), rtol=1e-12)


def test_log_softmax_fast_paths_read_views_at_an_offset():
    big = mt.randn(3, 4, 5, dtype=mt.float64)
    x, g = big[1], big[2]                           # contiguous, at an offset
    assert nnkernels.softmax_rows(x, -1, True) is not None
    _same(x.log_softmax(-1), general(lambda: x.log_softmax(-1)))
    y = x.log_softmax(-1)
    backward = reduction_ops._log_softmax_backward_data
    assert nnkernels.log_softmax_backward_rows(g, y, 1) is not None
    _same(backward(g, y, 1), general(lambda: backward(g, y, 1)))
    expected = g.numpy() - np.exp(y.numpy()) * g.numpy().sum(1, keepdims=True)
    np.testing.assert_allclose(backward(g, y, 1).numpy(), expected, rtol=1e-12)
