"""PyTorch's shrink activations, RReLU, margin losses, bilinear, pdist and gumbel_softmax
against PyTorch: values, gradients (kinks included), errors (type and message), the
legacy ``size_average``/``reduce`` flags, modules (signatures, reprs, state_dicts) and
vmap, including vmap of the gradient for the ops written as composites (the registry
sweeps of test_func cover only ops with their own derivative).

The registry sweeps (test_op_registry, test_vmap, test_func) already run every op's
samples through forward-vs-torch, gradcheck, gradgradcheck and the vmap checks."""
import inspect
import warnings

import numpy as np
import pytest

import microtensor as mt
import microtensor.nn as nn
import microtensor.nn.functional as F
from test_activation import pair, to_np   # the shared oracle helpers
from microtensor.autograd import gradgradcheck

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")
TF = torch.nn.functional



def close(ours, theirs, rtol=1e-10, atol=1e-12):
    np.testing.assert_allclose(to_np(ours), theirs.detach().numpy(), rtol=rtol, atol=atol)


def raises_like_torch(ours, theirs, match=None):
    """Both calls raise, the same exception type, with ``match`` in our message (default:
    torch's message)."""
    with pytest.raises(Exception) as expected:
        theirs()
    with pytest.raises(type(expected.value)) as got:
        ours()
    assert (match or str(expected.value)) in str(got.value)


def same_signature(ours, theirs):
    assert inspect.signature(ours) == inspect.signature(theirs).replace(
        parameters=[p.replace(annotation=inspect.Parameter.empty)
                    for p in inspect.signature(theirs).parameters.values()],
        return_annotation=inspect.Signature.empty)


# --------------------------------------------------------------------------- shrinks

SHRINK_POINTS = [-3.0, -1.0, -0.5, -0.25, -1e-9, 0.0, 1e-9, 0.25, 0.5, 1.0, 3.0]


@pytest.mark.parametrize("name", ["hardshrink", "softshrink"])
@pytest.mark.parametrize("lambd", [0.5, 1.0, 0.0])
def test_shrink_values_and_subgradients_match_torch(name, lambd):
    x, tx = pair(SHRINK_POINTS, requires_grad=True)
    y, ty = getattr(F, name)(x, lambd), getattr(TF, name)(tx, lambd)
    close(y, ty, rtol=0, atol=0)
    assert y.grad_fn.name() == type(ty.grad_fn).__name__
    (g,) = mt.autograd.grad((y * y).sum(), [x], create_graph=True)
    (tg,) = torch.autograd.grad((ty * ty).sum(), [tx], create_graph=True)
    close(g, tg, rtol=0, atol=0)        # at +-lambd too: the subgradient PyTorch picks
    (gg,) = mt.autograd.grad(g.sum(), [x])
    (tgg,) = torch.autograd.grad(tg.sum(), [tx])
    close(gg, tgg)
    x32, tx32 = pair(SHRINK_POINTS, np.float32)
    close(getattr(F, name)(x32, lambd), getattr(TF, name)(tx32, lambd), rtol=0, atol=0)


def test_shrinks_keep_nan_and_sign_of_zero():
    x, tx = pair([np.nan, -0.25, 0.25])
    for name in ("hardshrink", "softshrink"):
        ours, theirs = to_np(getattr(F, name)(x)), getattr(TF, name)(tx).numpy()
        np.testing.assert_array_equal(ours, theirs)
        np.testing.assert_array_equal(np.signbit(ours), np.signbit(theirs))


def test_shrinks_in_float16_and_with_out():
    values = np.linspace(-2, 2, 9)
    for name in ("hardshrink", "softshrink"):
        ours = getattr(F, name)(mt.tensor(values).half(), 0.3)
        theirs = getattr(TF, name)(torch.tensor(values).half(), 0.3)
        assert ours.dtype == mt.float16
        np.testing.assert_array_equal(to_np(ours), theirs.numpy())
    out = mt.empty(9)
    assert mt.hardshrink(mt.tensor(values, dtype=mt.float32), 0.5, out=out) is out
    close(out, torch.hardshrink(torch.tensor(values, dtype=torch.float32), 0.5))


def test_hardshrink_is_a_function_and_a_method():
    x, tx = pair([-1.0, 0.2, 0.7])
    close(mt.hardshrink(x, 0.3), torch.hardshrink(tx, 0.3))
    close(x.hardshrink(lambd=0.6), tx.hardshrink(lambd=0.6))
    assert not hasattr(mt.Tensor, "softshrink") and not hasattr(torch.Tensor, "softshrink")


def test_shrink_errors_match_torch():
    x, tx = pair([1.0, -2.0], np.float32)
    raises_like_torch(lambda: F.softshrink(x, -1.0), lambda: TF.softshrink(tx, -1.0))
    xd, txd = pair([1.0, -2.0])
    raises_like_torch(lambda: F.softshrink(xd, -0.5), lambda: TF.softshrink(txd, -0.5))
    raises_like_torch(lambda: F.softshrink(mt.arange(3)), lambda: TF.softshrink(torch.arange(3)))
    raises_like_torch(lambda: F.hardshrink(mt.arange(3)), lambda: TF.hardshrink(torch.arange(3)))
    # a negative lambd is allowed by hardshrink: nothing is zeroed
    close(F.hardshrink(x, -1.0), TF.hardshrink(tx, -1.0))


def test_shrink_modules_match_torch():
    for name in ("Hardshrink", "Softshrink"):
        same_signature(getattr(nn, name).__init__, getattr(torch.nn, name).__init__)
        for args in ((), (0.3,)):
            ours, theirs = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
            assert repr(ours) == repr(theirs)
            x, tx = pair([-1.0, -0.4, 0.1, 0.45, 2.0])
            close(ours(x), theirs(tx))


