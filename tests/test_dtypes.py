"""Every dtype against PyTorch: names and conversions, the type promotion table over all
pairs of dtypes and every kind of operand, integer wrap-around, the half types' arithmetic,
and the registry's op samples cast to float16, bfloat16, int8, uint8 and int16."""
import zlib

import numpy as np
import pytest

import microtensor as mt
from microtensor._C.tensor import DTYPES, TensorBase
from microtensor.ops import REGISTRY
from microtensor.testing import maker

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")

try:
    HAS_BFLOAT16 = mt.bfloat16.np is not None
except ImportError:     # the optional 'bfloat16' extra is not installed
    HAS_BFLOAT16 = False
NO_BFLOAT16 = "the optional 'bfloat16' extra (ml_dtypes) is not installed: this file's " \
              "sweeps over the dtypes leave bfloat16 out"


def made(names):
    """``names`` less the dtypes whose tensors cannot be made here (bfloat16 without its
    extra: ``test_bfloat16_is_swept`` reports that as a skip)."""
    return [name for name in names if HAS_BFLOAT16 or name != "bfloat16"]


ALL = [DTYPES[name] for name in made(DTYPES)]
NAMES = [dt.name for dt in ALL]


def to_torch(x):
    """A microtensor tensor (or dtype, or container of them) as PyTorch's."""
    if isinstance(x, TensorBase):
        arr = np.array(x.detach()._array())
        if x.dtype is mt.bfloat16:   # PyTorch reads no ml_dtypes arrays: exact via float32
            return torch.from_numpy(arr.astype(np.float32)).to(torch.bfloat16)
        return torch.from_numpy(arr)
    if isinstance(x, mt.dtype):
        return getattr(torch, x.name)
    if isinstance(x, (list, tuple)):
        return type(x)(to_torch(v) for v in x)
    if isinstance(x, dict):
        return {k: to_torch(v) for k, v in x.items()}
    return x


def as_numpy(t):
    """Values of a microtensor or PyTorch tensor as a float64 (or int64) NumPy array."""
    if isinstance(t, TensorBase):
        arr = np.array(t.detach()._array())
    else:
        t = t.detach().resolve_conj()
        arr = (t.float() if t.dtype in (torch.bfloat16, torch.float16) else t).numpy()
    if arr.dtype.kind == "c":
        return arr.astype(np.complex128)
    # ml_dtypes' bfloat16 is no NumPy kind "f"
    return arr.astype(np.int64) if arr.dtype.kind in "biu" else arr.astype(np.float64)


# ------------------------------------------------------------------ names and conversions

def test_every_dtype_and_alias_is_torch_s():
    for name in ("float16", "half", "bfloat16", "uint8", "int8", "int16", "short", "float",
                 "double", "long", "int", "bool", "float32", "float64", "int32", "int64"):
        dt = getattr(mt, name)
        assert isinstance(dt, mt.dtype)
        if torch is not None:
            theirs = getattr(torch, name)
            assert repr(dt) == repr(theirs).replace("torch.", "microtensor.")
            assert (dt.is_floating_point, dt.is_signed, dt.itemsize) == \
                (theirs.is_floating_point, theirs.is_signed, theirs.itemsize)


