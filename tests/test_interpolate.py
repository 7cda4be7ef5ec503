"""F.interpolate in every mode (nearest, nearest-exact, linear, bilinear, bicubic,
trilinear, area), size or scale_factor, align_corners both ways, recompute_scale_factor,
against PyTorch: values, gradients, errors; nn.Upsample; per-sample gradients under vmap
without the loop fallback (tests/test_layout_losses.py has the first cases)."""
import itertools
import math
import warnings

import numpy as np
import pytest

import microtensor as mt
import microtensor.nn.functional as F
from microtensor.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")
TF = torch.nn.functional

SHAPES = {1: (2, 3, 5), 2: (1, 2, 4, 5), 3: (1, 2, 3, 4, 2)}
MODES = {"nearest": (1, 2, 3), "nearest-exact": (1, 2, 3), "area": (1, 2, 3),
         "linear": (1,), "bilinear": (2,), "bicubic": (2,), "trilinear": (3,)}
RESIZES = [dict(size=7), dict(size=3), dict(scale_factor=2), dict(scale_factor=1.7),
           dict(scale_factor=0.6), dict(scale_factor=2.5, recompute_scale_factor=True),
           dict(scale_factor=0.75, recompute_scale_factor=False), dict(size=1),
           dict(scale_factor=1.1)]


def cases():
    for mode, dims in MODES.items():
        corners = (None,) if mode in ("nearest", "nearest-exact", "area") else \
            (None, False, True)
        for d, resize, align in itertools.product(dims, RESIZES, corners):
            yield pytest.param(mode, d, resize, align, id=f"{mode}-{d}d-{resize}-{align}")


def run(lib, x, mode, resize, align):
    functional = F if lib is mt else TF
    y = functional.interpolate(x, mode=mode, align_corners=align, **resize)
    weights = lib.arange(y.numel(), dtype=y.dtype).reshape(y.shape).sin()
    grad, = lib.autograd.grad((y * weights).sum(), x)
    return y, grad


def torch_gradient_is_wrong(mode, d, resize, shape):
    """Where PyTorch's backward copies a dim whose size a scale factor leaves unchanged
    but its forward does not (its own gradcheck fails there): "nearest" in 1-D and 3-D,
    "bicubic" when no size changes."""
    if "scale_factor" not in resize or resize.get("recompute_scale_factor"):
        return False
    same = [math.floor(n * resize["scale_factor"]) == n for n in shape[2:]]
    return (mode == "nearest" and d != 2 and any(same)) or (mode == "bicubic" and all(same))


@pytest.mark.parametrize("mode, d, resize, align", cases())
def test_values_and_gradients_match_torch(mode, d, resize, align):
    data = np.random.default_rng(d).uniform(-1, 1, SHAPES[d])
    ours = run(mt, mt.tensor(data, requires_grad=True), mode, resize, align)
    theirs = run(torch, torch.tensor(data, requires_grad=True), mode, resize, align)
    if torch_gradient_is_wrong(mode, d, resize, SHAPES[d]):
        assert gradcheck(lambda x: F.interpolate(x, mode=mode, align_corners=align, **resize),
                         (mt.tensor(data, requires_grad=True),))
        ours, theirs = ours[:1], theirs[:1]
    for a, b in zip(ours, theirs):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10,
                                   atol=1e-12)


@pytest.mark.parametrize("mode", ["bicubic", "nearest-exact", "area", "bilinear", "nearest"])
def test_float32_and_many_scales_match_torch(mode):
    """The source coordinates follow PyTorch's float arithmetic."""
    data = np.random.default_rng(0).uniform(-1, 1, (1, 1, 9, 10)).astype(np.float32)
    for scale in (0.3, 0.5, 1.1, 1.25, 1.5, 3.0, 4.7, (1.0, 1.1), (1.1, 0.9)):
        kwargs = dict(scale_factor=scale, mode=mode)
        ours = F.interpolate(mt.tensor(data), **kwargs)
        theirs = TF.interpolate(torch.tensor(data), **kwargs)
        assert ours.dtype == mt.float32 and tuple(ours.shape) == tuple(theirs.shape)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("mode", ["bicubic", "area", "trilinear", "nearest-exact"])
