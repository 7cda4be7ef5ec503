"""``F.affine_grid``, ``F.grid_sample`` and ``F.ctc_loss`` / ``nn.CTCLoss`` against PyTorch:
values and gradients over many random cases (grid points outside the image, on pixel
centres and borders, NaN; impossible alignments), PyTorch's argument errors, and vmap.
The registry sweeps (tests/test_op_registry.py, test_vmap.py, test_func.py) run the ops'
samples through gradcheck, gradgradcheck and vmap as well."""
import itertools
import warnings

import numpy as np
import pytest

import microtensor as mt
import microtensor.nn.functional as F

try:
    import torch
    import torch.nn.functional as TF
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the oracle "
                                                      "these tests compare with)")


def as_np(t):
    return np.asarray(t.detach()._array())


def grads_of(fn, tensors, seed_grad):
    out = fn(*tensors)
    return out, mt.autograd.grad(out, tensors, seed_grad, allow_unused=True)


# --------------------------------------------------------------------------- grid_sample

MODES = ("bilinear", "nearest", "bicubic")
PADDINGS = ("zeros", "border", "reflection")


def _grid(rng, shape, trial):
    """Random points well outside [-1, 1] too; some trials on half and quarter steps
    (pixel centres and borders, exact reflections)."""
    g = rng.uniform(-2.6, 2.6, shape)
    if trial == 1:
        g = np.round(g * 4) / 4
    elif trial == 2:
        g[..., 0] = np.round(g[..., 0] * 2) / 2
    return g


@pytest.mark.parametrize("d, mode, padding_mode, align_corners",
                         [c for c in itertools.product((2, 3), MODES, PADDINGS, (False, True))
                          if not (c[0] == 3 and c[1] == "bicubic")])
def test_grid_sample_values_and_gradients_match_torch(d, mode, padding_mode, align_corners):
    rng = np.random.default_rng([d, MODES.index(mode), PADDINGS.index(padding_mode),
                                 align_corners])
    for trial in range(4):
        spatial = tuple(int(n) for n in rng.integers(1, 6, d))
        out_spatial = tuple(int(n) for n in rng.integers(1, 5, d))
        x = rng.standard_normal((2, 3) + spatial)
        g = _grid(rng, (2,) + out_spatial + (d,), trial)
        for dtype, tol in ((np.float64, 1e-10), (np.float32, 2e-5)):
            tx = torch.tensor(x.astype(dtype), requires_grad=True)
            tg = torch.tensor(g.astype(dtype), requires_grad=True)
            expected = TF.grid_sample(tx, tg, mode, padding_mode, align_corners)
            seed = rng.standard_normal(tuple(expected.shape)).astype(dtype)
            expected_grads = torch.autograd.grad(expected, (tx, tg), torch.tensor(seed))
            mx = mt.tensor(x.astype(dtype), requires_grad=True)
            mg = mt.tensor(g.astype(dtype), requires_grad=True)
            out, grads = grads_of(lambda a, b: F.grid_sample(a, b, mode, padding_mode,
                                                             align_corners),
                                  (mx, mg), mt.tensor(seed))
            assert out.dtype == mx.dtype and out.is_contiguous()
            what = f"trial {trial} {dtype.__name__} input {spatial} grid {g.shape}"
            for ours, theirs in zip((out,) + tuple(grads), (expected,) + expected_grads):
                theirs = theirs.detach().numpy()
                assert as_np(ours).shape == theirs.shape, what
                scale = 1 + np.abs(theirs).max(initial=0)
                np.testing.assert_allclose(as_np(ours), theirs, rtol=0, atol=tol * scale,
                                           err_msg=what)