@needs_torch
@pytest.mark.parametrize("name", NAMES)
def test_tensor_conversions_and_repr(name):
    dt = DTYPES[name]
    data = [[0.0, 1.5, -2.0], [3.25, 100.0, 7.0]] if dt.is_floating_point else \
        [[0, 1, 2], [3, 100, 7]]
    ours, theirs = mt.tensor(data, dtype=dt), torch.tensor(data, dtype=getattr(torch, name))
    assert repr(ours) == repr(theirs).replace("torch.", "microtensor.")
    assert ours.element_size() == ours.itemsize == theirs.element_size()
    assert ours.type() == theirs.type().replace("torch.", "microtensor.")
    assert getattr(mt, theirs.type().split(".")[-1])(data).dtype is dt   # legacy constructor
    for method in made(("half", "bfloat16", "byte", "char", "short", "int", "long", "float",
                        "double", "bool")):
        a, b = getattr(ours, method)(), getattr(theirs, method)()
        assert a.dtype.name == str(b.dtype).split(".")[-1], method
        np.testing.assert_array_equal(as_numpy(a), as_numpy(b), err_msg=method)
    for factory in ("zeros", "ones", "empty"):
        assert getattr(mt, factory)(2, 3, dtype=dt).dtype is dt
    assert mt.full((2,), 3, dtype=dt).tolist() == torch.full((2,), 3,
                                                            dtype=theirs.dtype).tolist()
    if dt is not mt.bool and not dt.is_complex:
        assert mt.arange(5, dtype=dt).tolist() == torch.arange(5, dtype=theirs.dtype).tolist()
    array = ours.numpy()
    assert array.dtype == dt.np
    back = mt.from_numpy(array)
    assert back.dtype is dt and back.tolist() == ours.tolist()


@needs_torch
def test_from_numpy_refuses_other_types_and_finfo_iinfo_are_torch_s():
    with pytest.raises(TypeError, match="uint16"):
        mt.from_numpy(np.ones(2, np.uint16))
    for dt in ALL:
        theirs = getattr(torch, dt.name)
        if dt.kind >= 2:      # (a complex dtype's limits are its parts')
            assert repr(mt.finfo(dt)) == repr(torch.finfo(theirs))
            assert mt.finfo(dt).bits == torch.finfo(theirs).bits
        elif dt is not mt.bool:
            assert repr(mt.iinfo(dt)) == repr(torch.iinfo(theirs))


@needs_torch
@pytest.mark.parametrize("name", [n for n in NAMES
                                  if n not in ("bool", "float64", "int64", "complex128")])
def test_overflowing_scalar_refused_with_torch_s_message(name):
    dt = DTYPES[name]
    value = 1e40 if dt.kind >= 2 else 2 ** 40
    with pytest.raises(RuntimeError) as theirs:
        torch.full((2,), value, dtype=getattr(torch, name))
    with pytest.raises(RuntimeError) as ours:
        mt.full((2,), value, dtype=dt)
    assert str(ours.value) == str(theirs.value)


# ------------------------------------------------------------------ promotion

@needs_torch
def test_promote_types_is_torch_s_table():
    for a in ALL:
        for b in ALL:
            expected = torch.promote_types(getattr(torch, a.name), getattr(torch, b.name))
            assert mt.promote_types(a, b).name == str(expected).split(".")[-1], (a, b)


def _operands(dt, kind):
    """A microtensor operand of ``dt`` of the given kind and its PyTorch twin."""
    values = [1, 0, 3] if dt is not mt.bool else [True, False, True]
    if kind == "tensor":
        t = mt.tensor(values, dtype=dt)
    else:   # a zero-dimensional tensor
        t = mt.tensor(values[0], dtype=dt)
    return t, to_torch(t)


SCALARS = [True, 3, -2, 2.5]