# --------------------------------------------------------------------------- rrelu

RRELU_POINTS = [-4.0, -1.0, -1e-9, 0.0, 1e-9, 0.5, 3.0]


@pytest.mark.parametrize("bounds", [(1.0 / 8, 1.0 / 3), (0.1, 0.6), (0.3, 0.3)])
def test_rrelu_in_evaluation_is_leaky_relu_with_the_mean_slope(bounds):
    x, tx = pair(RRELU_POINTS, requires_grad=True)
    y, ty = F.rrelu(x, *bounds), TF.rrelu(tx, *bounds)
    close(y, ty)
    assert y.grad_fn.name() == type(ty.grad_fn).__name__ == "RreluWithNoiseBackward0"
    (g,) = mt.autograd.grad(y.sum(), [x])
    (tg,) = torch.autograd.grad(ty.sum(), [tx])
    close(g, tg)                        # at 0 too: the slope, as PyTorch's
    close(mt.rrelu(x, *bounds), torch.rrelu(tx, *bounds))


def test_rrelu_in_training_draws_a_slope_per_negative_element():
    lower, upper = 0.1, 0.4
    x = mt.tensor(np.linspace(-3, 3, 4001), requires_grad=True)
    y = F.rrelu(x, lower, upper, training=True)
    xs, ys = to_np(x), to_np(y)
    positive = xs > 0
    np.testing.assert_array_equal(ys[positive], xs[positive])
    slopes = ys[~positive & (xs != 0)] / xs[~positive & (xs != 0)]
    assert slopes.min() >= lower and slopes.max() < upper
    assert len(np.unique(slopes)) > 1900                    # one draw per element
    assert abs(slopes.mean() - (lower + upper) / 2) < 0.01  # uniform: mean 0.25, sd 0.0019
    # the gradient is the slope drawn (1 where positive), as PyTorch's
    (g,) = mt.autograd.grad(y.sum(), [x])
    np.testing.assert_allclose(to_np(g)[~positive & (xs != 0)], slopes, rtol=1e-12)
    np.testing.assert_array_equal(to_np(g)[positive], 1.0)
    assert y.grad_fn.name() == "RreluWithNoiseBackward0"
    # torch's draws follow the same law
    ty = TF.rrelu(torch.tensor(xs), lower, upper, training=True).numpy()
    torch_slopes = ty[~positive & (xs != 0)] / xs[~positive & (xs != 0)]
    assert torch_slopes.min() >= lower and torch_slopes.max() < upper


def test_rrelu_generator_makes_draws_reproducible():
    x = mt.tensor([-1.0, -2.0, -3.0, 4.0])
    first = mt.rrelu(x, training=True, generator=mt.Generator().manual_seed(3))
    second = mt.rrelu(x, training=True, generator=mt.Generator().manual_seed(3))
    mt.testing.assert_close(first, second)
    assert not mt.equal(first, mt.rrelu(x, training=True, generator=mt.Generator().manual_seed(4)))


def test_rrelu_inplace_writes_self_and_differentiates():
    leaf = mt.tensor([-2.0, -1.0, 0.5, 3.0], requires_grad=True)
    y = leaf * 1.0
    out = F.rrelu(y, training=True, inplace=True)
    assert out is y and y.grad_fn.name() == "RreluWithNoiseBackward0"
    (g,) = mt.autograd.grad(out.sum(), [leaf])
    np.testing.assert_allclose(to_np(g)[:2], to_np(out)[:2] / np.array([-2.0, -1.0]))
    np.testing.assert_array_equal(to_np(g)[2:], 1.0)
    x, tx = pair([-2.0, 0.0, 1.0])
    assert F.rrelu_(x, 0.2, 0.4) is x
    TF.rrelu_(tx, 0.2, 0.4)
    close(x, tx)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        F.rrelu(mt.ones(2, requires_grad=True), inplace=True)


def test_rrelu_errors_match_torch():
    x, tx = pair([1.0, -2.0])
    for training in (False, True):
        raises_like_torch(lambda: F.rrelu(x, 0.5, 0.1, training),
                          lambda: TF.rrelu(tx, 0.5, 0.1, training))
        raises_like_torch(lambda: F.rrelu(mt.arange(3), training=training),
                          lambda: TF.rrelu(torch.arange(3), training=training))
    before = to_np(x)
    with pytest.raises(RuntimeError):
        F.rrelu_(x, 0.5, 0.1, True)
    np.testing.assert_array_equal(to_np(x), before)     # a refused call changes nothing


def test_rrelu_module_follows_training_mode():
    same_signature(nn.RReLU.__init__, torch.nn.RReLU.__init__)
    for args in ((), (0.1, 0.3, True)):
        assert repr(nn.RReLU(*args)) == repr(torch.nn.RReLU(*args))
    module = nn.RReLU(0.1, 0.3)
    x, tx = pair([-1.0] * 50 + [2.0])
    trained = to_np(module(x))
    assert len(np.unique(trained[:50])) > 40
    module.eval()
    close(module(x), torch.nn.RReLU(0.1, 0.3).eval()(tx))


def test_rrelu_under_vmap():
    x = -mt.ones(3, 5, dtype=mt.float64)
    with pytest.raises(RuntimeError, match="randomness"):
        mt.vmap(lambda t: F.rrelu(t, training=True))(x)
    different = to_np(mt.vmap(lambda t: F.rrelu(t, training=True), randomness="different")(x))
    assert not np.allclose(different[0], different[1])
    same = to_np(mt.vmap(lambda t: F.rrelu(t, training=True), randomness="same")(x))
    np.testing.assert_array_equal(same[0], same[1])
    assert (-same >= 1 / 8).all() and (-same < 1 / 3).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # the per-sample loop would warn
        ev = mt.vmap(lambda t: F.rrelu(t, 0.2, 0.4))(x)
    np.testing.assert_allclose(to_np(ev), -0.3)


