"""Layout (pad, interpolate, pixel_shuffle) and the losses, against PyTorch; the op
``pad`` and its backward also go through the registry sweeps."""
import numpy as np
import pytest

import microtensor as mt
import microtensor.nn.functional as F

torch = pytest.importorskip("torch", reason="PyTorch is needed to compare with")
TF = torch.nn.functional


def _pair(*shape, seed=0, low=-1.0, high=1.0):
    arr = np.random.default_rng(seed).uniform(low, high, shape)
    return mt.tensor(arr, requires_grad=True), torch.tensor(arr, requires_grad=True)


def _close(ours, theirs, **kw):
    np.testing.assert_allclose(np.asarray(ours.detach()._array()), theirs.detach().numpy(),
                               rtol=1e-6, atol=1e-9, **kw)


def _check(fn_ours, fn_theirs, *shapes, grad=True):
    pairs = [_pair(*s, seed=i) for i, s in enumerate(shapes)]
    ours = fn_ours(*[p[0] for p in pairs])
    theirs = fn_theirs(*[p[1] for p in pairs])
    assert tuple(ours.shape) == tuple(theirs.shape)
    _close(ours, theirs)
    if grad:
        ours.sum().backward() if ours.dim() else ours.backward()
        theirs.sum().backward()
        for a, b in pairs:
            _close(a.grad, b.grad)


# --------------------------------------------------------------------------- pad

@pytest.mark.parametrize("shape,pads,mode,value", [
    ((2, 3, 4), (1, 2), "constant", None), ((2, 3, 4), (-1, 2, 0, 1), "constant", 2.5),
    ((2, 3, 4, 5), (1, 1, 2, 0, 1, 1, 0, 2), "constant", None),
    ((3, 5), (2, 4), "reflect", None), ((2, 3, 4, 5), (3, 1, 2, 2), "reflect", None),
    ((2, 3, 4), (3, 2), "replicate", None), ((1, 2, 3, 3, 4), (1, 2, 0, 1, 3, 0), "replicate",
                                             None),
    ((2, 3, 4), (4, 3), "circular", None), ((2, 3, 4), (1, 0, 2, 3), "circular", None)])
def test_pad_matches_torch(shape, pads, mode, value):
    _check(lambda x: F.pad(x, pads, mode, value), lambda x: TF.pad(x, pads, mode, value),
           shape)


def test_pad_backward_matches_torch():
    x, tx = _pair(2, 3, 4)
    g, tg = _pair(2, 5, 9, seed=3)
    for mode in ("reflect", "replicate", "circular"):
        ours = mt.autograd.grad(F.pad(x, (2, 3, 1, 1), mode), x, g)[0]
        theirs = torch.autograd.grad(TF.pad(tx, (2, 3, 1, 1), mode), tx, tg)[0]
        _close(ours, theirs)


@pytest.mark.parametrize("shape,pads,mode", [
    ((2, 3, 4), (1, 2, 3), "constant"), ((2, 3, 4), (4, 4), "reflect"),
    ((2, 3, 4), (1, 1), "bogus"), ((2, 3, 4), (1,) * 8, "replicate"),
    ((2, 3, 4), (-5, 0), "constant"), ((2, 3, 4), (5, 5), "circular"),
    ((4,), (1, 1), "reflect"), ((4, 5), (1, 1, 1, 1), "reflect"),
    ((2, 3, 4, 5, 6, 7), (1, 1, 1, 1), "replicate")])
def test_pad_errors_match_torch(shape, pads, mode):
    with pytest.raises(Exception) as expected:
        TF.pad(torch.zeros(shape), pads, mode)
    with pytest.raises(type(expected.value)) as got:
        F.pad(mt.zeros(shape), pads, mode)
    assert str(got.value).splitlines()[0] == str(expected.value).splitlines()[0]