@needs_torch
@pytest.mark.parametrize("op", ["add", "mul", "div", "eq", "maximum", "sub"])
@pytest.mark.parametrize("left", NAMES)
def test_result_type_and_results_sweep(op, left):
    """Every pair of dtypes as tensor/tensor, tensor/0-dim tensor, 0-dim/tensor, and every
    dtype with bool, int and float Python scalars on either side: ``result_type`` and the
    op's result (dtype exactly, values) as PyTorch's."""
    failures = []
    for left_kind in ("tensor", "zero_dim"):
        a, ta = _operands(DTYPES[left], left_kind)
        rights = [(_operands(dt, kind), f"{dt.name} {kind}") for dt in ALL
                  for kind in ("tensor", "zero_dim")]
        rights += [((s, s), repr(s)) for s in SCALARS if op not in ("maximum",)]
        for (b, tb), label in rights:
            for x, y, tx, ty in ((a, b, ta, tb), (b, a, tb, ta)):
                if not isinstance(x, TensorBase) and op in ("eq",):
                    continue
                where = f"{op}({label if x is b else left}, {left if x is b else label})"
                assert mt.result_type(x, y).name == \
                    str(torch.result_type(tx, ty)).split(".")[-1].replace(
                        "complex32", "complex64"), where   # microtensor has no complex32
                fn = getattr(torch, op)
                if torch.result_type(tx, ty) is torch.complex32:
                    # microtensor computes in complex64 where PyTorch would use complex32
                    tx, ty = [t.to(torch.complex64) if isinstance(t, torch.Tensor) else t
                              for t in (tx, ty)]
                try:
                    expected = fn(tx, ty)
                except RuntimeError:
                    with pytest.raises(RuntimeError):
                        getattr(mt, op)(x, y)
                    continue
                ours = getattr(mt, op)(x, y)
                if ours.dtype.name != str(expected.dtype).split(".")[-1]:
                    failures.append(f"{where}: {ours.dtype} vs {expected.dtype}")
                elif not np.allclose(as_numpy(ours), as_numpy(expected), rtol=1e-2,
                                     equal_nan=True):
                    failures.append(f"{where}: {ours.tolist()} vs {expected.tolist()}")
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------------ arithmetic

@needs_torch
def test_integer_arithmetic_wraps_as_torch():
    cases = [("uint8", [200, 3, 255]), ("int8", [120, -128, 5]), ("int16", [32000, -3, 7])]
    for name, values in cases:
        ours, theirs = mt.tensor(values, dtype=DTYPES[name]), torch.tensor(
            values, dtype=getattr(torch, name))
        for fn in (lambda x: x + 100, lambda x: x * x, lambda x: x - 1000, lambda x: -x,
                   lambda x: x // 3, lambda x: x / 2, lambda x: x.sum(), lambda x: x.prod(),
                   lambda x: x.cumsum(0), lambda x: x + x, lambda x: x.max(),
                   lambda x: x > 100, lambda x: x.abs()):
            a, b = fn(ours), fn(theirs)
            assert a.dtype.name == str(b.dtype).split(".")[-1]
            np.testing.assert_array_equal(as_numpy(a), as_numpy(b))
        with pytest.raises(RuntimeError, match="could not infer output dtype"):
            ours.mean()


@needs_torch
@pytest.mark.parametrize("name", made(["float16", "bfloat16"]))
def test_half_types_round_once_per_op_as_torch(name):
    """Each op computes in float32 and rounds its result once, so the values are
    PyTorch's bit for bit (rounding in the half type between steps would differ)."""
    rng = np.random.default_rng(0)
    x = mt.tensor(rng.standard_normal((7, 5)).astype(np.float32)).to(DTYPES[name])
    y = mt.tensor(rng.standard_normal((5, 3)).astype(np.float32)).to(DTYPES[name])
    tx, ty = to_torch(x), to_torch(y)
    for fn in (lambda a, b, F: a @ b, lambda a, b, F: a.sum(), lambda a, b, F: a.sum(0),
               lambda a, b, F: a.exp(), lambda a, b, F: a * 3.3, lambda a, b, F: a.mean(1),
               lambda a, b, F: (a / 7).sqrt(), lambda a, b, F: a.softmax(1),
               lambda a, b, F: a.log_softmax(0), lambda a, b, F: a.var(1),
               lambda a, b, F: a.cumsum(1), lambda a, b, F: a.norm(dim=1),
               lambda a, b, F: F.linear(a, b.t()), lambda a, b, F: F.gelu(a),
               lambda a, b, F: F.sigmoid(a), lambda a, b, F: F.layer_norm(a, (5,)),
               lambda a, b, F: F.mse_loss(a, a.flip(0)), lambda a, b, F: a.abs() ** 1.7,
               lambda a, b, F: F.conv1d(a.t()[None], b.t()[:, :, None])):
        ours = fn(x, y, mt.nn.functional)
        theirs = fn(tx, ty, torch.nn.functional)
        assert ours.dtype.name == str(theirs.dtype).split(".")[-1]
        np.testing.assert_array_equal(as_numpy(ours), as_numpy(theirs))


