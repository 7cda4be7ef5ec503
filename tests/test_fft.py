"""microtensor.fft against torch.fft: values, dtypes and shapes for every function, norm and
size argument; PyTorch's errors; gradients (against torch's and by gradcheck in float64
through real-valued wrappers); vmap against a loop, without the fallback."""
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor.autograd import gradcheck, gradgradcheck

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")

rng = np.random.default_rng(0)
REAL = rng.standard_normal((3, 8))
COMPLEX = rng.standard_normal((3, 8)) + 1j * rng.standard_normal((3, 8))
NORMS = [None, "backward", "ortho", "forward"]

# name -> (function of (library, input), input values)
CASES = {
    "fft": (lambda m, t, norm: m.fft.fft(t, norm=norm), COMPLEX),
    "fft_real_padded": (lambda m, t, norm: m.fft.fft(t, n=11, norm=norm), REAL),
    "fft_trimmed_dim0": (lambda m, t, norm: m.fft.fft(t, n=2, dim=0, norm=norm), COMPLEX),
    "ifft": (lambda m, t, norm: m.fft.ifft(t, n=10, dim=0, norm=norm), COMPLEX),
    "fft2": (lambda m, t, norm: m.fft.fft2(t, norm=norm), COMPLEX),
    "ifft2": (lambda m, t, norm: m.fft.ifft2(t, s=(4, 5), norm=norm), REAL),
    "fftn": (lambda m, t, norm: m.fft.fftn(t, norm=norm), COMPLEX),
    "fftn_s": (lambda m, t, norm: m.fft.fftn(t, s=(-1, 6), norm=norm), COMPLEX),
    "ifftn_dim": (lambda m, t, norm: m.fft.ifftn(t, s=(9,), dim=(1,), norm=norm), COMPLEX),
    "rfft": (lambda m, t, norm: m.fft.rfft(t, norm=norm), REAL),
    "rfft_odd": (lambda m, t, norm: m.fft.rfft(t, n=7, norm=norm), REAL),
    "rfft_dim0": (lambda m, t, norm: m.fft.rfft(t, dim=0, norm=norm), REAL),
    "irfft": (lambda m, t, norm: m.fft.irfft(t, norm=norm), COMPLEX),
    "irfft_odd": (lambda m, t, norm: m.fft.irfft(t, n=9, norm=norm), COMPLEX),
    "irfft_long": (lambda m, t, norm: m.fft.irfft(t, n=20, norm=norm), COMPLEX),
    "irfft_real_input": (lambda m, t, norm: m.fft.irfft(t, n=6, dim=0, norm=norm), REAL),
    "rfft2": (lambda m, t, norm: m.fft.rfft2(t, norm=norm), REAL),
    "irfft2": (lambda m, t, norm: m.fft.irfft2(t, s=(4, 7), norm=norm), COMPLEX),
    "rfftn": (lambda m, t, norm: m.fft.rfftn(t, s=(2, 5), norm=norm), REAL),
    "irfftn": (lambda m, t, norm: m.fft.irfftn(t, norm=norm), COMPLEX),
    "hfft": (lambda m, t, norm: m.fft.hfft(t, norm=norm), COMPLEX),
    "hfft_odd": (lambda m, t, norm: m.fft.hfft(t, n=7, dim=0, norm=norm), COMPLEX),
    "ihfft": (lambda m, t, norm: m.fft.ihfft(t, norm=norm), REAL),
    "ihfft_odd": (lambda m, t, norm: m.fft.ihfft(t, n=5, norm=norm), REAL),
    "hfft2": (lambda m, t, norm: m.fft.hfft2(t, norm=norm), COMPLEX),
    "hfftn": (lambda m, t, norm: m.fft.hfftn(t, s=(4, 5), norm=norm), COMPLEX),
    "ihfft2": (lambda m, t, norm: m.fft.ihfft2(t, norm=norm), REAL),
    "ihfftn": (lambda m, t, norm: m.fft.ihfftn(t, s=(2, 7), norm=norm), REAL),
}


def _numpy(t):
    if isinstance(t, torch.Tensor):
        return t.detach().resolve_conj().numpy()
    return t.detach().numpy()


def _same(ours, theirs, tol):
    assert ours.dtype.name == str(theirs.dtype)[6:]
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(_numpy(ours), _numpy(theirs), rtol=tol, atol=tol)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("single", [False, True])
def test_forward_matches_torch(name, norm, single):
    fn, values = CASES[name]
    if single:     # float32 in, complex64 out: PyTorch keeps single precision
        values = values.astype(np.complex64 if np.iscomplexobj(values) else np.float32)
    _same(fn(mt, mt.tensor(values), norm), fn(torch, torch.tensor(values), norm),
          1e-4 if single else 1e-12)