# --------------------------------------------------------------------------- margin losses

def _data(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "x34": rng.standard_normal((3, 4)), "x5": rng.standard_normal(5),
        "x234": rng.standard_normal((2, 3, 4)), "x": rng.standard_normal(()),
        "signs34": np.where(rng.standard_normal((3, 4)) > 0, 1.0, -1.0),
        "signs31": np.array([[1.0], [-1.0], [-1.0]]),
        "probs34": rng.uniform(0, 1, (3, 4)), "probs234": rng.uniform(0, 1, (2, 3, 4)),
        "w4": rng.uniform(0.5, 2, 4), "w5": rng.uniform(0.5, 2, 5),
        "y3": np.array([1, 0, 3]), "y0": np.array(2), "y1": np.array([4]),
        "labels34": np.array([[3, 0, -1, 1], [0, 1, 2, 3], [1, -1, 2, 2]]),
        "labels4": np.array([2, 2, -1, 0]), "labels5": np.array([-1, 0, 1, 2, 3]),
        "a34": rng.standard_normal((3, 4)), "b34": rng.standard_normal((3, 4)),
        "a5": rng.standard_normal(5), "b5": rng.standard_normal(5),
    }


# (loss name, its tensor arguments by name in _data, keyword arguments)
LOSS_CASES = [
    ("soft_margin_loss", ("x34", "signs34"), {}),
    ("soft_margin_loss", ("x34", "signs31"), {"reduction": "none"}),
    ("soft_margin_loss", ("x5", "x5"), {"reduction": "sum"}),
    ("soft_margin_loss", ("x", "x"), {}),
    ("multilabel_soft_margin_loss", ("x34", "probs34"), {}),
    ("multilabel_soft_margin_loss", ("x34", "probs34"), {"weight": "w4", "reduction": "none"}),
    ("multilabel_soft_margin_loss", ("x234", "probs234"), {"reduction": "sum"}),
    ("multilabel_soft_margin_loss", ("x5", "x5"), {"weight": "w5"}),
    ("hinge_embedding_loss", ("x34", "signs34"), {}),
    ("hinge_embedding_loss", ("x34", "signs31"), {"margin": 0.3, "reduction": "none"}),
    ("hinge_embedding_loss", ("x34", "probs34"), {"margin": 2.0, "reduction": "sum"}),
    ("hinge_embedding_loss", ("x", "signs31"), {}),
    ("multi_margin_loss", ("x34", "y3"), {}),
    ("multi_margin_loss", ("x34", "y3"), {"p": 2, "margin": 0.5, "reduction": "none"}),
    ("multi_margin_loss", ("x34", "y3"), {"margin": 2.0, "weight": "w4", "reduction": "sum"}),
    ("multi_margin_loss", ("x34", "y3"), {"p": 2, "weight": "w4"}),
    ("multi_margin_loss", ("x5", "y0"), {"reduction": "none"}),
    ("multi_margin_loss", ("x5", "y1"), {"reduction": "none"}),
    ("multilabel_margin_loss", ("x34", "labels34"), {}),
    ("multilabel_margin_loss", ("x34", "labels34"), {"reduction": "none"}),
    ("multilabel_margin_loss", ("a34", "labels34"), {"reduction": "sum"}),
    ("multilabel_margin_loss", ("w4", "labels4"), {}),
    ("multilabel_margin_loss", ("b5", "labels5"), {"reduction": "none"}),
    ("triplet_margin_with_distance_loss", ("x34", "a34", "b34"), {}),
    ("triplet_margin_with_distance_loss", ("x34", "a34", "b34"),
     {"swap": True, "margin": 0.5, "reduction": "none"}),
    ("triplet_margin_with_distance_loss", ("a5", "b5", "x5"),
     {"distance_function": "l1", "reduction": "sum"}),
]


# PyTorch's aten losses refuse a target (and weight) that requires grad; its Python ones
# differentiate every float argument, as microtensor's do
EVERY_ARGUMENT_DIFFERENTIABLE = {"multilabel_soft_margin_loss", "hinge_embedding_loss",
                                 "triplet_margin_with_distance_loss"}


def _loss_call(case, lib):
    """The loss of ``case`` called with ``lib``'s float64 tensors, the first (every float
    one where torch differentiates them) requiring grad: (result, those tensors)."""
    name, tensor_names, kwargs = case
    data = _data()
    make = mt.tensor if lib is mt else torch.tensor
    functional = F if lib is mt else TF
    leaves = []

    def tensor(key):
        t = make(data[key])
        if (not leaves or name in EVERY_ARGUMENT_DIFFERENTIABLE) and \
                t.dtype == (mt.float64 if lib is mt else torch.float64):
            t.requires_grad_()
            leaves.append(t)
        return t
    args = [tensor(key) for key in tensor_names]
    kw = dict(kwargs)
    if "weight" in kw:
        kw["weight"] = tensor(kw["weight"])
    if kw.get("distance_function") == "l1":
        kw["distance_function"] = lambda a, b: (a - b).abs().sum(-1)
    return getattr(functional, name)(*args, **kw), leaves


def _loss_id(case):
    return case[0] + "-" + "-".join(case[1]) + "".join(f"-{k}={v}" for k, v in case[2].items())


