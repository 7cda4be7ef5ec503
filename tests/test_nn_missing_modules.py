"""nn layers and functions ported from PyTorch as thin layers over existing ops: channel
and alpha dropout, padding modules, shuffles, softmin, distances, fold/unfold, local
response norm.  Each is checked against PyTorch: signatures and defaults, values, dtypes,
strides, errors and warnings, reprs and state_dicts; the random ones by their statistics,
by exact values against a mask drawn the same way, and under vmap's randomness modes.

The registry sweeps (test_op_registry, test_vmap, test_func) run the new composite ops'
samples through forward-vs-torch, gradcheck, gradgradcheck and vmap-vs-loop."""
import contextlib
import inspect
import math
import re
import warnings

import numpy as np
import pytest

import microtensor as mt
import microtensor.nn.functional as F
from microtensor import nn
from microtensor.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")
TF = torch.nn.functional

ALPHA = 1.7580993408473766     # SELU's negative saturation, as PyTorch's alpha dropout


def to_np(t):
    return np.array(t.detach()._array())


def pair(shape, dtype=np.float64, seed=0):
    values = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return mt.tensor(values), torch.tensor(values)


def messages(fn):
    """The texts of the warnings ``fn()`` gives, and its exception (type, text) or None."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn()
            error = None
        except Exception as e:   # noqa: BLE001 -- compared with PyTorch's
            error = (type(e), str(e))
    return [str(w.message) for w in caught], error


def assert_same_complaints(ours, theirs):
    our_warnings, our_error = messages(ours)
    their_warnings, their_error = messages(theirs)
    assert our_warnings == their_warnings
    assert (our_error is None) == (their_error is None), (our_error, their_error)
    if their_error:
        assert our_error[0] is their_error[0]
        assert our_error[1] == their_error[1]


@contextlib.contextmanager
def no_fallback():
    """A context in which vmap's per-sample loop fallback fails the test."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*falling back to slow")
        yield


# --------------------------------------------------------------------------- dropouts

FEATURE_DROPOUTS = [("dropout1d", 3), ("dropout2d", 4), ("dropout3d", 5)]


def _channel_mask(shape, p, dtype=mt.float64):
    """The noise feature dropout draws: one uniform per (sample, channel), kept when >= p."""
    noise_shape = tuple(shape[:2]) + (1,) * (len(shape) - 2)
    return (mt.rand(noise_shape, dtype=dtype) >= p).to(dtype)


@pytest.mark.parametrize("name, rank", FEATURE_DROPOUTS)
def test_channel_dropout_values_are_the_mask_drawn_the_same_way(name, rank):
    shape = (3, 4) + (2,) * (rank - 2)
    x, _ = pair(shape)
    p = 0.4
    mt.manual_seed(7)
    y = getattr(F, name)(x, p)
    mt.manual_seed(7)
    keep = _channel_mask(shape, p)
    np.testing.assert_array_equal(to_np(y), to_np(x * (keep / (1 - p))))


@pytest.mark.parametrize("name, rank", FEATURE_DROPOUTS)
def test_channel_dropout_statistics(name, rank):
    """Whole channels dropped, a fraction p of them, the rest scaled by 1 / (1 - p)."""
    p = 0.3
    shape = (100, 60) + (3,) * (rank - 2)
    y = to_np(getattr(F, name)(mt.ones(shape, dtype=mt.float64), p))
    per_channel = y.reshape(100, 60, -1)
    assert (per_channel == per_channel[..., :1]).all()           # constant per channel
    assert set(np.unique(per_channel)) <= {0.0, 1 / (1 - p)}
    dropped = (per_channel[..., 0] == 0).mean()
    assert abs(dropped - p) < 0.03                                # 6000 channels: sd 0.006