def test_integer_input_computes_in_the_default_dtype():
    ints = np.arange(6).reshape(2, 3)
    for name in ("fft", "rfft", "ihfft", "hfft"):
        _same(getattr(mt.fft, name)(mt.tensor(ints)), getattr(torch.fft, name)(torch.tensor(ints)),
              1e-5)


@pytest.mark.parametrize("call", [
    lambda m, x: m.fft.fft(x, norm="bad"), lambda m, x: m.fft.rfft(x.to(m.cfloat)),
    lambda m, x: m.fft.ihfft(x.to(m.cfloat)), lambda m, x: m.fft.fft(x, n=0),
    lambda m, x: m.fft.irfft(x, n=0), lambda m, x: m.fft.fftn(x, s=(2, 3, 4)),
    lambda m, x: m.fft.fftn(x, s=(2,), dim=(0, 1)), lambda m, x: m.fft.fftn(x, dim=(1, -1)),
    lambda m, x: m.fft.fft(x.half()), lambda m, x: m.fft.irfft(x[:, :1])])
def test_errors_match_torch(call):
    with pytest.raises(Exception) as theirs:
        call(torch, torch.tensor(REAL))
    with pytest.raises(type(theirs.value)) as ours:
        call(mt, mt.tensor(REAL))
    assert str(ours.value) == str(theirs.value)


def test_dim_out_of_range_is_index_error():
    with pytest.raises(IndexError):
        mt.fft.fft(mt.tensor(REAL), dim=2)


def test_frequencies_and_shifts_match_torch():
    for n, d in ((8, 1.0), (7, 0.5), (1, 2.0)):
        _same(mt.fft.fftfreq(n, d), torch.fft.fftfreq(n, d), 1e-7)
        _same(mt.fft.rfftfreq(n, d, dtype=mt.float64),
              torch.fft.rfftfreq(n, d, dtype=torch.float64), 1e-15)
    values = rng.standard_normal((4, 5))
    for dim in (None, 0, (1,), (0, 1)):
        for name in ("fftshift", "ifftshift"):
            _same(getattr(mt.fft, name)(mt.tensor(values), dim=dim),
                  getattr(torch.fft, name)(torch.tensor(values), dim=dim), 0)


# --------------------------------------------------------------------------- gradients

def _loss(m, out):
    """A real loss that weighs every real and imaginary part differently."""
    parts = m.view_as_real(out.resolve_conj()) if out.is_complex() else out
    weights = m.arange(parts.numel(), dtype=parts.dtype).reshape(parts.shape).sin()
    return (parts * weights).sum()


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
@pytest.mark.parametrize("name", CASES)
def test_gradients_match_torch(name, norm):
    fn, values = CASES[name]
    ours = mt.tensor(values, requires_grad=True)
    theirs = torch.tensor(values, requires_grad=True)
    _loss(mt, fn(mt, ours, norm)).backward()
    _loss(torch, fn(torch, theirs, norm)).backward()
    _same(ours.grad, theirs.grad, 1e-10)


@pytest.mark.parametrize("name", ["fft", "ifft2", "rfft_odd", "irfft", "irfft_odd",
                                  "irfft2", "rfftn", "hfft", "hfft_odd", "ihfft"])
def test_gradcheck_and_gradgradcheck_in_float64(name):
    fn, values = CASES[name]
    small = values[:2, :5]
    x = mt.tensor(small, requires_grad=True)
    assert gradcheck(lambda t: fn(mt, t, "ortho"), (x,))
    assert gradgradcheck(lambda t: fn(mt, t, "backward"), (x,))


def test_real_valued_wrapper_gradcheck():
    x = mt.tensor(REAL[:2, :6], requires_grad=True)
    assert gradcheck(lambda t: mt.fft.rfft(t).abs().sum(), (x,))
    assert gradcheck(lambda t: mt.fft.irfft(mt.fft.rfft(t) * 1j, n=6).pow(2).sum(), (x,))


# --------------------------------------------------------------------------- vmap

