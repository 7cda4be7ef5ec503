"""``out=`` of every op, against PyTorch.

PyTorch code passes ``out=`` to reuse a buffer (``torch.matmul(a, b, out=c)``,
``torch.sort(x, out=(values, indices))``).  Each registry sample runs in both libraries
with these outs: an empty tensor (resized, laid out as PyTorch lays out that op's
result), one of the result's shape filled with junk, one of that shape transposed (its
strides kept), one of another shape (resized, with PyTorch's warning), and ones of
another dtype (wider, narrower, of another kind: cast or refused as PyTorch does).  Where
PyTorch's function takes no ``out=`` for the sample, microtensor's refuses it with a
TypeError (so code that runs here runs there).  Where PyTorch answers, microtensor
answers the same: the returned value is ``out`` (a named tuple of the outs for several
outputs), with PyTorch's values, shape, strides and dtype, and the same warnings; where
PyTorch refuses, microtensor raises the same exception type and leaves ``out`` as it was.
"""
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor._C.tensor import TensorBase
from microtensor.ops import REGISTRY
from test_op_registry import CASES, GAUGE_DEPENDENT, _sample, _to_torch

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the oracle "
                                                      "of every test here)")

VARIANTS = ("empty", "junk", "transposed", "resized", "wider", "narrower", "other kind")