def test_channel_dropout_unbatched_inputs():
    """dropout1d of (C, L) and dropout3d of (C, D, H, W): one draw per channel (a batch of
    one); dropout2d of (N, C, L) keeps PyTorch's reading as batched 1-D input."""
    p = 0.5
    for fn, shape in ((F.dropout1d, (6, 5)), (F.dropout3d, (6, 2, 2, 2))):
        x = mt.ones(shape, dtype=mt.float64)
        mt.manual_seed(3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = fn(x, p)
        mt.manual_seed(3)
        keep = _channel_mask((1,) + shape, p)[0]
        np.testing.assert_array_equal(to_np(y), to_np(x * (keep / (1 - p))))
    x = mt.ones(4, 6, 5, dtype=mt.float64)
    mt.manual_seed(3)
    with pytest.warns(UserWarning, match="assuming that channel-wise 1D dropout"):
        y = F.dropout2d(x, p)
    mt.manual_seed(3)
    np.testing.assert_array_equal(to_np(y), to_np(x * (_channel_mask((4, 6, 5), p) / 0.5)))


def _alpha_expected(x, keep, p):
    a = 1 / math.sqrt((ALPHA * ALPHA * p + 1) * (1 - p))
    return x * (keep * a) + ((keep - 1) * (ALPHA * a) + ALPHA * a * p)


@pytest.mark.parametrize("feature", [False, True])
def test_alpha_dropout_values_are_the_mask_drawn_the_same_way(feature):
    shape = (3, 4, 2, 2)
    x, _ = pair(shape)
    p = 0.25
    mt.manual_seed(11)
    y = (F.feature_alpha_dropout if feature else F.alpha_dropout)(x, p, training=True)
    mt.manual_seed(11)
    keep = _channel_mask(shape, p) if feature else (mt.rand(shape, dtype=mt.float64) >= p
                                                    ).to(mt.float64)
    np.testing.assert_allclose(to_np(y), to_np(_alpha_expected(x, keep, p)), rtol=1e-15)


@pytest.mark.parametrize("name", ["alpha_dropout", "feature_alpha_dropout"])
def test_alpha_dropout_keeps_mean_and_variance_like_torch(name):
    """On standard normal input both libraries give mean ~0 and variance ~1; dropped
    elements (or channels) all take the one value PyTorch gives them."""
    p = 0.2
    x, tx = pair((400, 50, 5), seed=1)
    y, ty = to_np(getattr(F, name)(x, p, True)), getattr(TF, name)(tx, p, True).numpy()
    for values in (y, ty):
        assert abs(values.mean()) < 0.05 and abs(values.var() - 1) < 0.05
    a = 1 / math.sqrt((ALPHA * ALPHA * p + 1) * (1 - p))
    dropped_value = -ALPHA * a + ALPHA * a * p
    ours, theirs = np.isclose(y, dropped_value), np.isclose(ty, dropped_value)
    assert abs(ours.mean() - p) < 0.03 and abs(theirs.mean() - p) < 0.03


@pytest.mark.parametrize("fn", [F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout,
                                F.feature_alpha_dropout])
def test_dropout_identity_cases(fn):
    """Not training, or p = 0: the input itself (batched input); p = 1: zeros, with no
    alpha shift (PyTorch multiplies by a zero)."""
    x = mt.randn(2, 3, 4, 2, 2)[..., 0] if fn is F.dropout2d else \
        mt.randn(2, 3, 4) if fn is F.dropout1d else mt.randn(2, 3, 4, 2, 2)
    assert fn(x, 0.5, False) is x
    assert fn(x, 0.0, True) is x
    zeros = fn(x, 1.0, True)
    assert zeros.shape == x.shape and not to_np(zeros).any()


@pytest.mark.parametrize("module, torch_module, shape", [
    (nn.Dropout1d, torch.nn.Dropout1d, (2, 3, 4)),
    (nn.Dropout2d, torch.nn.Dropout2d, (2, 3, 4, 4)),
    (nn.Dropout3d, torch.nn.Dropout3d, (2, 3, 2, 2, 2)),
    (nn.AlphaDropout, torch.nn.AlphaDropout, (2, 3)),
    (nn.FeatureAlphaDropout, torch.nn.FeatureAlphaDropout, (2, 3, 4))])
def test_dropout_modules(module, torch_module, shape):
    for args in [(), (0.2,), (0.3, True)]:
        m, tm = module(*args), torch_module(*args)
        assert repr(m) == repr(tm)
        assert list(m.state_dict()) == list(tm.state_dict()) == []
    m = module(0.5)
    x = mt.ones(shape, dtype=mt.float64)
    assert not mt.equal(m(x), x)
    m.eval()
    assert mt.equal(m(x), x)
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, "
                                         "but got 1.5"):
        module(1.5)


