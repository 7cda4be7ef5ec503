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


def _close(ours, theirs, rtol=1e-6):
    np.testing.assert_allclose(np.asarray(ours.detach()._array()), theirs.detach().numpy(),
                               rtol=rtol, atol=1e-9)


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


def _crop_is_defined_in_torch(shape, pads, mode):
    """Whether PyTorch's result for these pads is defined: its circular padding reads
    outside the cropped input (or refuses) when a pad is larger than what is left."""
    if mode != "circular":
        return True
    for i in range(len(pads) // 2):
        lo, hi = pads[2 * i], pads[2 * i + 1]
        left = shape[-1 - i] - max(-lo, 0) - max(-hi, 0)
        if max(lo, hi) > left:
            return False
    return True


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,k", [((2, 5), 1), ((1, 3, 4), 2), ((1, 1, 3, 2, 4), 3)])
def test_negative_pads_crop_as_torch(mode, shape, k):
    """Every combination of pads from -4 to 3 on each padded dim: the values and gradients
    where PyTorch's result is defined, the error where PyTorch refuses for a reason."""
    import itertools
    rng = np.random.default_rng(0)
    for pads in itertools.product(range(-4, 4), repeat=2 * k):
        if rng.random() > {1: 1.0, 2: 0.05, 3: 0.01}[k]:   # a sample of the 2-d and 3-d ones
            continue
        x, tx = _pair(*shape)
        try:
            expected = TF.pad(tx, pads, mode)
        except RuntimeError as e:
            # the refusals PyTorch means (not its internal failures on circular crops)
            if any(text in str(e) for text in ("too small", "wrapping", "empty dimension",
                                               "Argument #")):
                with pytest.raises(RuntimeError) as got:
                    F.pad(x, pads, mode)
                # PyTorch's punctuation varies by kernel: "(H: 3, W: 4 )", "(D: 3 H: 2, W: 4)"
                def gist(message):
                    return message.replace(",", "").replace(" )", ")")
                assert gist(str(got.value)) == gist(str(e)), pads
            continue
        if not _crop_is_defined_in_torch(shape, pads, mode):
            continue
        ours = F.pad(x, pads, mode)
        assert tuple(ours.shape) == tuple(expected.shape), pads
        _close(ours, expected)
        g = np.random.default_rng(1).normal(size=tuple(expected.shape))
        grad = mt.autograd.grad(ours, x, mt.tensor(g))[0]
        if expected.numel():
            _close(grad, torch.autograd.grad(expected, tx, torch.tensor(g))[0])
        else:   # PyTorch's 3-d kernels leave this gradient uninitialized
            assert not grad.any()


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


# --------------------------------------------------------------------------- losses

REDUCTIONS = ["none", "mean", "sum"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name,kwargs", [
    ("smooth_l1_loss", {}), ("smooth_l1_loss", dict(beta=0.3)), ("smooth_l1_loss", dict(beta=0)),
    ("huber_loss", {}), ("huber_loss", dict(delta=0.4))])
def test_elementwise_losses_match_torch(name, kwargs, reduction):
    _check(lambda a, b: getattr(F, name)(a, b, reduction=reduction, **kwargs),
           lambda a, b: getattr(TF, name)(a, b, reduction=reduction, **kwargs),
           (3, 4), (3, 4))