def test_gradcheck_and_gradgradcheck(mode):
    shape = (1, 1, 3, 4, 2) if mode == "trilinear" else (1, 2, 3, 4)
    x = mt.tensor(np.random.default_rng(1).normal(size=shape), requires_grad=True)
    f = lambda x: F.interpolate(x, scale_factor=1.5, mode=mode)  # noqa: E731
    assert gradcheck(f, (x,))
    assert gradgradcheck(f, (x,))


@pytest.mark.parametrize("mode", ["bicubic", "area", "nearest-exact", "trilinear"])
def test_per_sample_gradients_match_a_loop_without_fallback(mode):
    shape = (4, 2, 3, 4, 3) if mode == "trilinear" else (4, 2, 5, 6)
    x = mt.tensor(np.random.default_rng(2).normal(size=shape))

    def loss(x):
        return (F.interpolate(x.unsqueeze(0), size=(4, 3) if x.dim() == 3 else (2, 5, 4),
                              mode=mode) ** 2).sum()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Batching rule not implemented")
        batched = mt.func.vmap(mt.func.grad(loss))(x)
    looped = mt.stack([mt.func.grad(loss)(x[i]) for i in range(4)])
    np.testing.assert_allclose(batched.numpy(), looped.numpy(), rtol=1e-10, atol=1e-12)


def test_antialias_is_refused():
    with pytest.raises(NotImplementedError, match="antialias=True is not supported"):
        F.interpolate(mt.zeros(1, 2, 4, 5), size=3, mode="bicubic", antialias=True)


@pytest.mark.parametrize("shape, kwargs", [
    ((1, 2, 4), dict(size=3, mode="bicubic")), ((1, 2, 4), dict(size=3, antialias=True)),
    ((1, 2, 4, 5), dict(size=3, mode="trilinear")),
    ((1, 2, 4, 5, 6), dict(size=3, mode="linear")), ((1, 2, 4), dict(size=3, mode="cubic")),
    ((1, 2, 4), dict(size=3, mode="area", align_corners=False)),
    ((1, 2, 4), dict(size=3, scale_factor=2, mode="area")),
    ((1, 2, 4), dict(mode="nearest-exact")),
    ((1, 2, 4), dict(size=(3,), recompute_scale_factor=True)),
    ((1, 2, 4, 5), dict(size=(3, 2.0))),
    ((1, 2, 4, 5), dict(scale_factor=(2, 2, 2), mode="bicubic")),
    ((1, 2, 4, 5), dict(scale_factor=0.1, mode="bilinear"))])
def test_errors_match_torch(shape, kwargs):
    with pytest.raises(Exception) as expected:
        TF.interpolate(torch.zeros(shape), **kwargs)
    with pytest.raises(type(expected.value)) as got:
        F.interpolate(mt.zeros(shape), **kwargs)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("name, args, kwargs", [
    ("Upsample", (), dict(scale_factor=2)),
    ("Upsample", (), dict(size=(3, 7), mode="bicubic")),
    ("Upsample", (), dict(scale_factor=(1.5, 2), mode="bilinear", align_corners=True)),
    ("Upsample", (), dict(scale_factor=0.5, mode="area")),
    ("UpsamplingNearest2d", (), dict(scale_factor=3)),
    ("UpsamplingBilinear2d", ((5, 6),), {})])
def test_upsample_modules_match_torch(name, args, kwargs):
    ours, theirs = getattr(mt.nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args,
                                                                                 **kwargs)
    assert repr(ours) == repr(theirs)
    data = np.random.default_rng(3).normal(size=(2, 3, 4, 4))
    np.testing.assert_allclose(ours(mt.tensor(data)).numpy(), theirs(torch.tensor(data)).numpy(),
                               rtol=1e-10, atol=1e-12)


def test_deprecated_upsample_functions_warn_and_match_torch():
    data = np.random.default_rng(4).normal(size=(1, 2, 3, 3))
    for name, kwargs in (("upsample", dict(scale_factor=2, mode="bicubic",
                                           align_corners=False)),
                         ("upsample_nearest", dict(size=5)),
                         ("upsample_bilinear", dict(scale_factor=2))):
        with pytest.warns(UserWarning, match=f"nn.functional.{name} is deprecated"):
            ours = getattr(F, name)(mt.tensor(data), **kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = getattr(TF, name)(torch.tensor(data), **kwargs)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10, atol=1e-12)