@needs_torch
@pytest.mark.parametrize("name", made(["float16", "bfloat16"]))
def test_autograd_on_half_types(name):
    dt = DTYPES[name]
    x = mt.tensor([[0.5, -1.25], [2.0, 3.0]], dtype=dt, requires_grad=True)
    tx = to_torch(x).requires_grad_()
    (x.exp() * x).sum().backward()
    (tx.exp() * tx).sum().backward()
    assert x.grad.dtype is dt
    np.testing.assert_allclose(as_numpy(x.grad), as_numpy(tx.grad), rtol=1e-2)


@pytest.mark.parametrize("name", ["int8", "uint8", "int16"])
def test_integer_tensors_refuse_requires_grad(name):
    with pytest.raises(RuntimeError, match="only Tensors of floating point"):
        mt.ones(2, dtype=DTYPES[name], requires_grad=True)
    t = mt.ones(2, dtype=DTYPES[name])
    with pytest.raises(RuntimeError, match="only Tensors of floating point"):
        t.requires_grad_()
    assert not t.requires_grad


# ------------------------------------------------------------------ the registry, cast

SWEPT = made(["float16", "bfloat16", "int8", "uint8", "int16"])
TOLERANCE = {"float16": (4e-3, 2e-3), "bfloat16": (3e-2, 2e-2)}
# ops whose results are not defined by their inputs' values alone
UNCOMPARABLE = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
INTEGERS = ("int8", "uint8", "int16")
# where PyTorch's result is not a rule microtensor follows, by op and dtype
NOT_COMPARED = {
    **{(name, dt): "a float32 FFT of integers: PyTorch's and NumPy's FFTs round differently "
                   "(compared within float32 tolerance in tests/test_fft.py)"
       for name in ("fft_fft", "fft_ifft", "fft_fftn", "fft_rfft", "fft_rfftn", "fft_ihfft")
       for dt in INTEGERS},
    ("complex", "float16"): "PyTorch makes complex32, which microtensor does not have",
    ("polar", "float16"): "PyTorch makes complex32, which microtensor does not have",
    ("view_as_complex", "float16"): "PyTorch makes complex32, which microtensor does not have",
    **{("einsum", dt): "PyTorch's einsum of integers returns int64 where it reduces through "
                       "sum and raises for some equations ('ij,jk->i'): no dtype rule"
       for dt in INTEGERS},
    ("searchsorted", "uint8"): "the sample's sorted negative values wrap out of order",
    ("bilinear", "bfloat16"): "PyTorch contracts in another order, rounding other "
                              "intermediate sums to bfloat16",
    **{(name, dt): "PyTorch's CPU matrix_exp computes in the half type itself (Padé "
                   "coefficients overflow float16: NaN); microtensor computes in float32"
       for name in ("linalg_matrix_exp", "matrix_exp") for dt in ("float16", "bfloat16")},
    **{("affine_grid_generator", dt): "PyTorch's aten op maps integer thetas over an "
                                      "integer base grid; F.affine_grid refuses them, and "
                                      "so does microtensor's op" for dt in INTEGERS},
}
# ops whose second output is the index of a value that integer samples repeat: which of
# the tied positions PyTorch returns is unspecified, so only the values are compared
TIED_INDICES = {"topk", "kthvalue"}


def _cast(x, dt):
    if isinstance(x, TensorBase) and x.dtype.is_floating_point:
        return x.detach().to(dt)
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(v, dt) for v in x)
    return x


def _registry_cases():
    cases = []
    for name in sorted(REGISTRY):
        op = REGISTRY[name]
        if op.samples is None or op.random or name in UNCOMPARABLE:
            continue
        count = len(op.samples(maker(zlib.crc32(name.encode()))))
        cases.extend(pytest.param(name, i, id=f"{name}-{i}") for i in range(count))
    return cases


def _torch_fn(name):
    from tests.test_op_registry import _torch_callable
    return _torch_callable(REGISTRY[name])