@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("in_dim", [0, 1])
def test_vmap_matches_loop_without_fallback(name, in_dim):
    fn, values = CASES[name]
    batch = np.stack([values * (1 + i) for i in range(3)], axis=in_dim)
    x = mt.tensor(batch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # the per-sample loop fallback warns
        batched = mt.vmap(lambda t: fn(mt, t, "ortho"), in_dims=in_dim)(x)
    expected = mt.stack([fn(mt, x.select(in_dim, i), "ortho") for i in range(3)])
    np.testing.assert_allclose(batched.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)


def test_vmap_of_grad_matches_loop():
    x = mt.tensor(np.stack([REAL * (1 + i) for i in range(3)]))

    def loss(t):
        return _loss(mt, mt.fft.irfft(mt.fft.rfft(t, n=7) * (1 + 2j), n=8))
    per_sample = mt.vmap(mt.func.grad(loss))(x)
    for i in range(3):
        leaf = x[i].detach().requires_grad_()
        loss(leaf).backward()
        np.testing.assert_allclose(per_sample[i].numpy(), leaf.grad.numpy(), rtol=1e-12)


# --------------------------------------------------------------------------- stft, istft

SIGNAL = rng.standard_normal(40)
SIGNALS = rng.standard_normal((2, 37))


def _window(m, n=8, shift=0.0):
    return m.hann_window(n, dtype=m.float64) + shift


STFT = {
    "default": (lambda m, t: m.stft(t, 8, return_complex=True), SIGNAL),
    "window_hop": (lambda m, t: m.stft(t, 8, hop_length=3, window=_window(m),
                                       return_complex=True), SIGNAL),
    "short_window": (lambda m, t: m.stft(t, 8, hop_length=3, win_length=6,
                                         window=_window(m, 6), return_complex=True), SIGNAL),
    "method_uncentered": (lambda m, t: t.stft(8, center=False, normalized=True,
                                              return_complex=True), SIGNALS),
    "constant_twosided": (lambda m, t: m.stft(t, 8, pad_mode="constant", onesided=False,
                                              return_complex=True), SIGNALS),
    "real_pairs": (lambda m, t: m.stft(t, 8, return_complex=False), SIGNAL),
    "complex_input": (lambda m, t: m.stft(t * (1 + 2j), 8), SIGNAL),
    "aligned": (lambda m, t: m.stft(t, 8, win_length=5, center=False, align_to_window=True,
                                    return_complex=True), SIGNAL),
    "istft": (lambda m, t: m.istft(m.stft(t, 8, window=_window(m), return_complex=True), 8,
                                   window=_window(m)), SIGNAL),
    "istft_length": (lambda m, t: m.istft(
        m.stft(t, 8, hop_length=3, window=_window(m), return_complex=True), 8, hop_length=3,
        window=_window(m), length=45), SIGNAL),
    "istft_uncentered": (lambda m, t: m.istft(
        m.stft(t, 8, window=_window(m, shift=0.1), center=False, return_complex=True), 8,
        window=_window(m, shift=0.1), center=False), SIGNALS),
    "istft_twosided": (lambda m, t: m.istft(
        m.stft(t, 8, window=_window(m), onesided=False, normalized=True, return_complex=True),
        8, window=_window(m), normalized=True), SIGNALS),
    "istft_complex": (lambda m, t: m.istft(m.stft(t * (1 - 1j), 8, window=_window(m)), 8,
                                           window=_window(m), return_complex=True), SIGNAL),
}


@pytest.mark.filterwarnings("ignore::UserWarning")     # PyTorch's about return_complex=False
@pytest.mark.parametrize("name", STFT)
def test_stft_and_istft_match_torch_with_gradients(name):
    fn, values = STFT[name]
    ours, theirs = mt.tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)
    out, expected = fn(mt, ours), fn(torch, theirs)
    _same(out, expected, 1e-10)
    _loss(mt, out).backward()
    _loss(torch, expected).backward()
    _same(ours.grad, theirs.grad, 1e-10)


@pytest.mark.parametrize("call", [
    lambda m, x: m.stft(x, 8), lambda m, x: m.stft(x, 8, hop_length=0, return_complex=True),
    lambda m, x: m.stft(x, 8, win_length=9, return_complex=True),
    lambda m, x: m.stft(x, 8, window=m.ones(5, dtype=m.float64), return_complex=True),
    lambda m, x: m.stft(x, 60, center=False, return_complex=True),
    lambda m, x: m.stft(x, 8, align_to_window=True, return_complex=True),
    lambda m, x: m.istft(m.stft(x, 8, return_complex=True), 8, window=m.zeros(8)),
    lambda m, x: m.istft(x, 8), lambda m, x: m.istft(m.stft(x, 8, return_complex=True), 10)])
def test_stft_errors_match_torch(call):
    with pytest.raises(RuntimeError) as theirs:
        call(torch, torch.tensor(SIGNAL))
    with pytest.raises(RuntimeError) as ours:
        call(mt, mt.tensor(SIGNAL))
    # PyTorch's messages open with a description of the call; the reason follows
    reason = str(theirs.value).split(") : ")[-1].split(") ")[-1].split("\n")[0]
    assert reason.split(":")[0].strip() in str(ours.value)


def test_stft_under_vmap_matches_loop():
    x = mt.tensor(np.stack([SIGNAL * (1 + i) for i in range(3)], axis=1))
    fn = STFT["istft_length"][0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batched = mt.vmap(lambda t: fn(mt, t), in_dims=1)(x)
    expected = mt.stack([fn(mt, x[:, i]) for i in range(3)])
    np.testing.assert_allclose(batched.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)