@pytest.mark.parametrize("case", LOSS_CASES, ids=[_loss_id(c) for c in LOSS_CASES])
def test_loss_values_and_gradients_match_torch(case):
    ours, leaves = _loss_call(case, mt)
    theirs, torch_leaves = _loss_call(case, torch)
    assert tuple(ours.shape) == tuple(theirs.shape)
    close(ours, theirs)
    weights = np.random.default_rng(1).standard_normal(tuple(theirs.shape))
    got = mt.autograd.grad((ours * mt.tensor(weights)).sum(), leaves, allow_unused=True,
                           materialize_grads=True)
    expected = torch.autograd.grad((theirs * torch.tensor(weights)).sum(), torch_leaves,
                                   allow_unused=True, materialize_grads=True)
    for g, e in zip(got, expected):
        close(g, e)


def test_soft_margin_loss_is_finite_where_torch_overflows():
    x = mt.tensor([100.0, -3.0, 30.0], dtype=mt.float32, requires_grad=True)
    y = mt.tensor([-1.0, 1.0, -1.0])
    loss = F.soft_margin_loss(x, y, reduction="none")
    np.testing.assert_allclose(to_np(loss), [100.0, np.log1p(np.exp(3.0)), 30.0], rtol=1e-6)
    # float64, where PyTorch's log(1 + exp(.)) does not overflow, gives the same
    close(F.soft_margin_loss(x.double(), y.double(), reduction="none"),
          TF.soft_margin_loss(torch.tensor([100.0, -3.0, 30.0], dtype=torch.float64),
                              torch.tensor([-1.0, 1.0, -1.0], dtype=torch.float64),
                              reduction="none"))
    (g,) = mt.autograd.grad(loss.sum(), [x])
    # d/dx log(1 + exp(-y x)) = -y sigmoid(-y x)
    np.testing.assert_allclose(to_np(g), [1.0, -1 / (1 + np.exp(-3.0)), 1.0], rtol=1e-6)


def test_multilabel_margin_loss_counts_targets_up_to_the_first_minus_one():
    x, tx = pair([[0.1, 0.2, 0.4, 0.8]])
    for labels in ([[1, 1, -1, 1]], [[1, -1, 0, 0]], [[3, 0, -1, 1]], [[0, 1, 2, 3]],
                   [[-1, 0, 1, 2]]):
        close(F.multilabel_margin_loss(x, mt.tensor(labels), reduction="none"),
              TF.multilabel_margin_loss(tx, torch.tensor(labels), reduction="none"))
    # a class listed twice counts twice (PyTorch's kernel loops over the listed entries)
    twice = F.multilabel_margin_loss(x, mt.tensor([[1, 1, -1, 1]]), reduction="none")
    once = F.multilabel_margin_loss(x, mt.tensor([[1, -1, 0, 0]]), reduction="none")
    np.testing.assert_allclose(to_np(twice), 2 * to_np(once))


def test_margin_losses_at_their_kinks_take_torch_subgradients():
    # margin violations exactly 0: no gradient, as PyTorch's kernels (z > 0)
    rows = [[0.0, 1.0, 0.0], [2.0, 1.0, 1.0]]
    x, tx = pair(rows, requires_grad=True)
    for ours, theirs in [
            (F.multi_margin_loss(x, mt.tensor([1, 0])), TF.multi_margin_loss(tx, torch.tensor([1, 0]))),
            (F.multilabel_margin_loss(x, mt.tensor([[1, -1, 0], [0, -1, 0]])),
             TF.multilabel_margin_loss(tx, torch.tensor([[1, -1, 0], [0, -1, 0]]))),
            (F.hinge_embedding_loss(x, -mt.ones(2, 3)), TF.hinge_embedding_loss(tx, -torch.ones(2, 3)))]:
        close(ours, theirs)
        (g,) = mt.autograd.grad(ours, [x])
        (tg,) = torch.autograd.grad(theirs, [tx])
        close(g, tg)


def test_loss_double_backward():
    for case in LOSS_CASES:
        name, tensor_names, kwargs = case
        if "distance_function" in kwargs:
            continue
        data = _data()
        args = [mt.tensor(data[k]) for k in tensor_names]
        weight = mt.tensor(data[kwargs["weight"]]) if "weight" in kwargs else None
        kw = {k: v for k, v in kwargs.items() if k != "weight"}
        if weight is not None:
            kw["weight"] = weight
        x = args[0].requires_grad_()
        assert gradgradcheck(lambda t: getattr(F, name)(t, *args[1:], **kw), (x,)), case


def test_legacy_reduction_flags_match_torch():
    x, tx = pair(_data()["x34"])
    labels = _data()["labels34"]
    calls = [("soft_margin_loss", (x, mt.tensor(_data()["signs34"])),
              (tx, torch.tensor(_data()["signs34"]))),
             ("hinge_embedding_loss", (x, mt.tensor(_data()["signs34"])),
              (tx, torch.tensor(_data()["signs34"]))),
             ("multilabel_soft_margin_loss", (x, mt.tensor(_data()["probs34"])),
              (tx, torch.tensor(_data()["probs34"]))),
             ("multi_margin_loss", (x, mt.tensor([1, 0, 3])), (tx, torch.tensor([1, 0, 3]))),
             ("multilabel_margin_loss", (x, mt.tensor(labels)), (tx, torch.tensor(labels)))]
    for name, ours, theirs in calls:
        for flags in ({"size_average": False}, {"reduce": False}, {"size_average": True},
                      {"size_average": False, "reduce": True}):
            with pytest.warns(UserWarning, match="size_average and reduce"):
                got = getattr(F, name)(*ours, **flags, reduction="none")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                close(got, getattr(TF, name)(*theirs, **flags, reduction="none"))