def test_dropout_in_place():
    x = mt.randn(3, 4, 5, dtype=mt.float64)
    before = x.clone()
    mt.manual_seed(5)
    assert F.dropout1d(x, 0.5, inplace=True) is x
    mt.manual_seed(5)
    np.testing.assert_array_equal(to_np(x), to_np(before * (_channel_mask((3, 4, 5), 0.5) * 2)))
    unbatched = mt.randn(4, 5)
    assert F.dropout1d(unbatched, 0.5, inplace=True) is unbatched
    assert F.alpha_dropout(unbatched, 0.5, True, inplace=True) is unbatched
    leaf = mt.randn(3, 4, 5, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        F.dropout2d(leaf, 0.5, inplace=True)
    # a non-leaf, in place: the gradient is the mask's
    w = mt.randn(2, 3, 4, dtype=mt.float64, requires_grad=True)
    h = w * 1.0
    mt.manual_seed(9)
    F.dropout1d(h, 0.5, inplace=True)
    h.sum().backward()
    mt.manual_seed(9)
    np.testing.assert_array_equal(to_np(w.grad),
                                  to_np((_channel_mask((2, 3, 4), 0.5) * 2).expand(2, 3, 4)))


@pytest.mark.parametrize("fn", [F.dropout2d, F.feature_alpha_dropout, F.alpha_dropout])
def test_dropout_gradients(fn):
    """The mask drawn again for each call of the function (same seed): gradcheck and
    gradgradcheck see a fixed linear map."""
    x = mt.randn(2, 3, 2, 2, dtype=mt.float64, requires_grad=True)

    def f(t):
        mt.manual_seed(21)
        return fn(t, 0.4, True)
    assert gradcheck(f, (x,)) and gradgradcheck(f, (x,))
    f(x).backward(mt.ones(2, 3, 2, 2, dtype=mt.float64))
    mt.manual_seed(21)
    slope = to_np(f(mt.ones(2, 3, 2, 2, dtype=mt.float64)) - f(mt.zeros(2, 3, 2, 2,
                                                                           dtype=mt.float64)))
    np.testing.assert_allclose(to_np(x.grad), slope, rtol=1e-12)


def test_dropout_checks_match_torch():
    x, tx = pair((2, 3, 4, 5))
    cases = [("dropout1d", (4,)), ("dropout1d", (2, 3, 4, 5)), ("dropout2d", (3,)),
             ("dropout2d", (2, 3)), ("dropout2d", (2, 3, 4)), ("dropout2d", (2, 3, 4, 5, 6)),
             ("dropout3d", ()), ("dropout3d", (2, 3)), ("dropout3d", (2, 3, 4)),
             ("feature_alpha_dropout", (3,))]
    for name, shape in cases:
        x, tx = pair(shape)
        kwargs = {"training": True} if "alpha" in name else {}
        assert_same_complaints(lambda: getattr(F, name)(x, 0.5, **kwargs),
                               lambda: getattr(TF, name)(tx, 0.5, **kwargs))
    for name in ("dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                 "feature_alpha_dropout"):
        x, tx = pair((2, 3, 4, 5))
        assert_same_complaints(lambda: getattr(F, name)(x, 1.5), lambda: getattr(TF, name)(
            tx, 1.5))
    for name in ("feature_dropout", "alpha_dropout", "feature_alpha_dropout"):
        x, tx = pair((2, 3))
        assert_same_complaints(lambda: getattr(mt, name)(x, -0.5, True),
                               lambda: getattr(torch, name)(tx, -0.5, True))
        ints = np.arange(6).reshape(2, 3)
        assert_same_complaints(lambda: getattr(mt, name)(mt.tensor(ints), 0.5, True),
                               lambda: getattr(torch, name)(torch.tensor(ints), 0.5, True))


@pytest.mark.parametrize("fn", [F.dropout2d, F.alpha_dropout, F.feature_alpha_dropout])
def test_dropout_result_layout_and_dtype_match_torch(fn):
    for dtype in (np.float32, np.float64):
        x, tx = pair((2, 3, 4, 5), dtype=dtype)
        for make in (lambda t: t, lambda t: t.contiguous(memory_format=mt.channels_last)
                     if isinstance(t, mt.Tensor) else t.contiguous(
                         memory_format=torch.channels_last), lambda t: t.transpose(1, 3)):
            ours, theirs = fn(make(x), 0.5, True), getattr(TF, fn.__name__)(make(tx), 0.5, True)
            assert ours.stride() == theirs.stride()
            assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]


def test_dropout_under_vmap_follows_randomness():
    """'different': each sample its own channel mask (the batch's noise drawn at once);
    'same': one mask for every sample; 'error': refused, as PyTorch refuses it."""
    size, p = 4, 0.5
    x = mt.ones(size, 2, 3, 5, 2, dtype=mt.float64)
    with no_fallback():
        mt.manual_seed(13)
        different = mt.vmap(lambda t: F.dropout2d(t, p), randomness="different")(x)
        mt.manual_seed(13)
        expected = (mt.rand(size, 2, 3, 1, 1, dtype=mt.float64) >= p).to(mt.float64) / (1 - p)
        np.testing.assert_array_equal(to_np(different), to_np(expected.expand(x.shape)))
        mt.manual_seed(13)
        same = mt.vmap(lambda t: F.alpha_dropout(t, p, True), randomness="same")(x)
        mt.manual_seed(13)
        keep = (mt.rand(2, 3, 5, 2, dtype=mt.float64) >= p).to(mt.float64)
        np.testing.assert_allclose(to_np(same), np.broadcast_to(
            to_np(_alpha_expected(x[0], keep, p)), x.shape), rtol=1e-15)
        # an unbatched input under 'different' still gets a draw per sample
        y = mt.vmap(lambda t: F.dropout1d(mt.ones(3, 50, dtype=mt.float64), p) + t * 0,
                    randomness="different")(mt.zeros(size))
        assert y.shape == (size, 3, 50) and not mt.equal(y[0], y[1])
        # not training: no draw, so even 'error' mode runs
        assert mt.equal(mt.vmap(lambda t: F.dropout2d(t, p, training=False))(x), x)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        mt.vmap(lambda t: F.dropout2d(t, p))(x)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        torch.vmap(lambda t: TF.dropout2d(t, p))(torch.ones(size, 2, 3, 5, 2))


# --------------------------------------------------------------------------- padding

PAD_KINDS = ["Zero", "Constant", "Reflection", "Replication", "Circular"]
PADDINGS = {1: [2, (1, 3), (0, 0)], 2: [1, (1, 0, 2, 1)], 3: [1, (1, 0, 0, 1, 1, 0)]}


def _pad_modules(kind, d, padding):
    name = f"{kind}Pad{d}d"
    args = (padding, 2.5) if kind == "Constant" else (padding,)
    return getattr(nn, name)(*args), getattr(torch.nn, name)(*args)


@pytest.mark.parametrize("kind", PAD_KINDS)
@pytest.mark.parametrize("d", [1, 2, 3])
def test_padding_modules_match_torch(kind, d):
    """Values, dtype and strides of batched and unbatched inputs, and the gradient."""
    for padding in PADDINGS[d]:
        m, tm = _pad_modules(kind, d, padding)
        assert repr(m) == repr(tm) and m.padding == tm.padding
        assert list(m.state_dict()) == list(tm.state_dict()) == []
        for batch in ((2, 3), (3,)):
            x, tx = pair(batch + (4, 3, 5)[:d])
            x.requires_grad_()
            tx.requires_grad_()
            y, ty = m(x), tm(tx)
            np.testing.assert_array_equal(to_np(y), ty.detach().numpy())
            assert y.stride() == ty.stride() and y.dtype == mt.float64
            g = np.random.default_rng(1).standard_normal(tuple(ty.shape))
            y.backward(mt.tensor(g))
            ty.backward(torch.tensor(g))
            np.testing.assert_allclose(to_np(x.grad), tx.grad.numpy(), rtol=1e-12)


def test_padding_module_checks_match_torch():
    cases = [("Circular", 1, 1, (4,)), ("Circular", 2, 1, (2, 3, 4, 5, 6)),
             ("Circular", 3, 1, (2, 3)), ("Reflection", 1, 3, (2, 3)),
             ("Reflection", 2, 1, (4, 5)), ("Replication", 3, 1, (2, 3, 4)),
             ("Circular", 1, 4, (2, 3)),
             ("Reflection", 1, (1, 2, 3), (2, 3, 4)), ("Constant", 2, (1, 2, 3), (2, 3, 4)),
             ("Zero", 3, 1, (2, 3))]
    for kind, d, padding, shape in cases:
        m, tm = _pad_modules(kind, d, padding)
        x, tx = pair(shape)
        assert_same_complaints(lambda: m(x), lambda: tm(tx))


def test_padding_modules_load_and_print_in_a_model():
    model = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(2, 3, 3), nn.ZeroPad2d((1, 0, 0, 1)))
    reference = torch.nn.Sequential(torch.nn.ReflectionPad2d(1), torch.nn.Conv2d(2, 3, 3),
                                    torch.nn.ZeroPad2d((1, 0, 0, 1))).double()
    assert repr(model) == repr(reference)
    model.load_state_dict({k: mt.tensor(v.detach().numpy())
                           for k, v in reference.state_dict().items()})
    x, tx = pair((2, 2, 5, 4))
    np.testing.assert_allclose(to_np(model.double()(x)), reference(tx).detach().numpy(),
                               rtol=1e-12)