# {(op, sample index): {variant: reason}}: where microtensor's outcome differs, each
# checked to still differ (fails the run once it matches).
_DIFFERENT = [
    ("PyTorch's dtype rule for out= differs between the paths one op takes inside (a "
     'cast through one composite, an exact dtype through another); microtensor keeps '
     'one rule per op',
     [(('addbmm', 2), ('narrower', 'other kind', 'wider')),
      (('chain_matmul', 1), ('narrower', 'other kind', 'wider')),
      (('clamp', 3), ('narrower', 'wider')), (('clamp', 6), ('narrower', 'wider')),
      (('diff', 5), ('narrower', 'wider')), (('fft_ifft', 1), ('narrower',)),
      (('inner', 2), ('narrower', 'wider')), (('lerp', 1), ('narrower', 'wider')),
      (('lu', 0), ('other kind',)), (('lu', 1), ('other kind',)), (('lu', 2), ('other kind',)),
      (('matrix_power', 1), ('narrower', 'wider')),
      (('matrix_power', 2), ('narrower', 'wider')), (('max', 0), ('narrower', 'wider')),
      (('max', 5), ('narrower', 'wider')), (('min', 0), ('narrower', 'wider')),
      (('min', 5), ('narrower', 'wider')), (('std', 0), ('wider',)), (('std', 4), ('wider',)),
      (('var', 0), ('wider',)), (('var', 4), ('wider',))]),
    ("PyTorch's cat family raises a TypeError for an out it cannot cast into; "
     'microtensor a RuntimeError, as for every other op',
     [(('cat', 0), ('other kind',)), (('cat', 1), ('other kind',)),
      (('cat', 2), ('other kind',)), (('cat', 3), ('other kind',)),
      (('column_stack', 0), ('other kind',)), (('column_stack', 1), ('other kind',)),
      (('column_stack', 2), ('other kind',)), (('concat', 0), ('other kind',)),
      (('concat', 1), ('other kind',)), (('concatenate', 0), ('other kind',)),
      (('concatenate', 1), ('other kind',)), (('dstack', 0), ('other kind',)),
      (('dstack', 1), ('other kind',)), (('dstack', 2), ('other kind',)),
      (('hstack', 0), ('other kind',)), (('hstack', 1), ('other kind',)),
      (('hstack', 2), ('other kind',)), (('row_stack', 0), ('other kind',)),
      (('row_stack', 1), ('other kind',)), (('stack', 0), ('other kind',)),
      (('stack', 1), ('other kind',)), (('stack', 2), ('other kind',)),
      (('vstack', 0), ('other kind',)), (('vstack', 1), ('other kind',))]),
    ("PyTorch computes these reductions in out's dtype and has no CPU kernel for it "
     '(a NotImplementedError); microtensor refuses with a RuntimeError or computes '
     "in the result's dtype and casts",
     [(('nanmean', 0), ('other kind', 'wider')), (('nanmean', 1), ('other kind', 'wider')),
      (('nanmean', 2), ('other kind', 'wider')), (('nanmean', 3), ('other kind', 'wider')),
      (('nanmean', 4), ('other kind', 'wider')), (('nanmean', 5), ('other kind', 'wider')),
      (('nanmean', 6), ('other kind',)), (('nansum', 0), ('other kind', 'wider')),
      (('nansum', 1), ('other kind', 'wider')), (('nansum', 2), ('other kind', 'wider')),
      (('nansum', 3), ('other kind', 'wider')), (('nansum', 4), ('other kind', 'wider')),
      (('nansum', 5), ('other kind', 'wider')), (('nansum', 6), ('other kind',)),
      (('std', 1), ('wider',)), (('std', 2), ('wider',)), (('std', 3), ('wider',)),
      (('std', 7), ('wider',)), (('var', 1), ('wider',)), (('var', 2), ('wider',)),
      (('var', 3), ('wider',)), (('var', 7), ('wider',))]),
    ("the layout of a resized out, where PyTorch's kernel lays its result out "
     "differently from microtensor's (FFTs of transposed inputs, some batched "
     'solves, the real angle cast into a complex out; test_metadata_vs_torch lists '
     "the results' own layouts); the values agree",
     [(('angle', 1), ('wider',)), (('fft_ifft', 1), ('empty', 'resized')),
      (('fft_ihfft', 1), ('empty', 'resized')), (('linalg_lu_solve', 2), ('empty', 'resized')),
      (('linalg_lu_solve', 3), ('empty', 'resized')),
      (('linalg_solve_ex', 3), ('empty', 'resized'))]),
    ("PyTorch's narrow_copy writes into a transposed out as if it were contiguous "
     '(its values scrambled); microtensor writes each element in its place',
     [(('narrow_copy', 0), ('transposed',)), (('narrow_copy', 1), ('transposed',)),
      (('narrow_copy', 2), ('transposed',))]),
    ("PyTorch's matmul of a matrix and a vector writes through addmv into the "
     'transposed out and refuses its shape; microtensor writes the result',
     [(('matmul', 4), ('transposed',)), (('matmul', 6), ('transposed',))]),
    ("PyTorch's native_batch_norm refuses a resized running-stat out; microtensor "
     'resizes it',
     [(('native_batch_norm', 2), ('resized',))]),
    ("nonzero(as_tuple=True) with a tuple out: PyTorch's TypeError, microtensor's "
     "RuntimeError (PyTorch's for a tensor out)",
     [(('nonzero', 1), ('empty',)), (('nonzero', 3), ('empty',))]),
    ("PyTorch's split_copy refuses empty outs; microtensor resizes them as for every "
     'other op',
     [(('split_copy', 0), ('empty',)), (('split_copy', 1), ('empty',)),
      (('split_copy', 3), ('empty',)), (('split_copy', 4), ('empty',))]),
    ("PyTorch's split_copy writes into outs of another shape without resizing them; "
     'microtensor resizes them as for every other op',
     [(('split_copy', 0), ('resized',)), (('split_copy', 1), ('resized',)),
      (('split_copy', 3), ('resized',)), (('split_copy', 4), ('resized',))]),
    ("PyTorch's out= form of this op resizes silently (or warns once more or less); "
     'microtensor warns as for every other op',
     [(('addbmm', 0), ('resized',)), (('addbmm', 1), ('resized',)),
      (('addbmm', 2), ('resized',)), (('lu', 0), ('resized',)), (('lu', 1), ('resized',)),
      (('lu', 2), ('resized',)), (('matmul', 2), ('junk',)), (('mode', 4), ('resized',)),
      (('narrow_copy', 0), ('resized',)), (('narrow_copy', 1), ('resized',)),
      (('narrow_copy', 2), ('resized',))]),
]
DIFFERENCES = {}
for _reason, _cases in _DIFFERENT:
    for _key, _variants in _cases:
        DIFFERENCES.setdefault(_key, {}).update(dict.fromkeys(_variants, _reason))


def _functions(name):
    """PyTorch's function of the registry op ``name`` and microtensor's (``linalg_inv``:
    ``linalg.inv`` of each)."""
    for prefix in ("linalg_", "fft_", "special_"):
        if name.startswith(prefix):
            short = name[len(prefix):]
            return (getattr(getattr(torch, prefix[:-1]), short, None),
                    getattr(getattr(mt, prefix[:-1]), short, None))
    return getattr(torch, name, None), getattr(mt, name, None)