def _loss_errors():
    x, tx = pair(_data()["x34"])
    y, ty = mt.tensor([1, 0, 3]), torch.tensor([1, 0, 3])
    labels, tlabels = mt.tensor(_data()["labels34"]), torch.tensor(_data()["labels34"])
    signs, tsigns = pair(_data()["signs34"])
    return [
        (lambda: F.soft_margin_loss(x, signs, reduction="bad"),
         lambda: TF.soft_margin_loss(tx, tsigns, reduction="bad")),
        (lambda: F.soft_margin_loss(x[:, :1], signs), lambda: TF.soft_margin_loss(tx[:, :1], tsigns)),
        (lambda: F.multilabel_soft_margin_loss(x, signs, reduction="bad"),
         lambda: TF.multilabel_soft_margin_loss(tx, tsigns, reduction="bad")),
        (lambda: F.multilabel_soft_margin_loss(x[0, 0], signs[0, 0]),
         lambda: TF.multilabel_soft_margin_loss(tx[0, 0], tsigns[0, 0])),
        (lambda: F.soft_margin_loss(x, signs[0, :3]), lambda: TF.soft_margin_loss(tx, tsigns[0, :3])),
        (lambda: F.hinge_embedding_loss(x, signs[0, :3]),
         lambda: TF.hinge_embedding_loss(tx, tsigns[0, :3])),
        (lambda: F.hinge_embedding_loss(x, signs, reduction="bad"),
         lambda: TF.hinge_embedding_loss(tx, tsigns, reduction="bad")),
        (lambda: F.multi_margin_loss(x, y, p=3), lambda: TF.multi_margin_loss(tx, ty, p=3)),
        (lambda: F.multi_margin_loss(x, y, weight=mt.ones(2, 2, dtype=mt.float64)),
         lambda: TF.multi_margin_loss(tx, ty, weight=torch.ones(2, 2, dtype=torch.float64))),
        (lambda: F.multi_margin_loss(x, y, weight=mt.ones(3, dtype=mt.float64)),
         lambda: TF.multi_margin_loss(tx, ty, weight=torch.ones(3, dtype=torch.float64))),
        (lambda: F.multi_margin_loss(x, y, weight=mt.ones(4)),
         lambda: TF.multi_margin_loss(tx, ty, weight=torch.ones(4))),
        (lambda: F.multi_margin_loss(x, y.float()), lambda: TF.multi_margin_loss(tx, ty.float())),
        (lambda: F.multi_margin_loss(x, y.int()), lambda: TF.multi_margin_loss(tx, ty.int())),
        (lambda: F.multi_margin_loss(x, y[:2]), lambda: TF.multi_margin_loss(tx, ty[:2])),
        (lambda: F.multi_margin_loss(x, y.view(3, 1)), lambda: TF.multi_margin_loss(tx, ty.view(3, 1))),
        (lambda: F.multi_margin_loss(x[0], y[:2]), lambda: TF.multi_margin_loss(tx[0], ty[:2])),
        (lambda: F.multi_margin_loss(x, mt.tensor([1, 4, 0])),
         lambda: TF.multi_margin_loss(tx, torch.tensor([1, 4, 0]))),
        (lambda: F.multi_margin_loss(x, mt.tensor([1, -1, 0])),
         lambda: TF.multi_margin_loss(tx, torch.tensor([1, -1, 0]))),
        (lambda: F.multi_margin_loss(mt.ones(2, 3, 4), y[:2]),
         lambda: TF.multi_margin_loss(torch.ones(2, 3, 4), ty[:2])),
        (lambda: F.multi_margin_loss(mt.ones(3, 0), y), lambda: TF.multi_margin_loss(torch.ones(3, 0), ty)),
        (lambda: F.multi_margin_loss(x.half(), y), lambda: TF.multi_margin_loss(tx.half(), ty)),
        (lambda: F.multi_margin_loss(x, y, reduction="bad"),
         lambda: TF.multi_margin_loss(tx, ty, reduction="bad")),
        (lambda: F.multilabel_margin_loss(x, labels.float()),
         lambda: TF.multilabel_margin_loss(tx, tlabels.float())),
        (lambda: F.multilabel_margin_loss(x, labels[:2]),
         lambda: TF.multilabel_margin_loss(tx, tlabels[:2])),
        (lambda: F.multilabel_margin_loss(x, mt.full((3, 4), 4)),
         lambda: TF.multilabel_margin_loss(tx, torch.full((3, 4), 4))),
        (lambda: F.multilabel_margin_loss(x, mt.full((3, 4), -2)),
         lambda: TF.multilabel_margin_loss(tx, torch.full((3, 4), -2))),
        (lambda: F.multilabel_margin_loss(mt.ones(2, 3, 4), mt.zeros(2, 3, 4, dtype=mt.int64)),
         lambda: TF.multilabel_margin_loss(torch.ones(2, 3, 4), torch.zeros(2, 3, 4).long())),
        (lambda: F.multilabel_margin_loss(x.half(), labels),
         lambda: TF.multilabel_margin_loss(tx.half(), tlabels)),
        (lambda: F.triplet_margin_with_distance_loss(x, x, x, margin=0),
         lambda: TF.triplet_margin_with_distance_loss(tx, tx, tx, margin=0)),
        (lambda: F.triplet_margin_with_distance_loss(x, x, x[0]),
         lambda: TF.triplet_margin_with_distance_loss(tx, tx, tx[0])),
        (lambda: F.triplet_margin_with_distance_loss(x, x, x, reduction="bad"),
         lambda: TF.triplet_margin_with_distance_loss(tx, tx, tx, reduction="bad")),
    ]