# --------------------------------------------------------------------------- layouts

def _layouts(shape):
    """(name, make) pairs: the same values laid out contiguous, channels-last, transposed."""
    def channels_last(t):
        rank = t.dim()
        order = (0,) + tuple(range(2, rank)) + (1,)
        back = (0, rank - 1) + tuple(range(1, rank - 1))
        return t.permute(order).contiguous().permute(back)
    makes = [("contiguous", lambda t: t),
             ("transposed", lambda t: t.transpose(-1, -2).contiguous().transpose(-1, -2))]
    if len(shape) in (4, 5):
        makes.append(("channels_last", channels_last))
    return makes


def assert_matches(ours, theirs, rtol=1e-12):
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_allclose(to_np(ours), theirs.detach().numpy(), rtol=rtol, atol=1e-14)
    assert ours.stride() == theirs.stride(), (ours.stride(), theirs.stride())


def check_module(module, torch_module, *shapes, grad=True):
    """repr and state_dict keys, then values, dtype, strides and gradients on every layout
    of float64 inputs of ``shapes``."""
    assert repr(module) == repr(torch_module)
    assert list(module.state_dict()) == list(torch_module.state_dict())
    for name, make in _layouts(shapes[0]):
        inputs = [pair(shape, seed=i) for i, shape in enumerate(shapes)]
        ours = [make(x).detach().requires_grad_(grad) for x, _ in inputs]
        theirs = [make(t).detach().requires_grad_(grad) for _, t in inputs]
        try:
            ty = torch_module(*theirs)
        except RuntimeError as e:      # a layout PyTorch refuses (a view that cannot be)
            with pytest.raises(RuntimeError, match=re.escape(str(e))):
                module(*ours)
            continue
        y = module(*ours)
        assert_matches(y, ty)
        if grad:
            g = np.random.default_rng(5).standard_normal(tuple(ty.shape))
            y.backward(mt.tensor(g))
            ty.backward(torch.tensor(g))
            for a, b in zip(ours, theirs):
                np.testing.assert_allclose(to_np(a.grad), b.grad.numpy(), rtol=1e-10,
                                           atol=1e-12)