def _detached(value):
    if isinstance(value, TensorBase):
        return value.detach()
    if isinstance(value, (list, tuple)):
        return type(value)(_detached(v) for v in value)
    return value


_WIDER = {"float16": "float32", "bfloat16": "float32", "float32": "float64",
          "float64": "complex128", "complex64": "complex128", "int64": "float64",
          "int32": "int64", "uint8": "int16", "int8": "int16", "int16": "int32",
          "bool": "int64"}
_NARROWER = {"float64": "float32", "float32": "float16", "complex128": "complex64",
             "int64": "int32", "int32": "int16", "int16": "int8"}


def _other_kind(name):
    return "float32" if name in ("bool", "uint8", "int8", "int16", "int32", "int64") else (
        "float64" if name.startswith("complex") else "int64")


def _dtype_name(t):
    return str(t.dtype).split(".")[-1]


def _outs(L, expected, variant):
    """One out per output of ``expected`` (PyTorch's result) for ``variant``, made with
    library ``L``; None where the variant does not apply."""
    outs = []
    for e in expected:
        name, shape = _dtype_name(e), tuple(e.shape)
        if variant == "wider":
            name = _WIDER.get(name)
        elif variant == "narrower":
            name = _NARROWER.get(name)
        elif variant == "other kind":
            name = _other_kind(name)
        if name is None:
            return None
        dtype = getattr(L, name)
        if variant in ("empty", "wider", "narrower", "other kind"):
            outs.append(L.empty(0, dtype=dtype))
        elif variant == "junk":
            outs.append(L.full(shape, 7, dtype=dtype))
        elif variant == "transposed":
            if len(shape) < 2:
                return None
            outs.append(L.full(shape[::-1], 7, dtype=dtype).permute(
                *range(len(shape) - 1, -1, -1)))
        else:   # resized: one more element along a new leading dim
            outs.append(L.full((2,) + shape, 7, dtype=dtype))
    return outs


def _run(fn, args, kwargs, out):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = fn(*args, **kwargs, out=out)
        except Exception as error:   # noqa: BLE001 (compared with PyTorch's below)
            return None, error, 0
    return result, None, sum("was resized" in str(w.message) for w in caught)


def _compare(name, variant, random, mt_outs, mt_out, t_outs, ours, theirs):
    """The differences between the two libraries' outcomes of one variant (a message, or
    None when they agree)."""
    (result, error, resized), (_, t_error, t_resized) = ours, theirs
    if t_error is not None:
        if error is None:
            return f"PyTorch refuses ({type(t_error).__name__}: {t_error}), microtensor answers"
        if type(error) is not type(t_error):
            return (f"PyTorch raises {type(t_error).__name__} ({t_error}), microtensor "
                    f"{type(error).__name__} ({error})")
        return None
    if error is not None:
        return f"microtensor raises {type(error).__name__}: {error}"
    if isinstance(mt_out, tuple):
        if not (isinstance(result, tuple) and len(result) == len(mt_outs) and
                all(a is b for a, b in zip(result, mt_outs))):
            return "the result is not the outs"
    elif result is not mt_out:
        return "the result is not out"
    for i, (m, t) in enumerate(zip(mt_outs, t_outs)):
        got = (tuple(m.shape), tuple(m.stride()), _dtype_name(m))
        want = (tuple(t.shape), tuple(t.stride()), _dtype_name(t))
        if got != want:
            return f"out {i}: (shape, strides, dtype) {got}, PyTorch's {want}"
        if not random and name not in GAUGE_DEPENDENT and "empty" not in name:
            values, expected = np.asarray(m._array()), t.resolve_conj().numpy()
            if not np.allclose(values, expected, rtol=1e-5, atol=1e-6, equal_nan=True):
                return f"out {i}: values {values.tolist()}, PyTorch's {expected.tolist()}"
    if resized != t_resized:
        return f"{resized} resize warnings, PyTorch {t_resized}"
    return None