@pytest.mark.parametrize("index", range(len(_loss_errors())))
def test_loss_errors_match_torch(index):
    ours, theirs = _loss_errors()[index]
    raises_like_torch(ours, theirs)


LOSS_MODULES = [
    ("SoftMarginLoss", (), {}, ("x34", "signs34")),
    ("SoftMarginLoss", (), {"reduction": "sum"}, ("x34", "signs34")),
    ("MultiLabelSoftMarginLoss", (), {"weight": "w4"}, ("x34", "probs34")),
    ("HingeEmbeddingLoss", (0.5,), {"reduction": "none"}, ("x34", "signs34")),
    ("MultiMarginLoss", (2, 0.7), {"weight": "w4"}, ("x34", "y3")),
    ("MultiLabelMarginLoss", (), {"reduction": "none"}, ("x34", "labels34")),
    ("TripletMarginWithDistanceLoss", (), {"margin": 0.5, "swap": True}, ("x34", "a34", "b34")),
]


@pytest.mark.parametrize("case", LOSS_MODULES, ids=[c[0] for c in LOSS_MODULES])
def test_loss_modules_match_torch(case):
    name, args, kwargs, inputs = case
    ours_cls, theirs_cls = getattr(nn, name), getattr(torch.nn, name)
    same_signature(ours_cls.__init__, theirs_cls.__init__)
    data = _data()
    ours_kw = {k: mt.tensor(data[v]) if k == "weight" else v for k, v in kwargs.items()}
    theirs_kw = {k: torch.tensor(data[v]) if k == "weight" else v for k, v in kwargs.items()}
    ours, theirs = ours_cls(*args, **ours_kw), theirs_cls(*args, **theirs_kw)
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: mt.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    close(ours(*[mt.tensor(data[k]) for k in inputs]),
          theirs(*[torch.tensor(data[k]) for k in inputs]))


def test_loss_module_checks_match_torch():
    raises_like_torch(lambda: nn.MultiMarginLoss(p=3), lambda: torch.nn.MultiMarginLoss(p=3))
    raises_like_torch(lambda: nn.MultiMarginLoss(weight=mt.ones(2, 2)),
                      lambda: torch.nn.MultiMarginLoss(weight=torch.ones(2, 2)))
    raises_like_torch(lambda: nn.TripletMarginWithDistanceLoss(margin=0),
                      lambda: torch.nn.TripletMarginWithDistanceLoss(margin=0))
    with pytest.warns(UserWarning):
        assert nn.SoftMarginLoss(size_average=False).reduction == "sum"
    same_signature(nn.PairwiseDistance.__init__, torch.nn.PairwiseDistance.__init__)
    assert repr(nn.PairwiseDistance(1.0, keepdim=True)) == repr(
        torch.nn.PairwiseDistance(1.0, keepdim=True))
    x, tx = pair(_data()["a34"])
    z, tz = pair(_data()["b34"])
    close(nn.PairwiseDistance(1.0, keepdim=True)(x, z),
          torch.nn.PairwiseDistance(1.0, keepdim=True)(tx, tz))


def test_functional_signatures_match_torch():
    for name in ("hardshrink", "softshrink", "rrelu", "soft_margin_loss",
                 "multilabel_soft_margin_loss", "hinge_embedding_loss", "multi_margin_loss",
                 "multilabel_margin_loss", "triplet_margin_with_distance_loss"):
        theirs = getattr(TF, name)
        try:
            inspect.signature(theirs)
        except ValueError:          # a C function (hardshrink, softshrink): no signature
            continue
        same_signature(getattr(F, name), theirs)


# --------------------------------------------------------------------------- vmap of the losses

def _per_sample_loss_cases():
    """(name, batched tensor arguments (the first per sample, the rest shared or per
    sample), kwargs), for vmap and vmap(grad) against a loop."""
    for case in LOSS_CASES:
        name, tensor_names, kwargs = case
        if kwargs.get("reduction", "mean") == "none" or "distance_function" in kwargs:
            continue
        yield case


def _stacked(value, size=3, scale=True):
    rows = [value * (1 - 0.1 * i) if scale else value for i in range(size)]
    return mt.tensor(np.stack(rows))


@pytest.mark.parametrize("case", list(_per_sample_loss_cases()),
                         ids=[_loss_id(c) for c in _per_sample_loss_cases()])
def test_vmap_and_vmap_grad_of_losses_match_loop(case):
    name, tensor_names, kwargs = case
    data = _data()
    fn = getattr(F, name)
    kw = {k: v for k, v in kwargs.items() if k != "weight"}
    shared = [mt.tensor(data[k]) for k in tensor_names[1:]]
    if "weight" in kwargs:
        shared.append(mt.tensor(data[kwargs["weight"]]))

    def loss(x, *rest):
        *others, weight = rest if "weight" in kwargs else (*rest, None)
        extra = {"weight": weight} if "weight" in kwargs else {}
        return fn(x, *others, **kw, **extra)
    batched = _stacked(data[tensor_names[0]])
    # every other argument batched too (integer targets: the same per sample)
    per_sample = [_stacked(to_np(t), scale=t.dtype.is_floating_point) for t in shared]
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # the per-sample loop would warn
        for others, dims in ((shared, (0,) + (None,) * len(shared)),
                             (per_sample, (0,) * (1 + len(shared)))):
            got = mt.vmap(loss, in_dims=dims)(batched, *others)
            grads = mt.vmap(mt.func.grad(loss), in_dims=dims)(batched, *others)
            for i in range(3):
                row_others = [o[i] if d == 0 else o for o, d in zip(others, dims[1:])]
                leaf = batched[i].detach().clone().requires_grad_()
                expected = loss(leaf, *row_others)
                np.testing.assert_allclose(to_np(got[i]), to_np(expected), rtol=1e-12)
                (g,) = mt.autograd.grad(expected, [leaf])
                np.testing.assert_allclose(to_np(grads[i]), to_np(g), rtol=1e-10, atol=1e-14)