@pytest.mark.parametrize("reduction", REDUCTIONS + ["batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_matches_torch(reduction, log_target):
    x, tx = _pair(3, 4)
    t, tt = _pair(3, 4, seed=1, low=0.0, high=1.0)
    if log_target:
        t, tt = t.log(), tt.log()
    ours = F.kl_div(x.log_softmax(1), t, reduction=reduction, log_target=log_target)
    theirs = TF.kl_div(tx.log_softmax(1), tt, reduction=reduction, log_target=log_target)
    _close(ours, theirs)
    ours.sum().backward()
    theirs.sum().backward()
    _close(x.grad, tx.grad)


def test_kl_div_zero_targets_count_nothing():
    x = mt.tensor([[-1.0, -2.0]], requires_grad=True)
    t = mt.tensor([[0.0, 1.0]])
    np.testing.assert_allclose(F.kl_div(x, t, reduction="sum").item(),
                               TF.kl_div(torch.tensor([[-1.0, -2.0]]),
                                         torch.tensor([[0.0, 1.0]]), reduction="sum").item())


def _sign_pair(n, seed):
    arr = np.where(np.random.default_rng(seed).random(n) > 0.5, 1.0, -1.0)
    return mt.tensor(arr), torch.tensor(arr)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_ranking_and_embedding_losses_match_torch(reduction):
    y, ty = _sign_pair(5, 7)
    _check(lambda a, b: F.margin_ranking_loss(a, b, y, margin=0.2, reduction=reduction),
           lambda a, b: TF.margin_ranking_loss(a, b, ty, margin=0.2, reduction=reduction),
           (5,), (5,))
    _check(lambda a, b: F.cosine_embedding_loss(a, b, y, margin=0.1, reduction=reduction),
           lambda a, b: TF.cosine_embedding_loss(a, b, ty, margin=0.1, reduction=reduction),
           (5, 3), (5, 3))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("log_input,full", [(True, False), (False, False), (True, True),
                                            (False, True)])
def test_poisson_nll_loss_matches_torch(log_input, full, reduction):
    x, tx = _pair(3, 4, low=0.1, high=2.0)
    t, tt = _pair(3, 4, seed=2, low=0.0, high=3.0)
    ours = F.poisson_nll_loss(x, t, log_input, full, reduction=reduction)
    theirs = TF.poisson_nll_loss(tx, tt, log_input, full, reduction=reduction)
    _close(ours, theirs)
    ours.sum().backward()
    theirs.sum().backward()
    _close(x.grad, tx.grad)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("var_shape", [(3, 4), (3,), (3, 1), (1, 4)])
def test_gaussian_nll_loss_matches_torch(var_shape, reduction):
    pairs = [_pair(3, 4), _pair(3, 4, seed=1), _pair(*var_shape, seed=2, low=0.0, high=1.0)]
    with torch.no_grad():
        pairs[2][1][..., 0] = 1e-8   # below eps: clamped in value, gradient passes
    pairs[2] = (mt.tensor(pairs[2][1].detach().numpy(), requires_grad=True), pairs[2][1])
    for full in (False, True):
        ours = F.gaussian_nll_loss(*[p[0] for p in pairs], full=full, reduction=reduction)
        theirs = TF.gaussian_nll_loss(*[p[1] for p in pairs], full=full, reduction=reduction)
        _close(ours, theirs)
        ours.sum().backward()
        theirs.sum().backward()
        for a, b in pairs:
            _close(a.grad, b.grad)


def test_gaussian_nll_loss_errors_match_torch():
    for var in (mt.ones(2), mt.ones(3, 2), -1.0):
        with pytest.raises(ValueError) as expected:
            TF.gaussian_nll_loss(torch.zeros(3, 4), torch.zeros(3, 4),
                                 var if isinstance(var, float) else torch.tensor(var.numpy()))
        with pytest.raises(ValueError) as got:
            F.gaussian_nll_loss(mt.zeros(3, 4), mt.zeros(3, 4), var)
        assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p,swap", [(2, False), (1, True), (3.0, False)])
def test_triplet_margin_loss_matches_torch(p, swap, reduction):
    _check(lambda a, b, c: F.triplet_margin_loss(a, b, c, margin=0.7, p=p, swap=swap,
                                                 reduction=reduction),
           lambda a, b, c: TF.triplet_margin_loss(a, b, c, margin=0.7, p=p, swap=swap,
                                                  reduction=reduction),
           (4, 3), (4, 3), (4, 3))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_and_cross_entropy_on_spatial_inputs_match_torch(reduction):
    target = np.random.default_rng(5).integers(0, 4, (2, 3, 5))
    target[0, 1, 2] = -100
    t, tt = mt.tensor(target), torch.tensor(target)
    w, tw = _pair(4, seed=9, low=0.5, high=2.0)
    _check(lambda x: F.nll_loss(x.log_softmax(1), t, reduction=reduction),
           lambda x: TF.nll_loss(x.log_softmax(1), tt, reduction=reduction), (2, 4, 3, 5))
    _check(lambda x: F.cross_entropy(x, t, w.detach(), reduction=reduction),
           lambda x: TF.cross_entropy(x, tt, tw.detach(), reduction=reduction), (2, 4, 3, 5))
    _check(lambda x: F.cross_entropy(x, t, reduction=reduction, label_smoothing=0.2),
           lambda x: TF.cross_entropy(x, tt, reduction=reduction, label_smoothing=0.2),
           (2, 4, 3, 5))


def test_nll_loss_spatial_target_shape_is_checked():
    with pytest.raises(RuntimeError, match=r"Expected target size \[2, 4\], got \[2, 5\]"):
        F.nll_loss(mt.zeros(2, 3, 4), mt.zeros(2, 5, dtype=mt.int64))


@pytest.mark.parametrize("name,args,kwargs", [
    ("SmoothL1Loss", 2, dict(beta=0.5)), ("HuberLoss", 2, dict(delta=0.5)),
    ("KLDivLoss", 2, dict(reduction="batchmean")), ("MarginRankingLoss", 3, dict(margin=0.1)),
    ("CosineEmbeddingLoss", 3, dict(margin=0.1)), ("PoissonNLLLoss", 2, dict(full=True)),
    ("GaussianNLLLoss", 3, dict(full=True)), ("TripletMarginLoss", 3, dict(swap=True))])
def test_loss_modules_match_torch(name, args, kwargs):
    ours, theirs = getattr(mt.nn, name)(**kwargs), getattr(torch.nn, name)(**kwargs)
    assert repr(ours) == repr(theirs)
    shapes = [(4, 3)] * args
    pairs = [_pair(*s, seed=i, low=0.1, high=1.0) for i, s in enumerate(shapes)]
    if name in ("MarginRankingLoss", "CosineEmbeddingLoss"):
        y, ty = _sign_pair(4, 3)
        if name == "MarginRankingLoss":
            pairs = [_pair(4, seed=0), _pair(4, seed=1)]
        pairs.append((y, ty))
        pairs = pairs[:2] + [pairs[-1]]
    _close(ours(*[p[0] for p in pairs]), theirs(*[p[1] for p in pairs]))


@pytest.mark.parametrize("loss", [
    lambda x, t: F.smooth_l1_loss(x, t, beta=0.5), lambda x, t: F.huber_loss(x, t),
    lambda x, t: F.kl_div(x.log_softmax(-1), t.softmax(-1), reduction="batchmean"),
    lambda x, t: F.poisson_nll_loss(x, t.abs(), full=True),
    lambda x, t: F.gaussian_nll_loss(x, t, t.abs() + 0.1),
    lambda x, t: F.triplet_margin_loss(x, t, t.flip(0), swap=True),
    lambda x, t: F.cosine_embedding_loss(x, t, mt.tensor([1.0, -1.0, 1.0])),
    lambda x, t: F.pad(x, (1, 2), "reflect").sin().sum() + F.interpolate(
        x[None], scale_factor=1.5, mode="linear").sum()])
def test_per_sample_gradients_match_a_loop(loss):
    x = mt.tensor(np.random.default_rng(0).normal(size=(4, 3, 5)))
    t = mt.tensor(np.random.default_rng(1).normal(size=(4, 3, 5)))
    batched = mt.func.vmap(mt.func.grad(loss))(x, t)
    looped = mt.stack([mt.func.grad(loss)(x[i], t[i]) for i in range(4)])
    np.testing.assert_allclose(batched.numpy(), looped.numpy(), rtol=1e-10, atol=1e-12)