# --------------------------------------------------------------------------- reshaping modules

@pytest.mark.parametrize("name, args, shape", [
    ("PixelShuffle", (2,), (2, 8, 3, 4)), ("PixelShuffle", (3,), (9, 2, 2)),
    ("PixelUnshuffle", (2,), (2, 2, 4, 6)), ("PixelUnshuffle", (3,), (2, 6, 3)),
    ("ChannelShuffle", (3,), (2, 6, 3, 4)), ("ChannelShuffle", (2,), (2, 4, 3)),
    ("ChannelShuffle", (2,), (1, 4, 2, 3, 2)),
    ("Unfold", (2,), (2, 3, 4, 5)), ("Unfold", ((2, 3), 1, (1, 0), 2), (3, 5, 6)),
    ("Fold", ((4, 5), 2), (2, 12, 12)), ("Fold", ((3, 5), (2, 3), 1, 1, (1, 2)), (6, 12)),
    ("Softmax2d", (), (2, 3, 4, 5)), ("Softmax2d", (), (3, 4, 5)),
    ("Softmin", (1,), (2, 3, 4)), ("Softmin", (-1,), (3, 4))])
def test_modules_match_torch(name, args, shape):
    check_module(getattr(nn, name)(*args), getattr(torch.nn, name)(*args), shape)


@pytest.mark.parametrize("name, args", [("PairwiseDistance", ()),
                                        ("PairwiseDistance", (1.0, 1e-3, True)),
                                        ("PairwiseDistance", (3.0,)),
                                        ("CosineSimilarity", ()), ("CosineSimilarity", (0,))])