@needs_torch
@pytest.mark.parametrize("name, index", _registry_cases())
def test_registry_samples_in_every_dtype(name, index):
    """Each op's samples with their floating tensors cast to each swept dtype: wherever
    PyTorch's CPU runs the op in that dtype, microtensor gives the same result dtype and
    values (exact for integers, within a few units in the last place for half types)."""
    fn = _torch_fn(name)
    if fn is None:
        pytest.skip(f"PyTorch has no {name}")
    sample = REGISTRY[name].samples(maker(zlib.crc32(name.encode())))[index]
    failures = []
    for dt_name in SWEPT:
        dt = DTYPES[dt_name]
        if (name, dt_name) in NOT_COMPARED:
            continue
        args, kwargs = _cast(list(sample.args), dt), {k: _cast(v, dt)
                                                       for k, v in sample.kwargs.items()}
        try:
            expected = fn(*to_torch(args), **to_torch(kwargs))
        except (TypeError, AttributeError):
            continue      # PyTorch's op takes other arguments
        except (RuntimeError, NotImplementedError) as refusal:
            # PyTorch does not run this op in this dtype: for the half types, microtensor
            # refuses it with the same exception type, or computes it (in float32, rounded)
            # (integer refusals: tests/test_dtype_refusals_vs_torch.py)
            if dt.is_floating_point:
                failures.extend(f"{dt_name}: {m}"
                                for m in _refused_alike(name, args, kwargs, dt, refusal))
            continue
        try:
            result = REGISTRY[name](*args, **kwargs)
        except Exception as e:    # noqa: BLE001  (reported with the dtype below)
            failures.append(f"{dt_name}: raised {type(e).__name__}: {e}")
            continue
        if name in TIED_INDICES and dt_name in INTEGERS:
            result, expected = result[0], expected[0]
        failures.extend(f"{dt_name}: {m}" for m in _compare(result, expected, dt_name))
    assert not failures, "\n".join(failures)


def _refused_alike(name, args, kwargs, dt, refusal):
    try:
        result = REGISTRY[name](*args, **kwargs)
    except Exception as e:    # noqa: BLE001  (its type is the check)
        if not isinstance(e, type(refusal)):
            return [f"PyTorch raised {refusal!r}, microtensor {e!r}"]
        return []
    results = result if isinstance(result, (tuple, list)) else [result]
    return [f"PyTorch raised {refusal!r}, microtensor computed a {r.dtype} result"
            for r in results if isinstance(r, TensorBase) and r.dtype.is_floating_point
            and r.dtype is not dt]


def _compare(ours, theirs, dt_name, where="output"):
    if isinstance(theirs, torch.Tensor):
        if not isinstance(ours, TensorBase):
            return [f"{where}: expected a tensor, got {type(ours).__name__}"]
        if tuple(ours.shape) != tuple(theirs.shape):
            return [f"{where}: shape {tuple(ours.shape)} vs {tuple(theirs.shape)}"]
        if ours.dtype.name != str(theirs.dtype).split(".")[-1]:
            return [f"{where}: dtype {ours.dtype} vs {theirs.dtype}"]
        rtol, atol = TOLERANCE.get(dt_name, (0, 0))
        a, b = as_numpy(ours), as_numpy(theirs)
        if a.dtype.kind in "fc" or b.dtype.kind in "fc":
            # a half-type result computed in float32 may round to the neighbouring value;
            # where an output's terms cancel, PyTorch's kernels round partial sums: a last
            # place of the output's largest value
            finite = np.abs(b[np.isfinite(b)]) if b.size else b
            scale = max(1.0, float(finite.max())) if finite.size else 1.0
            ok = np.allclose(a, b, rtol=rtol, atol=atol * scale, equal_nan=True) if rtol \
                else np.allclose(a, b, rtol=1e-6, atol=1e-6, equal_nan=True)
        else:
            ok = np.array_equal(a, b)
        return [] if ok else [f"{where}: values differ:\n{a}\nvs\n{b}"]
    if isinstance(theirs, (tuple, list)):
        if not isinstance(ours, (tuple, list)) or len(ours) != len(theirs):
            return [f"{where}: number of outputs"]
        return [m for i, (a, b) in enumerate(zip(ours, theirs))
                for m in _compare(a, b, dt_name, f"{where}[{i}]")]
    return [] if ours == theirs else [f"{where}: {ours!r} vs {theirs!r}"]


