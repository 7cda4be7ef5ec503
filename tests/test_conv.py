"""Convolution beyond the registry sweeps: PyTorch's errors, memory-format propagation,
F.unfold / F.fold, the modules (repr, parameters, init, state_dict from PyTorch), the
batching rule's cases (shared and per-sample weights, per-sample bias; one kernel call
whatever the batch size) and per-sample gradients of a small CNN against torch.func."""
import warnings

import numpy as np
import pytest

import microtensor as mt
import microtensor.nn.functional as F
from microtensor.autograd import gradcheck, gradgradcheck
from microtensor.ops import conv as conv_ops

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")
TF = torch.nn.functional

FALLBACK = "Batching rule not implemented"
RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.standard_normal(shape)


def arr(t):
    return np.array(t.detach()._array())


def both(value):
    """The same float64 values as a microtensor and a torch tensor."""
    return mt.tensor(value), torch.tensor(value)


# --------------------------------------------------------------------------- errors

X4 = rand(2, 3, 5, 5)
ERROR_CASES = [
    ("conv2d", (X4, rand(4, 2, 3, 3)), {}),
    ("conv2d", (X4, rand(4, 3, 3, 3).astype(np.float32)), {}),
    ("conv2d", (X4, rand(4, 3, 3, 3), rand(4).astype(np.float32)), {}),
    ("conv2d", (X4, rand(4, 3, 3, 3), rand(3)), {}),
    ("conv2d", (X4, rand(4, 3, 7, 7)), {}),
    ("conv2d", (X4, rand(4, 3, 3, 3)), {"stride": 0}),
    ("conv2d", (X4, rand(4, 3, 3, 3)), {"padding": -1}),
    ("conv2d", (X4, rand(4, 3, 3, 3)), {"dilation": 0}),
    ("conv2d", (X4, rand(4, 3, 3, 3)), {"groups": 0}),
    ("conv2d", (X4, rand(4, 3, 3, 3)), {"groups": 2}),
    ("conv2d", (X4, rand(4, 3, 3, 3)), {"padding": "same", "stride": 2}),
    ("conv2d", (X4, rand(4, 3, 3, 3)), {"padding": "full"}),
    ("conv2d", (rand(3, 5), rand(4, 3, 3, 3)), {}),
    ("conv2d", (X4, rand(0, 3, 3, 3)), {}),
    ("conv2d", (X4 > 0, rand(4, 3, 3, 3) > 0), {}),
    ("conv_transpose2d", (X4, rand(4, 2, 3, 3)), {}),
    ("conv_transpose2d", (X4, rand(3, 2, 3, 3)), {"stride": 2, "output_padding": 2}),
]


@pytest.mark.parametrize("name, args, kwargs", ERROR_CASES)
def test_errors_match_torch(name, args, kwargs):
    with pytest.raises(Exception) as expected:
        getattr(torch, name)(*[torch.tensor(a) for a in args], **kwargs)
    with pytest.raises(type(expected.value)) as got:
        getattr(mt, name)(*[mt.tensor(a) for a in args], **kwargs)
    # the gist: the first words of PyTorch's message
    assert str(got.value).split(",")[0][:30] == str(expected.value).split(",")[0][:30]


def test_integer_convolution_matches_torch():
    x, w = RNG.integers(-5, 5, (2, 3, 5, 5)), RNG.integers(-5, 5, (4, 3, 2, 2))
    for fn in ("conv2d", "conv_transpose2d"):
        weight = w if fn == "conv2d" else w.transpose(1, 0, 2, 3).copy()
        out = getattr(mt, fn)(mt.tensor(x), mt.tensor(weight), stride=2)
        expected = getattr(torch, fn)(torch.tensor(x), torch.tensor(weight), stride=2)
        assert out.dtype == mt.int64
        np.testing.assert_array_equal(arr(out), expected.numpy())


def test_refused_convolution_changes_nothing():
    x = mt.tensor(X4, requires_grad=True)
    with pytest.raises(RuntimeError):
        mt.conv2d(x, mt.tensor(rand(4, 2, 3, 3)))
    assert x.grad is None and x._version == 0


# --------------------------------------------------------------------------- memory format