# --------------------------------------------------------------------------- bilinear

def test_bilinear_matches_torch_with_batch_dims_and_gradients():
    rng = np.random.default_rng(2)
    for shape1, shape2 in (((2, 3), (2, 4)), ((3,), (4,)), ((2, 5, 3), (2, 5, 4))):
        arrays = [rng.standard_normal(shape1), rng.standard_normal(shape2),
                  rng.standard_normal((5, 3, 4)), rng.standard_normal(5)]
        for with_bias in (True, False):
            ours = [mt.tensor(a, requires_grad=True) for a in arrays[:3 + with_bias]]
            theirs = [torch.tensor(a, requires_grad=True) for a in arrays[:3 + with_bias]]
            y, ty = F.bilinear(*ours), TF.bilinear(*theirs)
            close(y, ty)
            close(mt.bilinear(*ours), torch.bilinear(*theirs))
            w = rng.standard_normal(tuple(ty.shape))
            for g, e in zip(mt.autograd.grad((y * mt.tensor(w)).sum(), ours),
                            torch.autograd.grad((ty * torch.tensor(w)).sum(), theirs)):
                close(g, e)


def test_bilinear_errors_match_torch():
    def both(shapes, dtype=np.float32, bias_dtype=None):
        arrays = [np.ones(s, dtype) for s in shapes]
        if bias_dtype is not None:
            arrays[-1] = arrays[-1].astype(bias_dtype)
        return [mt.tensor(a) for a in arrays], [torch.tensor(a) for a in arrays]
    for shapes, bias_dtype in [
            (((3,), (2, 4), (5, 3, 4), (5,)), None),
            (((2, 3), (3, 4), (5, 3, 4), (5,)), None),
            (((2, 3), (2, 3), (5, 3, 4), (5,)), None),
            (((2, 2), (2, 4), (5, 3, 4), (5,)), None),
            (((2, 3), (2, 4), (3, 4), (5,)), None),
            (((2, 3), (2, 4), (5, 3, 4), (3,)), None),
            (((2, 3), (2, 4), (5, 3, 4), (1,)), None),
            (((2, 3), (2, 4), (5, 3, 4), (5,)), np.float64),
            (((), (), (5, 3, 4), (5,)), None)]:
        ours, theirs = both(shapes, bias_dtype=bias_dtype)
        raises_like_torch(lambda: F.bilinear(*ours), lambda: TF.bilinear(*theirs))