# ------------------------------------------------------------------ saving

@needs_torch
@pytest.mark.parametrize("name", SWEPT)
def test_checkpoints_of_every_dtype_round_trip_with_torch(name, tmp_path):
    import io
    ours = (mt.arange(12).reshape(3, 4) - 5).to(DTYPES[name])[:, 1:]   # a view
    buffer = io.BytesIO()
    mt.save({"w": ours}, buffer)
    buffer.seek(0)
    theirs = torch.load(buffer)["w"]
    assert str(theirs.dtype) == f"torch.{name}" and theirs.tolist() == ours.tolist()
    buffer = io.BytesIO()
    torch.save({"w": theirs}, buffer)
    buffer.seek(0)
    back = mt.load(buffer)["w"]
    assert back.dtype is DTYPES[name] and back.tolist() == ours.tolist()


@needs_torch
@pytest.mark.parametrize("name", SWEPT)
def test_safetensors_of_every_dtype_round_trip_with_torch(name, tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    ours = (mt.arange(6).reshape(2, 3) - 2).to(DTYPES[name])
    mt.save_safetensors({"w": ours}, tmp_path / "ours.safetensors")
    theirs = safetensors_torch.load_file(str(tmp_path / "ours.safetensors"))["w"]
    assert str(theirs.dtype) == f"torch.{name}" and theirs.tolist() == ours.tolist()
    safetensors_torch.save_file({"w": theirs}, str(tmp_path / "theirs.safetensors"))
    back = mt.load_safetensors(tmp_path / "theirs.safetensors")["w"]
    assert back.dtype is DTYPES[name] and back.tolist() == ours.tolist()
    with open(tmp_path / "ours.safetensors", "rb") as f:   # the header names the dtype
        assert f'"dtype":"{mt._dtype.info(DTYPES[name]).safetensors}"' in f.read(200).decode(
            errors="ignore")


# ------------------------------------------------------------------ bfloat16 is an extra

@pytest.mark.skipif(not HAS_BFLOAT16, reason=NO_BFLOAT16)
def test_bfloat16_is_swept():
    assert mt.bfloat16 in ALL and "bfloat16" in SWEPT
    assert mt.ones(2, dtype=mt.bfloat16).numpy().dtype == mt.bfloat16.np

# Run in a child interpreter in which every import of ml_dtypes fails as if it were not
# installed, and each attempt records the file that made it.
_WITHOUT_ML_DTYPES = r'''
import sys, traceback
sys.modules.pop("ml_dtypes", None)
importers = []

class HideMlDtypes:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "ml_dtypes":
            callers = reversed(traceback.extract_stack()[:-1])      # this frame left out
            importers.append(next(frame.filename for frame in callers
                                  if not frame.filename.startswith("<frozen")))
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, HideMlDtypes())

import importlib, pkgutil
import numpy as np
import microtensor as mt
from microtensor import _dtype_table
for module in pkgutil.walk_packages(mt.__path__, "microtensor."):
    if module.name != "microtensor.__main__":
        importlib.import_module(module.name)

# every other dtype works
assert (mt.ones(2, dtype=mt.float16) * 3).tolist() == [3.0, 3.0]
assert (mt.tensor([100], dtype=mt.int8) + 100).tolist() == [-56]
assert mt.arange(3.).half().dtype is mt.float16 and mt.ones(2).to(mt.uint8).tolist() == [1, 1]
assert mt.from_numpy(np.ones(2, np.int16)).dtype is mt.int16
# bfloat16 is still a dtype
assert mt.bfloat16.is_floating_point and mt.bfloat16.itemsize == 2 and mt.bfloat16.is_signed
assert mt.promote_types(mt.bfloat16, mt.float16) is mt.float32

x, model = mt.ones(3), mt.nn.Linear(2, 2)
refused = {
    "ones": lambda: mt.ones(2, dtype=mt.bfloat16),
    "empty": lambda: mt.empty(2, 3, dtype=mt.bfloat16),
    "randn": lambda: mt.randn(2, dtype=mt.bfloat16),
    "arange": lambda: mt.arange(3, dtype=mt.bfloat16),
    "tensor": lambda: mt.tensor([1.0], dtype=mt.bfloat16),
    "zeros_like": lambda: mt.zeros_like(x, dtype=mt.bfloat16),
    "to": lambda: x.to(mt.bfloat16),
    "bfloat16()": lambda: x.bfloat16(),
    "type": lambda: x.type(mt.bfloat16),
    "sum(dtype=)": lambda: x.sum(dtype=mt.bfloat16),
    "BFloat16Tensor": lambda: mt.BFloat16Tensor(2),
    "set_default_dtype": lambda: mt.set_default_dtype(mt.bfloat16),
    "Module.bfloat16": lambda: model.bfloat16(),
}
refused.update({f"load {path}": (lambda load=load, path=path: load(path))
                for load, path in ((mt.load, sys.argv[1]), (mt.load_safetensors, sys.argv[2]))
                if path})
for what, make in refused.items():
    try:
        make()
    except ImportError as error:
        assert 'pip install "microtensor[bfloat16]"' in str(error), (what, error)
        assert error.name == "ml_dtypes", what
    else:
        raise AssertionError(f"{what} made a bfloat16 tensor without ml_dtypes")
# the refusals changed nothing
assert mt.get_default_dtype() is mt.float32 and x.dtype is mt.float32
assert all(p.dtype is mt.float32 for p in model.parameters())
assert importers == [_dtype_table.__file__], importers
print("checked", len(refused))
'''


def _child_env():
    """This interpreter's environment, with its import path, for a child interpreter."""
    import os
    import sys
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


def test_bfloat16_needs_the_extra_and_nothing_else_does(tmp_path):
    import subprocess
    import sys
    checkpoint = safetensors_file = ""
    try:   # BF16 files to load, written where this process can write them
        bf16 = mt.ones(2, dtype=mt.bfloat16)
        checkpoint = str(tmp_path / "bf16.pt")
        mt.save({"w": bf16}, checkpoint)
        safetensors_file = str(tmp_path / "bf16.safetensors")
        mt.save_safetensors({"w": bf16}, safetensors_file)
    except ImportError:
        safetensors_file = ""
    child = subprocess.run([sys.executable, "-c", _WITHOUT_ML_DTYPES, checkpoint,
                            safetensors_file], capture_output=True, text=True,
                           env=_child_env())
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["checked", str(13 + bool(checkpoint) + bool(safetensors_file))]


@pytest.mark.skipif(not HAS_BFLOAT16, reason=NO_BFLOAT16)
def test_ml_dtypes_is_imported_with_the_first_bfloat16_tensor():
    # importing ml_dtypes takes seconds: microtensor's own import must not pay for it
    import subprocess
    import sys
    code = ("import sys, microtensor as mt; before = 'ml_dtypes' in sys.modules; "
            "x = mt.ones(2, dtype=mt.bfloat16); "
            "print(before, 'ml_dtypes' in sys.modules, x.dtype is mt.bfloat16, "
            "mt.from_numpy(x.numpy()).dtype is mt.bfloat16)")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=_child_env())
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["False", "True", "True", "True"]


def test_numpy_is_the_only_required_dependency():
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")
    from pathlib import Path
    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    project = project["project"]
    assert [d.split(">")[0] for d in project["dependencies"]] == ["numpy"]
    for extra in ("bfloat16", "test"):
        assert any(d.startswith("ml_dtypes") for d in project["optional-dependencies"][extra])