def test_distance_modules_match_torch(name, args):
    check_module(getattr(nn, name)(*args), getattr(torch.nn, name)(*args), (4, 5), (4, 5))
    check_module(getattr(nn, name)(*args), getattr(torch.nn, name)(*args), (4, 5), (1, 5))


def test_reshaping_module_checks_match_torch():
    cases = [("PixelShuffle", (2,), (2, 6, 3, 4)), ("PixelShuffle", (2,), (4, 3)),
             ("PixelUnshuffle", (2,), (2, 2, 3, 4)), ("ChannelShuffle", (4,), (2, 6, 3)),
             ("ChannelShuffle", (0,), (2, 6, 3)), ("ChannelShuffle", (2,), (2, 6)),
             ("Softmax2d", (), (3, 4)), ("Softmax2d", (), (1, 2, 3, 4, 5)),
             ("Unfold", (2,), (2, 3)), ("Unfold", (2,), (1, 2, 3, 4, 5)),
             ("Unfold", (2,), (0, 3, 4)), ("Unfold", (2,), (1, 0, 3, 4)),
             ("Fold", ((4, 5), 2), (2, 11, 12)), ("Fold", ((4, 5), 2), (2, 12, 11)),
             ("Fold", ((4, 5), 2), (12,)), ("Fold", ((4, 5), 2), (12, 0))]
    for name, args, shape in cases:
        x, tx = pair(shape)
        assert_same_complaints(lambda: getattr(nn, name)(*args)(x),
                               lambda: getattr(torch.nn, name)(*args)(tx))
    for fn in ("channel_shuffle", "native_channel_shuffle"):
        for groups, shape in ((4, (2, 6, 3)), (-1, (2, 6, 3)), (2, (6,))):
            x, tx = pair(shape)
            assert_same_complaints(lambda: getattr(F, fn)(x, groups),
                                   lambda: getattr(TF, fn)(tx, groups))


def test_fold_and_unfold_of_an_empty_batch():
    x, tx = pair((0, 2, 3, 4))
    assert_matches(nn.Unfold(2)(x), torch.nn.Unfold(2)(tx))
    x, tx = pair((0, 12, 12))
    assert_matches(nn.Fold((4, 5), 2)(x), torch.nn.Fold((4, 5), 2)(tx))


def test_channel_shuffle_of_empty_input_is_a_view():
    x = mt.randn(0, 6, 2)
    y = F.channel_shuffle(x, 3)
    assert y.shape == x.shape and y._base is x
    assert y.stride() == TF.channel_shuffle(torch.randn(0, 6, 2), 3).stride()


def test_softmin_dim_and_dtype():
    """dim=None takes PyTorch's legacy dim with its warning; dtype casts first."""
    for shape in ((), (4,), (2, 3), (2, 3, 4), (2, 3, 4, 5)):
        x, tx = pair(shape)
        with pytest.warns(UserWarning, match="Implicit dimension choice for softmin"):
            y = F.softmin(x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert_matches(y, TF.softmin(tx))
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmin") as caught:
        nn.Softmin()(mt.randn(2, 3))
    ints = np.arange(6).reshape(2, 3)
    for dtype, torch_dtype in ((mt.float64, torch.float64), (mt.float32, torch.float32)):
        assert_matches(F.softmin(mt.tensor(ints), 1, dtype=dtype),
                       TF.softmin(torch.tensor(ints), 1, dtype=torch_dtype), rtol=1e-6)
    x, tx = pair((3, 4))
    assert_matches(F.softmin(x, 0, dtype=mt.float32), TF.softmin(tx, 0, dtype=torch.float32),
                   rtol=1e-6)
    assert caught


def test_relu_in_place():
    x, tx = pair((3, 4))
    assert F.relu_(x) is x
    np.testing.assert_array_equal(to_np(x), TF.relu_(tx).numpy())
    with pytest.raises(RuntimeError, match="leaf"):
        F.relu_(mt.randn(3, requires_grad=True))


# --------------------------------------------------------------------------- local response norm

@pytest.mark.parametrize("args, shape", [((3,), (2, 5, 4)), ((2, 1e-2, 0.5, 2.0), (2, 4, 3, 2)),
                                         ((4, 0.1), (1, 6, 2, 2, 2)), ((5,), (3, 4, 2, 3)),
                                         ((1,), (2, 3, 2))])
def test_local_response_norm_matches_torch(args, shape):
    check_module(nn.LocalResponseNorm(*args), torch.nn.LocalResponseNorm(*args), shape)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 6])