def test_bilinear_module_matches_torch():
    same_signature(nn.Bilinear.__init__, torch.nn.Bilinear.__init__)
    for bias in (True, False):
        ours, theirs = nn.Bilinear(3, 4, 5, bias=bias), torch.nn.Bilinear(3, 4, 5, bias=bias)
        assert repr(ours) == repr(theirs)
        assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == \
            [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
        ours.load_state_dict({k: mt.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
        x1, tx1 = pair(np.random.default_rng(3).standard_normal((2, 3)), np.float32)
        x2, tx2 = pair(np.random.default_rng(4).standard_normal((2, 4)), np.float32)
        close(ours(x1, x2), theirs(tx1, tx2), rtol=1e-5, atol=1e-6)
    # PyTorch's initialisation: U(-1/sqrt(in1), 1/sqrt(in1)) for weight and bias
    big = nn.Bilinear(4, 2, 3000, dtype=mt.float64)
    for p in (big.weight, big.bias):
        values = to_np(p)
        assert values.min() >= -0.5 and values.max() <= 0.5
        assert values.min() < -0.49 and values.max() > 0.49
    assert nn.Bilinear(2, 3, 4, dtype=mt.float64).weight.dtype == mt.float64


# --------------------------------------------------------------------------- pdist

@pytest.mark.parametrize("p", [2.0, 1.0, 0.0, float("inf"), 3.0, 0.5, 1.5])
def test_pdist_values_and_gradients_match_torch(p):
    rows = [[1.0, 2.0], [1.0, 2.0], [0.0, 1.0], [0.0, 3.0], [2.0, -1.0]]   # a zero distance,
    x, tx = pair(rows, requires_grad=True)                               # ties for inf
    y, ty = F.pdist(x, p), TF.pdist(tx, p)
    close(y, ty)
    assert y.grad_fn is not None and y.requires_grad
    w = np.arange(1.0, 1.0 + ty.shape[0])
    (g,) = mt.autograd.grad((y * mt.tensor(w)).sum(), [x])
    (tg,) = torch.autograd.grad((ty * torch.tensor(w)).sum(), [tx])
    close(g, tg)
    x32, tx32 = pair(np.random.default_rng(5).standard_normal((6, 4)), np.float32)
    close(F.pdist(x32, p), TF.pdist(tx32, p), rtol=1e-5, atol=1e-6)
    close(mt.pdist(x32.t(), p), torch.pdist(tx32.t(), p), rtol=1e-5, atol=1e-6)


def test_pdist_double_backward_and_empty_inputs():
    x = mt.tensor(np.random.default_rng(6).standard_normal((4, 3)), requires_grad=True)
    for p in (2.0, 1.5, 3.0):
        assert gradgradcheck(lambda t: F.pdist(t, p), (x,))
    for shape in ((1, 3), (0, 3), (4, 0)):
        close(F.pdist(mt.ones(shape)), TF.pdist(torch.ones(shape)))


def test_pdist_errors_match_torch():
    for ours, theirs in [
            (lambda: F.pdist(mt.ones(2, 4, 3)), lambda: TF.pdist(torch.ones(2, 4, 3))),
            (lambda: F.pdist(mt.ones(4)), lambda: TF.pdist(torch.ones(4))),
            (lambda: F.pdist(mt.ones(4, 3), -1), lambda: TF.pdist(torch.ones(4, 3), -1)),
            (lambda: F.pdist(mt.ones(4, 3, dtype=mt.int64)),
             lambda: TF.pdist(torch.ones(4, 3, dtype=torch.int64))),
            (lambda: F.pdist(mt.ones(4, 3).half()), lambda: TF.pdist(torch.ones(4, 3).half()))]:
        raises_like_torch(ours, theirs)


def test_pdist_and_bilinear_vmap_and_vmap_grad_match_loop():
    rng = np.random.default_rng(7)
    batched = mt.tensor(rng.standard_normal((3, 4, 2)))
    weight, x2 = mt.tensor(rng.standard_normal((5, 2, 3))), mt.tensor(rng.standard_normal(3))
    functions = [lambda x: F.pdist(x, 1.5), lambda x: F.pdist(x, float("inf")),
                 lambda x: F.bilinear(x, x2.expand(4, 3), weight)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # the per-sample loop would warn
        for fn in functions:
            got = mt.vmap(fn)(batched)
            grads = mt.vmap(mt.func.grad(lambda x: fn(x).square().sum()))(batched)
            # the inner batch dim last: each rule moves it to the front
            nested = mt.vmap(mt.vmap(fn, in_dims=-1))(batched.unsqueeze(-1).expand(3, 4, 2, 2))
            for i in range(3):
                leaf = batched[i].detach().clone().requires_grad_()
                expected = fn(leaf)
                np.testing.assert_allclose(to_np(got[i]), to_np(expected), rtol=1e-12)
                np.testing.assert_allclose(to_np(nested[i, 0]), to_np(expected), rtol=1e-12)
                (g,) = mt.autograd.grad(expected.square().sum(), [leaf])
                np.testing.assert_allclose(to_np(grads[i]), to_np(g), rtol=1e-10)


# --------------------------------------------------------------------------- gumbel_softmax

def test_gumbel_softmax_samples_the_gumbel_softmax_distribution():
    logits = mt.tensor(np.log([0.1, 0.2, 0.7]))
    many = logits.expand(20000, 3)
    hard = to_np(F.gumbel_softmax(many, tau=0.5, hard=True))
    assert set(np.unique(hard)) == {0.0, 1.0} and (hard.sum(-1) == 1).all()
    # the argmax of logits + Gumbel noise is a draw from softmax(logits)
    np.testing.assert_allclose(hard.mean(0), [0.1, 0.2, 0.7], atol=0.015)
    soft = to_np(F.gumbel_softmax(many, tau=2.0))
    np.testing.assert_allclose(soft.sum(-1), 1.0)
    assert (soft > 0).all() and soft.std(0).min() > 0.01
    torch_soft = TF.gumbel_softmax(torch.tensor(np.log([0.1, 0.2, 0.7])).expand(20000, 3),
                                   tau=2.0).numpy()
    np.testing.assert_allclose(soft.mean(0), torch_soft.mean(0), atol=0.01)


def test_gumbel_softmax_dim_and_straight_through_gradient():
    same_signature(F.gumbel_softmax, TF.gumbel_softmax)
    x = mt.tensor(np.random.default_rng(8).standard_normal((4, 3)), requires_grad=True)
    hard = F.gumbel_softmax(x, hard=True, dim=0)
    np.testing.assert_array_equal(to_np(hard).sum(0), 1.0)
    state = mt.get_rng_state()
    weights = mt.tensor(np.arange(12.0).reshape(4, 3))
    (g_hard,) = mt.autograd.grad((F.gumbel_softmax(x, 0.7, True) * weights).sum(), [x])
    mt.set_rng_state(state)
    soft = F.gumbel_softmax(x, 0.7, False)
    (g_soft,) = mt.autograd.grad((soft * weights).sum(), [x])
    np.testing.assert_allclose(to_np(g_hard), to_np(g_soft), rtol=1e-12)   # straight through
    with pytest.warns(UserWarning, match="`eps` parameter is deprecated"):
        F.gumbel_softmax(x, eps=1e-5)


def test_gumbel_softmax_under_vmap_follows_randomness():
    x = mt.zeros(3, 5)
    with pytest.raises(RuntimeError, match="randomness"):
        mt.vmap(F.gumbel_softmax)(x)
    different = to_np(mt.vmap(F.gumbel_softmax, randomness="different")(x))
    assert not np.allclose(different[0], different[1])
    same = to_np(mt.vmap(F.gumbel_softmax, randomness="same")(x))
    np.testing.assert_array_equal(same[0], same[1])
    np.testing.assert_allclose(same.sum(-1), 1.0, rtol=1e-6)


# --------------------------------------------------------------------------- 0-d size/stride

def test_size_and_stride_of_a_0d_tensor_raise_torch_index_error():
    # (they read past the empty sizes tuple before: a crash, not an error)
    for dim in (0, -1, 3):
        for method in ("size", "stride"):
            raises_like_torch(lambda: getattr(mt.ones(()), method)(dim),
                              lambda: getattr(torch.ones(()), method)(dim))
    assert mt.ones(()).size() == () and mt.ones(2, 3).size(-1) == 3