@pytest.mark.parametrize("case", ["input", "weight", "both", "transposed", "same", "3d"])
def test_channels_last_propagates_as_in_torch(case):
    x_np, w_np = rand(2, 4, 6, 6), rand(4, 2, 3, 3)
    fmt, tfmt = mt.channels_last, torch.channels_last
    if case == "3d":
        # float32: PyTorch's float64 3-d path (slow_conv3d) ignores the memory format
        x_np, w_np = rand(2, 4, 3, 4, 4).astype(np.float32), rand(4, 4, 2, 2, 2).astype(
            np.float32)
        fmt, tfmt = mt.channels_last_3d, torch.channels_last_3d
    (x, tx), (w, tw) = both(x_np), both(w_np)
    if case != "weight":
        x, tx = x.contiguous(memory_format=fmt), tx.contiguous(memory_format=tfmt)
    if case in ("weight", "both"):
        w, tw = w.contiguous(memory_format=fmt), tw.contiguous(memory_format=tfmt)
    if case == "transposed":
        out, expected = F.conv_transpose2d(x, w, stride=2), TF.conv_transpose2d(tx, tw, stride=2)
    elif case == "same":
        w, tw = both(rand(3, 4, 2, 2))
        out, expected = F.conv2d(x, w, padding="same"), TF.conv2d(tx, tw, padding="same")
    elif case == "3d":
        out, expected = F.conv3d(x, w), TF.conv3d(tx, tw)
    else:
        out, expected = F.conv2d(x, w, groups=2), TF.conv2d(tx, tw, groups=2)
    assert out.stride() == expected.stride()
    np.testing.assert_allclose(arr(out), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_channels_last_gradients_match_torch():
    (x, tx), (w, tw) = both(rand(2, 3, 5, 5)), both(rand(4, 3, 3, 3))
    x = x.contiguous(memory_format=mt.channels_last).requires_grad_()
    w = w.requires_grad_()
    tx = tx.contiguous(memory_format=torch.channels_last).requires_grad_()
    tw = tw.requires_grad_()
    g = rand(2, 4, 5, 5)
    mt.autograd.backward(F.conv2d(x, w, padding=1), mt.tensor(g))
    torch.autograd.backward(TF.conv2d(tx, tw, padding=1), torch.tensor(g))
    np.testing.assert_allclose(arr(x.grad), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(arr(w.grad), tw.grad.numpy(), rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- unfold / fold

FOLD_CASES = [dict(kernel_size=3), dict(kernel_size=(2, 3), stride=2, padding=1, dilation=(1, 2)),
              dict(kernel_size=2, stride=(1, 2))]


@pytest.mark.parametrize("kwargs", FOLD_CASES)
def test_unfold_and_fold_match_torch(kwargs):
    x, tx = both(rand(2, 2, 4, 5))
    cols = F.unfold(x, **kwargs)
    expected = TF.unfold(tx, **kwargs)
    np.testing.assert_array_equal(arr(cols), expected.numpy())
    np.testing.assert_allclose(arr(F.fold(cols, (4, 5), **kwargs)),
                               TF.fold(expected, (4, 5), **kwargs).numpy(), rtol=1e-12)
    np.testing.assert_array_equal(arr(F.unfold(x[0], **kwargs)), TF.unfold(tx[0], **kwargs))
    x = x[:1].detach().requires_grad_()
    assert gradcheck(lambda t: F.unfold(t, **kwargs), (x,))
    c = F.unfold(x, **kwargs).detach().requires_grad_()
    assert gradgradcheck(lambda t: F.fold(t, (4, 5), **kwargs), (c,))


def test_unfold_and_fold_under_vmap_match_loop():
    xs = mt.tensor(rand(3, 2, 2, 5, 5))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=FALLBACK)
        cols = mt.vmap(lambda t: F.unfold(t, 2, stride=2, padding=1))(xs)
        back = mt.vmap(lambda t: F.fold(t, (5, 5), 2, stride=2, padding=1))(cols)
    for i in range(3):
        one = F.unfold(xs[i], 2, stride=2, padding=1)
        np.testing.assert_array_equal(arr(cols[i]), arr(one))
        np.testing.assert_allclose(arr(back[i]), arr(F.fold(one, (5, 5), 2, stride=2,
                                                            padding=1)))


def test_fold_errors_match_torch():
    for args in [(rand(2, 7, 9), (5, 5), 2), (rand(2, 8, 9), (5, 5), 2)]:
        with pytest.raises(RuntimeError) as expected:
            TF.fold(torch.tensor(args[0]), *args[1:])
        with pytest.raises(RuntimeError) as got:
            F.fold(mt.tensor(args[0]), *args[1:])
        assert str(got.value)[:40] == str(expected.value)[:40]


# --------------------------------------------------------------------------- modules

MODULE_CASES = [
    ("Conv1d", (2, 4, 3), {}),
    ("Conv1d", (2, 4, 3), {"padding": "same", "bias": False}),
    ("Conv2d", (3, 4, 3), {}),
    ("Conv2d", (4, 6, (3, 2)), {"stride": 2, "padding": 1, "dilation": 2, "groups": 2}),
    ("Conv2d", (2, 4, 2), {"padding": "same"}),
    ("Conv2d", (2, 4, 3), {"padding": "valid"}),
    ("Conv3d", (2, 3, 2), {"stride": (1, 2, 1)}),
    ("ConvTranspose1d", (2, 4, 3), {"stride": 2, "groups": 2, "dilation": 2}),
    ("ConvTranspose2d", (4, 2, 3), {"stride": 2, "output_padding": 1}),
    ("ConvTranspose3d", (2, 2, 2), {"bias": False}),
]


@pytest.mark.parametrize("name, args, kwargs", MODULE_CASES)
def test_module_matches_torch(name, args, kwargs):
    ours, theirs = getattr(mt.nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(ours) == repr(theirs)
    for attr in ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation",
                 "transposed", "output_padding", "groups", "padding_mode"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    expected = {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == expected
    # default init: kaiming_uniform_(a=sqrt(5)), bias within 1/sqrt(fan_in)
    fan_in = ours.weight.shape[1] * int(np.prod(ours.kernel_size))
    bound = 1 / np.sqrt(fan_in)
    assert bound / 2 < np.abs(arr(ours.weight)).max() <= bound
    if ours.bias is not None:
        assert np.abs(arr(ours.bias)).max() <= bound
    ours.load_state_dict({k: mt.tensor(v.detach().numpy()) for k, v in
                          theirs.state_dict().items()})
    dims = len(ours.kernel_size)
    x = rand(2, args[0], *([6] * dims))
    np.testing.assert_allclose(arr(ours(mt.tensor(x).float())),
                               theirs(torch.tensor(x).float()).detach().numpy(),
                               rtol=1e-5, atol=1e-5)


def test_conv_transpose_output_size():
    ours, theirs = mt.nn.ConvTranspose2d(2, 3, 3, stride=2), torch.nn.ConvTranspose2d(2, 3, 3,
                                                                                      stride=2)
    x = mt.randn(1, 2, 4, 4)
    assert tuple(ours(x, output_size=[10, 10]).shape) == (1, 3, 10, 10)
    assert tuple(ours(x, output_size=(1, 3, 9, 10)).shape) == (1, 3, 9, 10)
    with pytest.raises(ValueError) as expected:
        theirs(torch.randn(1, 2, 4, 4), output_size=[12, 12])
    with pytest.raises(ValueError) as got:
        ours(x, output_size=[12, 12])
    assert str(got.value).split("(for")[0] == str(expected.value).split("(for")[0]


@pytest.mark.parametrize("kwargs", [{"groups": 0}, {"groups": 3}, {"padding": "full"},
                                    {"padding": "same", "stride": 2},
                                    {"padding_mode": "mirror"}])
def test_module_errors_match_torch(kwargs):
    with pytest.raises(ValueError) as expected:
        torch.nn.Conv2d(4, 6, 3, **kwargs)
    with pytest.raises(ValueError) as got:
        mt.nn.Conv2d(4, 6, 3, **kwargs)
    # up to the set of valid values, which Python prints in no fixed order
    assert str(got.value).split("{")[0] == str(expected.value).split("{")[0]


# --------------------------------------------------------------------------- vmap

def _loop(fn, args, in_dims, size):
    rows = [fn(*[a if d is None else a.select(d, i) for a, d in zip(args, in_dims)])
            for i in range(size)]
    return np.stack([arr(r) for r in rows])


VMAP_CASES = [  # (in_dims of input, weight, bias), transposed, groups
    ((0, None, None), False, 1), ((None, 0, 0), False, 2), ((1, 0, None), False, 2),
    ((0, None, 0), False, 1), ((None, 0, None), True, 2), ((0, 0, 0), True, 1),
]


@pytest.mark.parametrize("in_dims, transposed, groups", VMAP_CASES)
def test_vmap_of_every_batching_case_matches_loop(in_dims, transposed, groups):
    size = 3
    x = rand(2, 4, 5, 5)
    w = rand(4, 6 // groups, 3, 3) if transposed else rand(6, 4 // groups, 3, 3)
    b = rand(6)
    args = []
    for value, d in zip((x, w, b), in_dims):
        if d is not None:
            value = np.stack([value * (1 - 0.2 * i) for i in range(size)], d)
        args.append(mt.tensor(value))

    def fn(x, w, b):
        return conv_ops.convolution(x, w, b, (2, 1), (1, 0), (1, 2), transposed,
                                    (1, 0) if transposed else (0, 0), groups)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=FALLBACK)
        out = mt.vmap(fn, in_dims=in_dims)(*args)
    np.testing.assert_allclose(arr(out), _loop(fn, args, in_dims, size), rtol=1e-10,
                               atol=1e-12)


def _count_kernel_calls(monkeypatch):
    calls = []
    original = conv_ops._convolve

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)
    monkeypatch.setattr(conv_ops, "_convolve", counting)
    return calls


def test_per_sample_weight_gradients_are_one_call_whatever_the_batch(monkeypatch):
    """vmap(grad) of a convolution: forward, input gradient and weight gradient are one
    kernel call each for the whole batch (no per-sample loop)."""
    calls = _count_kernel_calls(monkeypatch)
    w = mt.tensor(rand(4, 2, 3, 3))

    def loss(w, x):
        y = F.conv2d(x.unsqueeze(0), w, padding=1)
        return (y * y).sum()
    counts = []
    for size in (2, 5):
        del calls[:]
        mt.func.vmap(mt.func.grad(loss), in_dims=(None, 0))(w, mt.tensor(rand(size, 2, 5, 5)))
        counts.append(len(calls))
    assert counts[0] == counts[1] <= 2


class SmallCNN:
    """conv, relu, conv, relu, flatten, linear, log_softmax: the per-sample-gradients
    tutorial's shape, small."""

    def __init__(self, lib):
        self.lib = lib
        nn = lib.nn
        self.conv1 = nn.Conv2d(1, 4, 3)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=2, padding=1)
        self.fc = nn.Linear(6 * 3 * 3, 5)

    def modules(self):
        return {"conv1": self.conv1, "conv2": self.conv2, "fc": self.fc}


def _cnn(lib, F_, params, x):
    x = F_.relu(F_.conv2d(x, params["conv1.weight"], params["conv1.bias"]))
    x = F_.relu(F_.conv2d(x, params["conv2.weight"], params["conv2.bias"], stride=2,
                          padding=1))
    x = x.flatten(1)
    return F_.log_softmax(F_.linear(x, params["fc.weight"], params["fc.bias"]), dim=1)


def test_per_sample_gradients_of_a_cnn_match_torch_func():
    torch_params = {}
    for name, module in SmallCNN(torch).modules().items():
        for p_name, p in module.named_parameters():
            torch_params[f"{name}.{p_name}"] = p.detach().double()
    params = {k: mt.tensor(v.numpy()) for k, v in torch_params.items()}
    images, targets = rand(6, 1, 1, 7, 7), RNG.integers(0, 5, (6, 1))

    def loss(params, x, y):
        return F.nll_loss(_cnn(mt, F, params, x), y)

    def torch_loss(params, x, y):
        return TF.nll_loss(_cnn(torch, TF, params, x), y)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=FALLBACK)
        ours = mt.func.vmap(mt.func.grad(loss), in_dims=(None, 0, 0))(
            params, mt.tensor(images), mt.tensor(targets))
    theirs = torch.func.vmap(torch.func.grad(torch_loss), in_dims=(None, 0, 0))(
        torch_params, torch.tensor(images), torch.tensor(targets))
    assert set(ours) == set(theirs)
    for k in theirs:
        np.testing.assert_allclose(arr(ours[k]), theirs[k].numpy(), rtol=1e-9, atol=1e-11,
                                   err_msg=k)


def test_model_ensembling_matches_torch_func():
    """Per-sample weights (an ensemble of 3 models) over one shared batch of images."""
    w, b = rand(3, 4, 2, 3, 3), rand(3, 4)
    x = rand(2, 2, 6, 6)
    ours = mt.func.vmap(lambda w, b: F.conv2d(mt.tensor(x), w, b, stride=2),
                        in_dims=(0, 0))(mt.tensor(w), mt.tensor(b))
    theirs = torch.func.vmap(lambda w, b: TF.conv2d(torch.tensor(x), w, b, stride=2))(
        torch.tensor(w), torch.tensor(b))
    np.testing.assert_allclose(arr(ours), theirs.numpy(), rtol=1e-10, atol=1e-12)