def test_pad_under_vmap_matches_a_loop():
    x = mt.tensor(np.random.default_rng(1).normal(size=(3, 2, 3, 4)))
    for mode in ("constant", "reflect", "replicate", "circular"):
        fn = lambda s: F.pad(s, (1, 2, 2, 1), mode)  # noqa: E731
        batched = mt.func.vmap(fn)(x)
        looped = mt.stack([fn(x[i]) for i in range(3)])
        np.testing.assert_allclose(batched.numpy(), looped.numpy())


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("padding", [1, (2, 1), "same"])
def test_conv_padding_modes_match_torch(mode, padding):
    theirs = torch.nn.Conv2d(2, 3, 3, padding=padding, padding_mode=mode).double()
    ours = mt.nn.Conv2d(2, 3, 3, padding=padding, padding_mode=mode, dtype=mt.float64)
    ours.load_state_dict({k: mt.tensor(v.detach().numpy()) for k, v in
                          theirs.state_dict().items()})
    assert repr(ours) == repr(theirs)
    _check(ours, theirs, (2, 2, 5, 6))


# --------------------------------------------------------------------------- interpolate

@pytest.mark.parametrize("shape,kwargs", [
    ((2, 3, 5), dict(size=8)), ((2, 3, 5), dict(scale_factor=1.7)),
    ((1, 2, 4, 5), dict(size=(7, 3))), ((1, 2, 4, 5), dict(scale_factor=2)),
    ((1, 2, 4, 5, 3), dict(scale_factor=(2, 0.5, 1.5))),
    ((2, 3, 5), dict(size=8, mode="linear")),
    ((2, 3, 5), dict(scale_factor=2.5, mode="linear", align_corners=True)),
    ((1, 2, 4, 5), dict(size=(7, 3), mode="bilinear", align_corners=False)),
    ((1, 2, 4, 5), dict(scale_factor=1.5, mode="bilinear")),
    ((1, 2, 4, 5), dict(scale_factor=(2, 3), mode="bilinear", align_corners=True)),
    ((1, 2, 4, 5), dict(size=(1, 1), mode="bilinear", align_corners=True)),
    ((1, 2, 4, 5), dict(scale_factor=1.5, mode="bilinear", recompute_scale_factor=True))])
def test_interpolate_matches_torch(shape, kwargs):
    _check(lambda x: F.interpolate(x, **kwargs), lambda x: TF.interpolate(x, **kwargs), shape)


@pytest.mark.parametrize("shape,kwargs", [
    ((2, 3), dict(size=4)), ((2, 3, 5), dict(size=4, scale_factor=2)),
    ((2, 3, 5), dict(size=(4, 4))), ((2, 3, 5), dict(size=4, align_corners=True))])
def test_interpolate_errors_match_torch(shape, kwargs):
    with pytest.raises(Exception) as expected:
        TF.interpolate(torch.zeros(shape), **kwargs)
    with pytest.raises(type(expected.value)) as got:
        F.interpolate(mt.zeros(shape), **kwargs)
    assert str(got.value) == str(expected.value)


# --------------------------------------------------------------------------- pixel shuffle

@pytest.mark.parametrize("shape,r", [((2, 8, 3, 4), 2), ((18, 2, 3), 3), ((2, 1, 4, 2, 2), 1)])
def test_pixel_shuffle_matches_torch(shape, r):
    _check(lambda x: F.pixel_shuffle(x, r), lambda x: TF.pixel_shuffle(x, r), shape)
    _check(lambda x: F.pixel_unshuffle(F.pixel_shuffle(x, r), r),
           lambda x: TF.pixel_unshuffle(TF.pixel_shuffle(x, r), r), shape)


@pytest.mark.parametrize("fn,shape,r", [("pixel_shuffle", (2, 7, 3, 4), 2),
                                        ("pixel_shuffle", (4, 3), 2),
                                        ("pixel_unshuffle", (2, 3, 5, 4), 2),
                                        ("pixel_unshuffle", (2, 3, 4, 5), 2)])
def test_pixel_shuffle_errors_match_torch(fn, shape, r):
    with pytest.raises(RuntimeError) as expected:
        getattr(TF, fn)(torch.zeros(shape), r)
    with pytest.raises(RuntimeError) as got:
        getattr(F, fn)(mt.zeros(shape), r)
    assert str(got.value) == str(expected.value)