def test_cross_map_lrn2d_values_match_torch(size):
    """PyTorch's window, with channel 0's square kept in every later channel's sum."""
    for channels in (1, 2, 3, 7):
        m, tm = nn.CrossMapLRN2d(size, 0.5, 0.75, 1.5), torch.nn.CrossMapLRN2d(size, 0.5,
                                                                            0.75, 1.5)
        assert repr(m) == repr(tm)
        x, tx = pair((2, channels, 3, 2), seed=channels)
        np.testing.assert_allclose(to_np(m(x)), tm(tx).numpy(), rtol=1e-12)


def test_cross_map_lrn2d_gradient():
    """The derivative of the results: PyTorch's hand-written backward agrees with it while
    the window covers every channel (it uses another window beyond that)."""
    for size, channels in ((2, 1), (4, 2), (5, 2), (6, 3)):
        x, tx = pair((2, channels, 2, 3))
        x.requires_grad_()
        tx.requires_grad_()
        g = np.random.default_rng(2).standard_normal((2, channels, 2, 3))
        nn.CrossMapLRN2d(size, 0.5)(x).backward(mt.tensor(g))
        torch.nn.CrossMapLRN2d(size, 0.5)(tx).backward(torch.tensor(g))
        np.testing.assert_allclose(to_np(x.grad), tx.grad.numpy(), rtol=1e-10)
    x = mt.randn(1, 7, 2, 2, dtype=mt.float64, requires_grad=True)
    assert gradcheck(lambda t: nn.CrossMapLRN2d(3, 0.5)(t), (x,))


def test_local_response_norm_checks_match_torch():
    for shape in ((2, 3), (4,)):
        x, tx = pair(shape)
        assert_same_complaints(lambda: F.local_response_norm(x, 2),
                               lambda: TF.local_response_norm(tx, 2))
    for shape in ((2, 3, 4), (1, 2, 3, 4, 5)):
        x, tx = pair(shape)
        assert_same_complaints(lambda: nn.CrossMapLRN2d(3)(x),
                               lambda: torch.nn.CrossMapLRN2d(3)(tx))
    empty = mt.randn(0, 3, 4)
    assert F.local_response_norm(empty, 2) is empty


# --------------------------------------------------------------------------- a ported model

def _block(lib):
    return lib.Sequential(lib.ReflectionPad2d(1), lib.Conv2d(4, 8, 3), lib.Dropout2d(0.25),
                          lib.PixelShuffle(2), lib.ChannelShuffle(2), lib.LocalResponseNorm(2),
                          lib.FeatureAlphaDropout(0.1), lib.CircularPad2d((1, 0, 0, 1)),
                          lib.Unfold(2), lib.Fold((11, 11), 2), lib.Softmax2d())


def test_a_torch_model_with_these_layers_loads_and_agrees_in_eval_mode():
    reference = _block(torch.nn).double().eval()
    model = _block(nn).double()
    assert repr(model) == repr(reference)
    assert list(model.state_dict()) == list(reference.state_dict())
    model.load_state_dict({k: mt.tensor(v.numpy()) for k, v in reference.state_dict().items()})
    model.eval()
    x, tx = pair((2, 4, 5, 5))
    np.testing.assert_allclose(to_np(model(x)), reference(tx).detach().numpy(), rtol=1e-10)


# --------------------------------------------------------------------------- signatures

def _parameters(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


# (the others are builtins in PyTorch, without a signature to read)
FUNCTIONS = ["dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
             "softmin", "unfold", "fold", "pad", "local_response_norm"]
MODULES = ["Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"] + [
    f"{kind}Pad{d}d" for kind in PAD_KINDS for d in (1, 2, 3)] + [
    "PixelShuffle", "PixelUnshuffle", "ChannelShuffle", "Softmin", "Unfold",
    "Fold", "PairwiseDistance", "CosineSimilarity", "LocalResponseNorm", "CrossMapLRN2d"]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_function_signatures_match_torch(name):
    assert _parameters(getattr(F, name)) == _parameters(getattr(TF, name))


@pytest.mark.parametrize("name", MODULES)
def test_module_signatures_match_torch(name):
    assert _parameters(getattr(nn, name).__init__) == \
        _parameters(getattr(torch.nn, name).__init__)