def test_grid_sample_nan_and_infinite_points_match_torch():
    """PyTorch's CPU kernels take a NaN coordinate as 0 (2-d) or the last position (3-d)
    under border and reflection; under zeros, bilinear gives NaN (2-d) or 0 (3-d)."""
    for d in (2, 3):
        x = np.arange(3 * 4 * (2 if d == 3 else 1), dtype=np.float64).reshape(
            (1, 1) + ((2,) if d == 3 else ()) + (3, 4))
        points = [[np.nan, 0.2], [0.3, np.nan], [np.inf, 0.0], [-np.inf, 0.1]]
        g = np.array([p + [-1.0] * (d - 2) for p in points]).reshape((1, 1, 4, d) if d == 2
                                                                      else (1, 1, 1, 4, d))
        for mode, padding_mode in itertools.product(MODES[:2 if d == 3 else 3], PADDINGS):
            expected = TF.grid_sample(torch.tensor(x), torch.tensor(g), mode, padding_mode,
                                      False).numpy()
            with warnings.catch_warnings():
                warnings.simplefilter("error")      # NaN points raise no NumPy warning
                ours = as_np(F.grid_sample(mt.tensor(x), mt.tensor(g), mode, padding_mode,
                                           False))
            np.testing.assert_allclose(ours, expected, equal_nan=True,
                                       err_msg=f"{d}-d {mode} {padding_mode}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_grid_sample_half_types_match_torch(dtype):
    """Computed in the type itself, as PyTorch's CPU kernel does."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    g = rng.uniform(-1.3, 1.3, (2, 4, 3, 2)).astype(np.float32)
    rtol, atol = {"float16": (4e-3, 2e-3), "bfloat16": (3e-2, 2e-2)}[dtype]
    for mode, padding_mode in itertools.product(MODES, PADDINGS):
        expected = TF.grid_sample(torch.tensor(x).to(getattr(torch, dtype)),
                                  torch.tensor(g).to(getattr(torch, dtype)), mode, padding_mode,
                                  False)
        ours = F.grid_sample(mt.tensor(x).to(getattr(mt, dtype)),
                             mt.tensor(g).to(getattr(mt, dtype)), mode, padding_mode, False)
        assert ours.dtype is getattr(mt, dtype)
        np.testing.assert_allclose(as_np(ours.float()), expected.float().numpy(), rtol=rtol,
                                   atol=atol, err_msg=f"{mode} {padding_mode}")


def _same_error(call_torch, call_ours):
    with pytest.raises(Exception) as expected:
        call_torch()
    with pytest.raises(expected.type) as ours:
        call_ours()
    gist = str(expected.value).split(",")[0].split(" but ")[0]
    assert gist[:40] in str(ours.value), (str(ours.value), str(expected.value))


@pytest.mark.parametrize("case", range(11))
def test_grid_sample_errors_match_torch(case):
    x, g = np.zeros((2, 3, 4, 5)), np.zeros((2, 3, 3, 2))
    calls = [
        lambda F, T: F.grid_sample(T(x), T(g), mode="cubic", align_corners=False),
        lambda F, T: F.grid_sample(T(x), T(g), padding_mode="wrap", align_corners=False),
        lambda F, T: F.grid_sample(T(x), T(g[:1]), align_corners=False),
        lambda F, T: F.grid_sample(T(x), T(g[..., :1]), align_corners=False),
        lambda F, T: F.grid_sample(T(x[0]), T(g[0]), align_corners=False),
        lambda F, T: F.grid_sample(T(x[:, :, :0]), T(g), align_corners=False),
        lambda F, T: F.grid_sample(T(x[:, :, None]), T(g[:, None, :, :, [0, 1, 1]]),
                                   mode="bicubic", align_corners=False),
        lambda F, T: F.grid_sample(T(x), T(g).double(), align_corners=False),
        lambda F, T: F.grid_sample(T(x).long(), T(g).long(), align_corners=False),
        lambda F, T: F.grid_sample(T(x), T(g[:, None]), align_corners=False),
        lambda F, T: F.grid_sample(T(x[:, :, None]), T(g), align_corners=False),
    ]

    def to_torch(a):
        return torch.tensor(a, dtype=torch.float32)

    def to_mt(a):
        return mt.tensor(a, dtype=mt.float32)
    _same_error(lambda: calls[case](TF, to_torch), lambda: calls[case](F, to_mt))


def test_grid_sample_empty_batches_and_channels():
    for shape, grid_shape in (((0, 3, 4, 5), (0, 3, 3, 2)), ((2, 0, 4, 5), (2, 3, 3, 2)),
                              ((2, 3, 4, 5), (2, 0, 3, 2))):
        expected = TF.grid_sample(torch.zeros(shape), torch.zeros(grid_shape),
                                  align_corners=False)
        x, g = mt.zeros(shape, requires_grad=True), mt.zeros(grid_shape, requires_grad=True)
        ours = F.grid_sample(x, g, align_corners=False)
        assert tuple(ours.shape) == tuple(expected.shape)
        grads = mt.autograd.grad(ours.sum(), (x, g))
        assert [tuple(t.shape) for t in grads] == [shape, grid_shape]
        assert not any(as_np(t).any() for t in grads)


def test_grid_sample_default_align_corners_warns_as_torch():
    x, g = mt.zeros(1, 1, 2, 2), mt.zeros(1, 1, 1, 2)
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        F.grid_sample(x, g)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.grid_sample(x, g, align_corners=False)


@pytest.mark.parametrize("in_dims", [(0, 0), (1, 3), (None, 0), (2, None), (0, -1)])
@pytest.mark.parametrize("mode", MODES)
def test_grid_sample_vmap_and_vmap_of_grad_match_loop(in_dims, mode):
    """Every batching of input and grid: one call (never the per-sample loop), values and
    per-sample gradients as a loop's."""
    rng = np.random.default_rng(len(mode))
    x = mt.tensor(rng.standard_normal((3, 2, 2, 4, 5)))
    g = mt.tensor(rng.uniform(-1.4, 1.4, (3, 2, 3, 2, 2)))
    xb = x.movedim(0, in_dims[0]) if in_dims[0] is not None else x[0]
    gb = g.movedim(0, in_dims[1]) if in_dims[1] is not None else g[0]

    def f(a, b):
        return F.grid_sample(a, b, mode, "reflection", True)

    def loss(a, b):
        return (f(a, b) ** 2).sum()

    def pick(t, dim, i):
        return t if dim is None else t.select(dim, i)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Batching rule not implemented")
        batched = mt.vmap(f, in_dims=in_dims)(xb, gb)
        grads = mt.vmap(mt.func.grad(loss, argnums=(0, 1)), in_dims=in_dims)(xb, gb)
    for i in range(3):
        a, b = pick(xb, in_dims[0], i), pick(gb, in_dims[1], i)
        np.testing.assert_allclose(as_np(batched[i]), as_np(f(a, b)), rtol=1e-12, atol=1e-12)
        expected = mt.func.grad(loss, argnums=(0, 1))(a, b)
        for ours, theirs in zip(grads, expected):
            np.testing.assert_allclose(as_np(ours[i]), as_np(theirs), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("wanted", [(True, True), (True, False), (False, True)])
def test_grid_sample_graph_of_the_gradient_gives_the_same_gradient(mode, wanted):
    """create_graph runs the derivatives written in microtensor ops; a plain backward runs
    the same formulas on NumPy arrays: the same values, whichever inputs require grad."""
    rng = np.random.default_rng(MODES.index(mode))
    x = mt.tensor(rng.standard_normal((2, 3, 4, 5)), requires_grad=wanted[0])
    g = mt.tensor(rng.uniform(-1.6, 1.6, (2, 3, 2, 2)), requires_grad=wanted[1])
    inputs = [t for t in (x, g) if t.requires_grad]
    out = F.grid_sample(x, g, mode, "reflection", False)
    seed = mt.tensor(rng.standard_normal(tuple(out.shape)))
    plain = mt.autograd.grad(out, inputs, seed, retain_graph=True)
    graphed = mt.autograd.grad(out, inputs, seed, create_graph=True)
    for a, b in zip(plain, graphed):
        np.testing.assert_allclose(as_np(a), as_np(b), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- affine_grid

@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 1, 5), (2, 3, 4, 1), (2, 1, 2, 3, 4),
                                  (1, 2, 1, 3, 1)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_matches_torch_with_gradient(size, align_corners):
    d = len(size) - 2
    rng = np.random.default_rng(len(size) + 7 * align_corners)
    theta = rng.standard_normal((size[0], d, d + 1))
    seed = rng.standard_normal(tuple(size[:1]) + tuple(size[2:]) + (d,))
    tt = torch.tensor(theta, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # the unit-size warning, checked below
        expected = TF.affine_grid(tt, size, align_corners=align_corners)
        mth = mt.tensor(theta, requires_grad=True)
        ours = F.affine_grid(mth, size, align_corners=align_corners)
    np.testing.assert_allclose(as_np(ours), expected.detach().numpy(), rtol=1e-12, atol=1e-14)
    (expected_grad,) = torch.autograd.grad(expected, tt, torch.tensor(seed))
    (grad,) = mt.autograd.grad(ours, mth, mt.tensor(seed))
    np.testing.assert_allclose(as_np(grad), expected_grad.numpy(), rtol=1e-12, atol=1e-12)
    assert tuple(ours.stride()) == tuple(expected.stride())


def test_affine_grid_then_grid_sample_gradient_matches_torch():
    """A spatial transformer's step: the gradient reaches theta through both ops."""
    rng = np.random.default_rng(3)
    x, theta = rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((2, 2, 3)) * 0.8
    tx, tt = torch.tensor(x, requires_grad=True), torch.tensor(theta, requires_grad=True)
    expected = TF.grid_sample(tx, TF.affine_grid(tt, (2, 3, 4, 4), align_corners=False),
                              padding_mode="border", align_corners=False)
    expected_grads = torch.autograd.grad((expected ** 2).sum(), (tx, tt))
    mx, mth = mt.tensor(x, requires_grad=True), mt.tensor(theta, requires_grad=True)
    ours = F.grid_sample(mx, F.affine_grid(mth, (2, 3, 4, 4), align_corners=False),
                         padding_mode="border", align_corners=False)
    grads = mt.autograd.grad((ours ** 2).sum(), (mx, mth))
    np.testing.assert_allclose(as_np(ours), expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    for a, b in zip(grads, expected_grads):
        np.testing.assert_allclose(as_np(a), b.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", range(6))
def test_affine_grid_errors_match_torch(case):
    theta = np.zeros((2, 2, 3))
    calls = [
        lambda F, T: F.affine_grid(T(theta), (2, 3, 4, 5, 6), align_corners=False),
        lambda F, T: F.affine_grid(T(theta), (2, 3, 4), align_corners=False),
        lambda F, T: F.affine_grid(T(theta).long(), (2, 3, 4, 5), align_corners=False),
        lambda F, T: F.affine_grid(T(theta), (2, 3, 0, 5), align_corners=False),
        lambda F, T: F.affine_grid(T(theta), (3, 3, 4, 5), align_corners=False),
        lambda F, T: F.affine_grid(T(theta[0]), (2, 3, 4, 5), align_corners=False),
    ]
    _same_error(lambda: calls[case](TF, torch.tensor), lambda: calls[case](F, mt.tensor))


def test_affine_grid_warnings_match_torch():
    theta = mt.zeros(1, 2, 3)
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        F.affine_grid(theta, (1, 1, 2, 2))
    with pytest.warns(UserWarning, match="unit-size grids when align_corners=True"):
        F.affine_grid(theta, (1, 1, 1, 2), align_corners=True)


# --------------------------------------------------------------------------- CTC loss

def _ctc_case(rng, concatenated=False, float32=False):
    """Random log-probabilities (normalised or not), targets without blanks, lengths
    (some alignments impossible: inputs too short for the target's labels and repeats)."""
    steps, batch, classes = (int(v) for v in rng.integers(1, 8, 3))
    classes += 1
    blank = int(rng.integers(0, classes))
    input_lengths = rng.integers(0, steps + 1, batch)
    target_lengths = rng.integers(0, 5, batch)
    longest = int(target_lengths.max()) + int(rng.integers(0, 2))
    labels = rng.integers(0, classes - 1, (batch, longest))
    targets = labels + (labels >= blank)                  # every class but the blank
    log_probs = rng.standard_normal((steps, batch, classes))
    if rng.random() < 0.5:
        log_probs = log_probs - np.log(np.exp(log_probs).sum(-1, keepdims=True))
    if concatenated:
        targets = np.concatenate([row[:n] for row, n in zip(targets, target_lengths)])
    dtype = np.float32 if float32 else np.float64
    return log_probs.astype(dtype), targets, input_lengths, target_lengths, blank


def _both_ctc(log_probs, targets, input_lengths, target_lengths, as_tuples=False, **kwargs):
    """PyTorch's and microtensor's loss and gradient with respect to log_probs."""
    def lengths(values, lib):
        return tuple(int(v) for v in values) if as_tuples else lib.tensor(values)
    tx = torch.tensor(log_probs, requires_grad=True)
    expected = TF.ctc_loss(tx, torch.tensor(targets), lengths(input_lengths, torch),
                           lengths(target_lengths, torch), **kwargs)
    seed = np.linspace(0.5, 1.5, expected.numel()).reshape(tuple(expected.shape)).astype(
        log_probs.dtype)
    (expected_grad,) = torch.autograd.grad(expected, tx, torch.tensor(seed))
    mx = mt.tensor(log_probs, requires_grad=True)
    ours = F.ctc_loss(mx, mt.tensor(targets), lengths(input_lengths, mt),
                      lengths(target_lengths, mt), **kwargs)
    (grad,) = mt.autograd.grad(ours, mx, mt.tensor(seed))
    return (ours, grad), (expected, expected_grad)


def _assert_ctc_close(ours, theirs, what, tol):
    for a, b in zip(ours, theirs):
        assert tuple(a.shape) == tuple(b.shape) and a.dtype.name == str(b.dtype)[6:], what
        np.testing.assert_allclose(as_np(a), b.detach().numpy(), rtol=tol, atol=tol,
                                   equal_nan=True, err_msg=what)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_values_and_gradients_match_torch(reduction, zero_infinity):
    """Padded and concatenated targets, lengths as tensors and tuples, float64 and
    float32, impossible alignments among them (inf, NaN gradients; 0 with
    zero_infinity)."""
    rng = np.random.default_rng(["none", "mean", "sum"].index(reduction) + 3 * zero_infinity)
    impossible = 0
    for trial in range(30):
        concatenated, float32, as_tuples = trial % 2, trial % 3 == 0, trial % 4 == 1
        log_probs, targets, input_lengths, target_lengths, blank = _ctc_case(
            rng, concatenated, float32)
        ours, theirs = _both_ctc(log_probs, targets, input_lengths, target_lengths,
                                 as_tuples, blank=blank, reduction=reduction,
                                 zero_infinity=zero_infinity)
        impossible += not np.isfinite(theirs[1].numpy()).all()
        _assert_ctc_close(ours, theirs, f"trial {trial}", 1e-4 if float32 else 1e-10)
    assert zero_infinity or impossible, "no impossible alignment was compared"


def test_ctc_loss_unbatched_matches_torch():
    rng = np.random.default_rng(11)
    log_probs = rng.standard_normal((6, 4))
    for targets, as_tuples in (([1, 3, 3], False), ([2], True), ([], False)):
        ours, theirs = _both_ctc(log_probs, np.array(targets, np.int64),
                                 [6] if as_tuples else np.array(6),
                                 [len(targets)] if as_tuples else np.array(len(targets)),
                                 as_tuples, reduction="none")
        _assert_ctc_close(ours, theirs, str(targets), 1e-10)


def test_ctc_loss_module_matches_torch():
    rng = np.random.default_rng(12)
    log_probs, targets, input_lengths, target_lengths, blank = _ctc_case(rng)
    module, expected_module = mt.nn.CTCLoss(blank=blank, reduction="sum", zero_infinity=True), \
        torch.nn.CTCLoss(blank=blank, reduction="sum", zero_infinity=True)
    assert repr(module) == repr(expected_module) == "CTCLoss()"
    ours = module(mt.tensor(log_probs), mt.tensor(targets), mt.tensor(input_lengths),
                  mt.tensor(target_lengths))
    expected = expected_module(torch.tensor(log_probs), torch.tensor(targets),
                               torch.tensor(input_lengths), torch.tensor(target_lengths))
    np.testing.assert_allclose(ours.item(), expected.item(), rtol=1e-12)


def test_ctc_gradient_is_the_derivative_through_log_softmax():
    """PyTorch's convention adds exp(log_probs): through log_softmax (how log_probs are
    made) that term cancels, and the gradient of the logits is the true derivative, to
    the second order too (the derivative is written in microtensor ops)."""
    rng = np.random.default_rng(13)
    logits = mt.tensor(rng.standard_normal((5, 2, 4)), requires_grad=True)
    targets, input_lengths, target_lengths = mt.tensor([[1, 2, 2], [3, 1, 0]]), \
        mt.tensor([5, 4]), mt.tensor([3, 2])

    def loss(x):
        return F.ctc_loss(x.log_softmax(2), targets, input_lengths, target_lengths,
                          reduction="sum")
    assert mt.autograd.gradcheck(loss, (logits,))
    assert mt.autograd.gradgradcheck(loss, (logits,))


def test_ctc_graph_of_the_gradient_gives_the_same_gradient():
    """create_graph runs the derivative written in microtensor ops; a plain backward runs
    the same formulas on NumPy arrays: the same values."""
    rng = np.random.default_rng(14)
    log_probs, targets, input_lengths, target_lengths, blank = _ctc_case(rng)
    x = mt.tensor(log_probs, requires_grad=True)
    loss = F.ctc_loss(x, mt.tensor(targets), mt.tensor(input_lengths),
                      mt.tensor(target_lengths), blank=blank, reduction="sum")
    (plain,) = mt.autograd.grad(loss, x, retain_graph=True)
    (graphed,) = mt.autograd.grad(loss, x, create_graph=True)
    assert graphed.requires_grad
    np.testing.assert_allclose(as_np(graphed), as_np(plain), rtol=1e-10, atol=1e-12,
                               equal_nan=True)


def test_ctc_vmap_with_lengths_that_differ_per_sample_matches_loop():
    """log_probs, targets and both lengths batched, the lengths differing per sample: one
    call (never the per-sample loop), values and per-sample gradients as a loop's."""
    rng = np.random.default_rng(15)
    log_probs = mt.tensor(rng.standard_normal((3, 6, 2, 4)))
    targets = mt.tensor(rng.integers(1, 4, (3, 2, 3)))
    input_lengths = mt.tensor([[6, 5], [4, 6], [6, 1]])
    target_lengths = mt.tensor([[3, 1], [2, 0], [3, 2]])

    def loss(lp, t, il, tl):
        return F.ctc_loss(lp, t, il, tl, reduction="mean", zero_infinity=True)
    args = (log_probs, targets, input_lengths, target_lengths)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Batching rule not implemented")
        values = mt.vmap(loss)(*args)
        grads = mt.vmap(mt.func.grad(loss))(*args)
    for i in range(3):
        sample = [a[i] for a in args]
        np.testing.assert_allclose(values[i].item(), loss(*sample).item(), rtol=1e-12)
        np.testing.assert_allclose(as_np(grads[i]), as_np(mt.func.grad(loss)(*sample)),
                                   rtol=1e-10, atol=1e-12)


def test_ctc_reads_noncontiguous_concatenated_targets_by_their_strides():
    """PyTorch's CPU kernel reads such targets as if contiguous (a wrong loss); here they
    give the loss of their values, PyTorch's on a contiguous copy."""
    rng = np.random.default_rng(16)
    log_probs = rng.standard_normal((4, 3, 3))
    rows = np.array([[1, 7, 9], [2, 7, 9], [2, 7, 9], [1, 7, 9], [1, 7, 9]])
    ours = F.ctc_loss(mt.tensor(log_probs), mt.tensor(rows)[:, 0], (4, 3, 3), (2, 1, 2),
                      reduction="none")
    expected = TF.ctc_loss(torch.tensor(log_probs), torch.tensor(rows[:, 0].copy()),
                           (4, 3, 3), (2, 1, 2), reduction="none")
    np.testing.assert_allclose(as_np(ours), expected.numpy(), rtol=1e-12)


def test_ctc_loss_default_reduction_of_the_op_is_torchs():
    """``torch.ctc_loss`` reduces nothing by default (whatever its schema says)."""
    log_probs = np.log(np.full((3, 2, 3), 1 / 3))
    args = (np.array([[1, 2], [2, 0]]), np.array([3, 2]), np.array([2, 1]))
    expected = torch.ctc_loss(torch.tensor(log_probs), *(torch.tensor(a) for a in args))
    ours = mt.ctc_loss(mt.tensor(log_probs), *(mt.tensor(a) for a in args))
    np.testing.assert_allclose(as_np(ours), expected.numpy(), rtol=1e-12)


@pytest.mark.parametrize("case", range(16))
def test_ctc_loss_errors_match_torch(case):
    lp = np.zeros((6, 3, 5))
    tg, il, tl = np.ones((3, 4), np.int64), np.array([6, 5, 4]), np.array([4, 2, 0])
    calls = [
        lambda F, T: F.ctc_loss(T(lp), T(tg), T(il), T(tl), blank=5),
        lambda F, T: F.ctc_loss(T(lp), T(tg), T(il), T(tl), blank=-1),
        lambda F, T: F.ctc_loss(T(lp), T(tg), T(il[:2]), T(tl)),
        lambda F, T: F.ctc_loss(T(lp), T(tg), T(il), T(tl[:2])),
        lambda F, T: F.ctc_loss(T(lp), T(tg), T(np.array([7, 5, 4])), T(tl)),
        lambda F, T: F.ctc_loss(T(lp), T(tg), T(il), T(np.array([5, 2, 0]))),
        lambda F, T: F.ctc_loss(T(lp), T(tg), T(np.array([-1, 5, 4])), T(tl)),
        lambda F, T: F.ctc_loss(T(lp), T(tg), T(il), T(np.array([-1, 2, 0]))),
        lambda F, T: F.ctc_loss(T(lp), T(tg[:2]), T(il), T(tl)),
        lambda F, T: F.ctc_loss(T(lp), T(tg), T(il).double(), T(tl)),
        lambda F, T: F.ctc_loss(T(lp), T(tg), T(il), T(tl), reduction="avg"),
        lambda F, T: F.ctc_loss(T(lp[0]), T(tg), T(il), T(tl)),
        lambda F, T: F.ctc_loss(T(lp), T(tg.reshape(-1)[:5]), T(il), T(tl)),
        lambda F, T: F.ctc_loss(T(lp[None]), T(tg), T(il), T(tl)),
        lambda F, T: F.ctc_loss(T(lp[:0]), T(tg), T(il * 0), T(tl)),
        lambda F, T: F.ctc_loss(T(lp).half(), T(tg), T(il), T(tl)),
    ]
    _same_error(lambda: calls[case](TF, torch.tensor), lambda: calls[case](F, mt.tensor))