@pytest.mark.parametrize("name, index", CASES)
def test_out_matches_torch(name, index):
    op = REGISTRY[name]
    if op.kind == "inplace":
        pytest.skip("an in-place op writes into self")
    t_fn, mt_fn = _functions(name)
    if t_fn is None or mt_fn is None or not callable(t_fn):
        pytest.skip("no function of this name in both libraries")
    args, kwargs = _sample(name, index)
    args, kwargs = _detached(args), {k: _detached(v) for k, v in kwargs.items()}
    t_args, t_kwargs = _to_torch(args), _to_torch(kwargs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = t_fn(*t_args, **t_kwargs)
    except Exception:   # noqa: BLE001
        pytest.skip("PyTorch's function of this name takes other arguments")
    several = isinstance(expected, tuple)
    expected = list(expected) if several else [expected]
    if not all(isinstance(e, torch.Tensor) for e in expected):
        pytest.skip("a result that is not tensors")
    found = {}
    for variant in VARIANTS:
        t_outs, mt_outs = _outs(torch, expected, variant), _outs(mt, expected, variant)
        if t_outs is None:
            continue
        t_out, mt_out = (tuple(t_outs), tuple(mt_outs)) if several else (t_outs[0], mt_outs[0])
        theirs = _run(t_fn, t_args, t_kwargs, t_out)
        before = [(np.array(o._array()), o.shape, o.stride()) for o in mt_outs]
        ours = _run(mt_fn, args, kwargs, mt_out)
        if theirs[1] is not None and ours[1] is not None:
            after = [(np.array(o._array()), o.shape, o.stride()) for o in mt_outs]
            assert all(np.array_equal(a[0], b[0]) and a[1:] == b[1:]
                       for a, b in zip(before, after)), f"{variant}: a refused call changed out"
        difference = _compare(name, variant, op.random, mt_outs, mt_out, t_outs, ours, theirs)
        if difference is not None:
            found[variant] = difference
        if variant == "empty" and isinstance(theirs[1], TypeError):
            break   # PyTorch's function takes no out= here: the other variants neither
    expected_differences = DIFFERENCES.get((name, index), {})
    unexpected = {v: d for v, d in found.items() if v not in expected_differences}
    assert not unexpected, unexpected
    now_matching = set(expected_differences) - set(found)
    assert not now_matching, f"now the same as PyTorch (remove from DIFFERENCES): {now_matching}"


FACTORIES = {
    "zeros": lambda L, **o: L.zeros(2, 3, **o),
    "ones": lambda L, **o: L.ones((3,), **o),
    "full": lambda L, **o: L.full((2, 2), 1.5, **o),
    "empty": lambda L, **o: L.empty(2, 3, **o),
    "eye": lambda L, **o: L.eye(3, 2, **o),
    "arange": lambda L, **o: L.arange(0.5, 4, **o),
    "range": lambda L, **o: L.range(0, 3, **o),
    "linspace": lambda L, **o: L.linspace(0, 1, 5, **o),
    "logspace": lambda L, **o: L.logspace(0, 1, 3, **o),
}


@pytest.mark.parametrize("out", ["float32 empty", "int64 empty", "float64 transposed",
                                 "float32 resized", "asked float64"])
@pytest.mark.parametrize("factory", sorted(FACTORIES))
def test_factory_out_matches_torch(factory, out):
    """A factory given ``out`` makes ``out``'s dtype (another one asked for is refused),
    keeps its strides when the shape fits and resizes it silently when not."""
    def run(L):
        expected_shape = tuple(FACTORIES[factory](torch).shape)
        target = {"float32 empty": lambda: L.empty(0),
                  "int64 empty": lambda: L.empty(0, dtype=L.int64),
                  "float64 transposed": lambda: L.empty(expected_shape[::-1],
                                                        dtype=L.float64).permute(
                      *range(len(expected_shape) - 1, -1, -1)),
                  "float32 resized": lambda: L.zeros(7),
                  "asked float64": lambda: L.empty(0)}[out]()
        extra = {"dtype": L.float64} if out == "asked float64" else {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = FACTORIES[factory](L, out=target, **extra)
            except RuntimeError as error:
                return type(error)
        assert result is target
        values = None if factory == "empty" else np.asarray(result.tolist())
        return (tuple(result.shape), tuple(result.stride()), _dtype_name(result), values,
                sum("was resized" in str(w.message) for w in caught))
    ours, theirs = run(mt), run(torch)
    if not isinstance(theirs, tuple):
        assert ours is theirs
        return
    assert ours[:3] == theirs[:3] and ours[4] == theirs[4]
    if theirs[3] is not None:
        np.testing.assert_allclose(ours[3], theirs[3], rtol=1e-6)
