"""Complex dtypes: promotion, printing, creation, the views over complex storage, PyTorch's
refusals, and complex autograd, each compared with PyTorch."""
import warnings

import numpy as np
import pytest

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")

rng = np.random.default_rng(0)


def cz(*shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def torch_dtype(dt):
    return getattr(torch, dt.name)


# --------------------------------------------------------------------------- dtypes

def test_dtype_names_and_flags():
    assert mt.cfloat is mt.complex64 and mt.cdouble is mt.complex128
    assert mt.complex64.is_complex and not mt.complex64.is_floating_point
    assert mt.complex64.itemsize == 8 and mt.complex128.itemsize == 16
    assert mt.float32.to_complex() is mt.complex64 and mt.complex128.to_real() is mt.float64
    assert mt.zeros(2, dtype=mt.cfloat).is_complex() and not mt.zeros(2).is_complex()
    assert mt.is_complex(mt.zeros(2, dtype=mt.cdouble))
    assert mt.finfo(mt.complex64).eps == torch.finfo(torch.complex64).eps


NAMES = ["bool", "uint8", "int64", "float16", "float32", "float64", "complex64", "complex128"]


@pytest.mark.parametrize("a", NAMES)
@pytest.mark.parametrize("b", ["complex64", "complex128"])
def test_promote_types_matches_torch(a, b):
    ours = mt.promote_types(getattr(mt, a), getattr(mt, b))
    assert ours.name == str(torch.promote_types(getattr(torch, a), getattr(torch, b)))[6:]
    assert mt.can_cast(getattr(mt, b), getattr(mt, a)) == \
        torch.can_cast(getattr(torch, b), getattr(torch, a))


@pytest.mark.parametrize("dims", ["float32", "float64", "int64"])
@pytest.mark.parametrize("other", [1j, "complex128-0d", "complex64-0d"])
def test_result_type_with_lower_priority_complex(dims, other):
    x, tx = mt.ones(2, dtype=getattr(mt, dims)), torch.ones(2, dtype=getattr(torch, dims))
    if isinstance(other, str):
        name = other.split("-")[0]
        o, to = mt.tensor(1j, dtype=getattr(mt, name)), torch.tensor(1j, dtype=getattr(torch, name))
    else:
        o = to = other
    assert mt.result_type(x, o).name == str(torch.result_type(tx, to))[6:]
    assert (x + o).dtype.name == str((tx + to).dtype)[6:]


def test_python_complex_takes_the_default_complex_dtype():
    assert mt.tensor([1 + 2j]).dtype is mt.complex64
    assert mt.tensor([1, 2.5, 3j]).dtype is mt.complex64
    mt.set_default_dtype(mt.float64)
    try:
        assert mt.tensor(1j).dtype is mt.complex128
    finally:
        mt.set_default_dtype(mt.float32)


@pytest.mark.parametrize("values,dtype", [
    ([1 + 2j, 3 - 1j], None), ([1 + 2j, 3 - 1j], "complex128"),
    ([1.5 + 2j, -3.25 - 1e-5j], None), (1.5 - 2j, None), ([1e10 + 1j, 0j], None),
    ([[0.25 + 1j, -2j], [3, 1e-3j]], None), ([float("nan") + 1j, complex(0, float("inf"))], None)])
def test_repr_matches_torch(values, dtype):
    ours = mt.tensor(values, dtype=getattr(mt, dtype) if dtype else None)
    theirs = torch.tensor(values, dtype=getattr(torch, dtype) if dtype else None)
    assert repr(ours) == repr(theirs).replace("torch.", "microtensor.")


def test_requires_grad_repr_and_creation():
    x = mt.zeros(2, 3, dtype=mt.cfloat, requires_grad=True)
    assert repr(x) == repr(torch.zeros(2, 3, dtype=torch.cfloat, requires_grad=True))
    assert mt.ones(2, dtype=mt.cdouble).tolist() == [1 + 0j, 1 + 0j]
    assert mt.full((2,), 1 + 2j).dtype is mt.complex64


def test_randn_parts_have_variance_one_half():
    z = mt.randn(200000, dtype=mt.cfloat)
    assert z.dtype is mt.complex64
    parts = mt.view_as_real(z).numpy()
    assert abs(parts.mean()) < 0.01
    assert np.allclose(parts.var(axis=0), 0.5, atol=0.01)
    assert mt.rand(3, dtype=mt.cdouble).dtype is mt.complex128


# --------------------------------------------------------------------------- views

def test_real_imag_are_views_sharing_storage():
    x = mt.tensor([1 + 2j, 3 - 1j, 5 + 0.5j])
    r, i = x.real, x.imag
    assert r.dtype is mt.float32 and r._base is x
    assert (r.stride(), r.storage_offset(), i.storage_offset()) == ((2,), 0, 1)
    r.mul_(2)
    i[1] = 7.0
    assert x.tolist() == [2 + 2j, 6 + 7j, 10 + 0.5j]
    x.imag = mt.zeros(3)
    assert x.tolist() == [2, 6, 10]
    y = mt.ones(2)
    assert mt.real(y) is y
    with pytest.raises(RuntimeError, match="imag is not implemented for tensors with non-complex"):
        y.imag


def test_views_of_slices_match_torch_geometry():
    values = cz(4, 3)
    for index in (np.s_[1:], np.s_[::2], np.s_[:, 1], np.s_[1:, ::2]):
        ours = mt.tensor(values)[index]
        theirs = torch.tensor(values)[index]
        for fn in (lambda t, m: m.view_as_real(t), lambda t, m: t.real, lambda t, m: t.imag):
            a, b = fn(ours, mt), fn(theirs, torch)
            assert (a.shape, a.stride(), a.storage_offset()) == \
                (tuple(b.shape), b.stride(), b.storage_offset())
            assert np.array_equal(a.numpy(), b.numpy().astype(np.float64))


def test_view_as_complex_roundtrip_and_errors():
    x = mt.tensor(rng.standard_normal((3, 2)))
    z = mt.view_as_complex(x)
    assert z.dtype is mt.complex128 and z._base is x and z.shape == (3,)
    before = x.numpy().copy()
    z.mul_(1j)                       # (a + ib) i = -b + ia, written through to x
    assert np.array_equal(x.numpy(), np.stack([-before[:, 1], before[:, 0]], 1))
    assert mt.view_as_real(z).data_ptr() == x.data_ptr()
    cases = [lambda m: m.randn(3), lambda m: m.randn(3, 2).long(), lambda m: m.randn(2, 3),
             lambda m: m.randn(2, 2).t(), lambda m: m.randn(3, 3)[:, :2],
             lambda m: m.randn(7)[1:].view(3, 2)]
    for make in cases:
        with pytest.raises(RuntimeError) as ours:
            mt.view_as_complex(make(mt))
        with pytest.raises(RuntimeError) as theirs:
            torch.view_as_complex(make(torch))
        assert str(ours.value).split(":")[0] == str(theirs.value).split(":")[0]
    with pytest.raises(RuntimeError, match="view_as_real is only supported for complex"):
        mt.view_as_real(mt.ones(2))


def test_refused_inplace_through_a_dtype_view_that_requires_grad():
    z = mt.randn(3, dtype=mt.cdouble, requires_grad=True).clone()
    before = z.detach().clone()
    with pytest.raises(RuntimeError, match="in-place"):
        z.real.mul_(2)
    assert mt.equal(z.detach(), before)          # refused before anything was written
    parts = z.imag
    z.mul_(2)
    with pytest.raises(RuntimeError, match="in-place"):
        parts.sum().backward()


# --------------------------------------------------------------------------- ops

def _both(fn, *arrays):
    ours = fn(mt, *[mt.tensor(a) for a in arrays])
    theirs = fn(torch, *[torch.tensor(a) for a in arrays])
    return ours, theirs


UNARY = {
    "exp": lambda m, z: z.exp(), "log": lambda m, z: z.log(), "sqrt": lambda m, z: z.sqrt(),
    "abs": lambda m, z: z.abs(), "angle": lambda m, z: z.angle(), "conj": lambda m, z: z.conj(),
    "conj_physical": lambda m, z: m.conj_physical(z), "neg": lambda m, z: -z,
    "pow": lambda m, z: z ** 2.5, "sum": lambda m, z: z.sum(0), "mean": lambda m, z: z.mean(),
    "matmul": lambda m, z: z @ z.mT, "sin": lambda m, z: z.sin(), "tanh": lambda m, z: z.tanh(),
    "add_real": lambda m, z: z + z.real, "div": lambda m, z: z / (z + 3),
    "mul_scalar": lambda m, z: z * (2 - 1j), "rsub": lambda m, z: 1j - z,
    "eq": lambda m, z: z == z.conj(), "isreal": lambda m, z: m.isreal(z),
    "complex": lambda m, z: m.complex(z.real, z.imag), "polar": lambda m, z: m.polar(z.abs(), z.angle()),
}


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_ops_match_torch(name, dtype):
    values = cz(3, 3).astype(dtype)
    values[0, 0] = 2.0
    ours, theirs = _both(UNARY[name], values)
    assert ours.dtype.name == str(theirs.dtype)[6:]
    tol = 1e-5 if dtype == np.complex64 else 1e-12
    assert np.allclose(ours.numpy(), theirs.resolve_conj().numpy(), rtol=tol, atol=tol)


def test_angle_of_real_tensors():
    for values in ([-1.0, 0.0, 2.0, float("nan")], [-1, 0, 2]):
        ours, theirs = _both(lambda m, x: m.angle(x), np.array(values))
        assert ours.dtype.name == str(theirs.dtype)[6:]
        assert np.allclose(ours.numpy(), theirs.numpy(), equal_nan=True)


REFUSED = {
    "lt": lambda m, z: z < z, "ge": lambda m, z: z >= 1, "max": lambda m, z: z.max(),
    "max_dim": lambda m, z: z.max(0), "min": lambda m, z: z.min(), "amax": lambda m, z: z.amax(),
    "argmax": lambda m, z: z.argmax(), "sort": lambda m, z: z.sort(),
    "argsort": lambda m, z: z.argsort(), "topk": lambda m, z: z.topk(1),
    "maximum": lambda m, z: m.maximum(z, z), "clamp": lambda m, z: z.clamp(0, 1),
    "sign": lambda m, z: z.sign(),
    "complex_mixed": lambda m, z: m.complex(z.real, z.imag.double()),
    "complex_long": lambda m, z: m.complex(z.real.long(), z.real.long()),
}


@pytest.mark.parametrize("name", REFUSED)
def test_refusals_match_torch(name):
    fn = REFUSED[name]
    with pytest.raises(Exception) as theirs:
        fn(torch, torch.tensor(cz(3).astype(np.complex64)))
    with pytest.raises(type(theirs.value)) as ours:
        fn(mt, mt.tensor(cz(3).astype(np.complex64)))
    assert str(ours.value) == str(theirs.value)


def test_writing_complex_into_real_is_refused():
    with pytest.raises(RuntimeError, match="can't be cast"):
        mt.zeros(2).add_(mt.tensor([1j, 2j]))
    for fn in (lambda m: m.zeros(2).fill_(1 + 1j), lambda m: m.full((2,), 1j, dtype=m.float32),
               lambda m: m.zeros(2, dtype=m.long).__setitem__(0, 2j)):
        with pytest.raises(RuntimeError) as theirs:
            fn(torch)
        with pytest.raises(RuntimeError) as ours:
            fn(mt)
        assert str(ours.value) == str(theirs.value)
    x = mt.zeros(2)
    x.fill_(3 + 0j)               # no imaginary part: taken, as PyTorch does
    assert x.tolist() == [3.0, 3.0]
    z = mt.zeros(2, dtype=mt.cdouble)
    z[1] = 2 - 1j
    assert z.tolist() == [0j, 2 - 1j]
    assert complex(z[1]) == 2 - 1j


# --------------------------------------------------------------------------- autograd

def _grads_match(fn, *arrays):
    ours = [mt.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    loss, expected = fn(mt, *ours), fn(torch, *theirs)
    loss.backward()
    expected.backward()
    assert np.allclose(loss.item(), expected.item())
    for a, b in zip(ours, theirs):
        assert a.grad.dtype.name == str(b.grad.dtype)[6:]
        assert np.allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12)


GRADS = {
    "abs": (lambda m, z: z.abs().sum(), [cz(3)]),
    "real": (lambda m, z: (z.real * z.real).sum(), [cz(3)]),
    "imag": (lambda m, z: (z.imag ** 3).sum(), [cz(3)]),
    "angle": (lambda m, z: z.angle().sum(), [cz(3)]),
    "mul": (lambda m, a, b: (a * b).abs().sum(), [cz(3), cz(3)]),
    "mul_real": (lambda m, a, b: (a * b).abs().sum(), [cz(3), rng.standard_normal(3)]),
    "div": (lambda m, a, b: (a / b).abs().sum(), [cz(3), cz(3)]),
    "exp": (lambda m, z: z.exp().abs().sum(), [cz(3)]),
    "log": (lambda m, z: z.log().imag.sum(), [cz(3)]),
    "sqrt": (lambda m, z: z.sqrt().real.sum(), [cz(3)]),
    "pow": (lambda m, z: (z ** 3).abs().sum(), [cz(3)]),
    "sum": (lambda m, z: z.sum().abs(), [cz(3)]),
    "mean": (lambda m, z: z.mean(0).abs().sum(), [cz(2, 3)]),
    "matmul": (lambda m, a, b: (a @ b).abs().sum(), [cz(2, 3), cz(3, 4)]),
    "matvec": (lambda m, a, b: (a @ b).abs().sum(), [cz(2, 3), cz(3)]),
    "conj": (lambda m, z: (z.conj() * z.conj() * 1j).real.sum(), [cz(3)]),
    "view_as_real": (lambda m, z: (m.view_as_real(z) ** 3).sum(), [cz(3)]),
    "view_as_complex": (lambda m, x: (m.view_as_complex(x) ** 2).abs().sum(),
                        [rng.standard_normal((3, 2))]),
    "complex": (lambda m, a, b: (m.complex(a, b) ** 2).abs().sum(),
                [rng.standard_normal(3), rng.standard_normal(3)]),
    "polar": (lambda m, a, b: (m.polar(a, b) ** 2 * (1 + 2j)).real.sum(),
              [rng.random(3) + 0.5, rng.standard_normal(3)]),
    "real_scalar_times_complex": (lambda m, x: (x * (2 - 3j)).abs().sum(),
                                  [rng.standard_normal(3)]),
    "bmm": (lambda m, a, b: m.bmm(a, b).abs().sum(), [cz(2, 2, 3), cz(2, 3, 2)]),
    "mv": (lambda m, a, b: m.mv(a, b).abs().sum(), [cz(2, 3), cz(3)]),
    "dot": (lambda m, a, b: m.dot(a, b).abs(), [cz(3), cz(3)]),
    "vdot": (lambda m, a, b: m.vdot(a, b).abs(), [cz(3), cz(3)]),
    "linear": (lambda m, x, w, b: m.nn.functional.linear(x, w, b).abs().sum(),
               [cz(2, 3), cz(4, 3), cz(4)]),
    "einsum": (lambda m, a, b: m.einsum("ij,jk->ik", a, b).abs().sum(), [cz(2, 3), cz(3, 2)]),
    "mH": (lambda m, a: (a.mH @ a).real.sum(), [cz(3, 2)]),
    "sgn": (lambda m, z: (z.sgn() * (1 + 1j)).real.sum(), [cz(3)]),
    "norm": (lambda m, z: z.norm() + m.linalg.vector_norm(z, 3, 0).sum(), [cz(3, 2)]),
    "var_std": (lambda m, z: z.var(1).sum() + z.std(0, correction=0).sum(), [cz(3, 2)]),
}


@pytest.mark.parametrize("name", GRADS)
def test_gradients_match_torch(name):
    fn, arrays = GRADS[name]
    _grads_match(fn, *arrays)


def test_implicit_grad_of_a_complex_output_is_refused():
    z = mt.tensor(1 + 1j, requires_grad=True)
    with pytest.raises(RuntimeError, match="real scalar outputs"):
        (z * 2).backward()


# --------------------------------------------------------------------------- vmap

VMAPPED = {
    "real": lambda m, z: z.real, "imag": lambda m, z: z.imag, "conj": lambda m, z: z.conj(),
    "angle": lambda m, z: z.angle(), "abs": lambda m, z: z.abs(),
    "view_as_real": lambda m, z: m.view_as_real(z),
    "view_as_complex": lambda m, z: m.view_as_complex(m.view_as_real(z)),
    "complex": lambda m, z: m.complex(z.imag, z.real),
    "polar": lambda m, z: m.polar(z.abs(), z.real),
}


@pytest.mark.parametrize("name", VMAPPED)
@pytest.mark.parametrize("in_dim", [0, 1])
def test_vmap_matches_loop_without_fallback(name, in_dim):
    fn = VMAPPED[name]
    z = mt.tensor(cz(3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # the per-sample loop fallback warns
        batched = mt.vmap(lambda t: fn(mt, t), in_dims=in_dim)(z)
    samples = [fn(mt, z.select(in_dim, i)) for i in range(z.shape[in_dim])]
    assert np.array_equal(batched.numpy(), mt.stack(samples).numpy())


ORDERING_REFUSALS = {
    "median": lambda lib, z: z.median(), "median(dim)": lambda lib, z: z.median(0),
    "nanmedian": lambda lib, z: z.nanmedian(), "nanmedian(dim)": lambda lib, z: z.nanmedian(0),
    "kthvalue": lambda lib, z: z.kthvalue(1), "mode": lambda lib, z: z.mode(),
    "cummax": lambda lib, z: z.cummax(0), "cummin": lambda lib, z: z.cummin(0),
    "relu6": lambda lib, z: lib.nn.functional.relu6(z),
    "hardtanh": lambda lib, z: lib.nn.functional.hardtanh(z),
    "threshold": lambda lib, z: lib.nn.functional.threshold(z, 0.1, 0.0),
    "fmax": lambda lib, z: lib.fmax(z, z), "fmin": lambda lib, z: lib.fmin(z, z),
    "nansum": lambda lib, z: z.nansum(),
    # and functions PyTorch has no complex kernel for (NumPy's real ones dropped the
    # imaginary parts)
    "round": lambda lib, z: z.round(), "lgamma": lambda lib, z: z.lgamma(),
    "digamma": lambda lib, z: z.digamma(), "i0": lambda lib, z: z.i0(),
    "erfc": lambda lib, z: z.erfc(), "logit": lambda lib, z: z.logit(),
    "polygamma": lambda lib, z: lib.polygamma(1, z), "xlogy": lambda lib, z: lib.xlogy(z, z),
    "hypot": lambda lib, z: lib.hypot(z, z), "copysign": lambda lib, z: lib.copysign(z, z),
}


@pytest.mark.parametrize("name", ORDERING_REFUSALS)
def test_ops_without_a_complex_kernel_refuse_complex_as_torch(name):
    """Complex numbers have no order: PyTorch refuses these (NumPy would order them
    lexicographically and answer), and the real special functions."""
    with pytest.raises(Exception) as theirs:
        ORDERING_REFUSALS[name](torch, torch.tensor([1 + 2j, 3 - 1j, 0.5j]))
    with pytest.raises(type(theirs.value)) as ours:
        ORDERING_REFUSALS[name](mt, mt.tensor([1 + 2j, 3 - 1j, 0.5j]))
    assert str(ours.value) == str(theirs.value)
