"""``assert_close``: PyTorch's ``torch.testing.assert_close``, its tolerances and messages.

Inputs are paired up through nested sequences and mappings; each leaf pair is two tensors
(or two NumPy arrays), two Python/NumPy numbers, two booleans or two Nones.  All pairs are
formed first (structural mismatches raise at once), then compared in order; the first
mismatch raises ``AssertionError`` with PyTorch's text.
"""
import cmath
import collections.abc

import numpy as np

from microtensor._C.tensor import TensorBase, get_default_dtype
from microtensor._dtype import promote_types

# (rtol, atol) by dtype name; every other dtype compares exactly
_DTYPE_PRECISIONS = {
    "float16": (0.001, 1e-5), "bfloat16": (0.016, 1e-5), "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7), "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7),
}
# Python numbers take the tolerances of the dtype PyTorch gives them
_NUMBER_DTYPES = {int: "int64", float: "float64", complex: "complex128"}


class _Mismatch(Exception):
    """A failed check: the exception type to raise, its message and the item's path."""

    def __init__(self, type_, msg, path=()):
        super().__init__(msg)
        self.type, self.msg, self.path = type_, msg, path

    def to_error(self, msg=None):
        if isinstance(msg, str):
            return self.type(msg)
        text = self.msg
        if self.path:
            text += "\n\nThe failure occurred for item " + "".join(str([p]) for p in self.path)
        return self.type(msg(text) if callable(msg) else text)


def _tolerances(dtype_names, rtol, atol, path):
    if (rtol is None) != (atol is None):
        raise _Mismatch(ValueError, f"Both 'rtol' and 'atol' must be either specified or "
                                    f"omitted, but got no {'rtol' if rtol is None else 'atol'}.",
                        path)
    if rtol is not None:
        return rtol, atol
    rtols, atols = zip(*(_DTYPE_PRECISIONS.get(name, (0.0, 0.0)) for name in dtype_names))
    return max(rtols), max(atols)


def _mismatch_message(identifier, extra, abs_diff, rel_diff, rtol, atol, abs_at=None,
                      rel_at=None):
    equality = rtol == 0 and atol == 0

    def line(kind, diff, at, tol):
        text = f"{kind.title()} difference: {diff}" if at is None else \
            f"Greatest {kind} difference: {diff} at index {at}"
        return text + ("" if equality else f" (up to {tol} allowed)") + "\n"

    text = f"{identifier} are not {'equal' if equality else 'close'}!\n\n{extra.strip()}\n"
    text += line("absolute", abs_diff, abs_at, atol) + line("relative", rel_diff, rel_at, rtol)
    return text.strip()


def _scalar_message(actual, expected, rtol, atol):
    abs_diff = abs(actual - expected)
    rel_diff = float("inf") if expected == 0 else abs_diff / abs(expected)
    return _mismatch_message("Scalars", f"Expected {expected} but got {actual}.", abs_diff,
                             rel_diff, rtol, atol)


class _NonePair:
    def __init__(self, actual, expected, path, **_):
        if actual is not None and expected is not None:
            raise TypeError
        self.actual, self.expected = actual, expected

    def compare(self):
        if not (self.actual is None and self.expected is None):
            raise _Mismatch(AssertionError,
                            f"None mismatch: {self.actual} is not {self.expected}")


class _BooleanPair:
    def __init__(self, actual, expected, path, **_):
        if not all(isinstance(x, (bool, np.bool_)) for x in (actual, expected)):
            raise TypeError
        self.actual, self.expected = bool(actual), bool(expected)

    def compare(self):
        if self.actual is not self.expected:
            raise _Mismatch(AssertionError,
                            f"Booleans mismatch: {self.actual} is not {self.expected}")


class _NumberPair:
    def __init__(self, actual, expected, path, rtol, atol, equal_nan, check_dtype, **_):
        numbers = (int, float, complex, np.number)
        if not all(isinstance(x, numbers) for x in (actual, expected)):
            raise TypeError
        self.actual, self.expected = (x.item() if isinstance(x, np.number) else x
                                      for x in (actual, expected))
        self.rtol, self.atol = _tolerances(
            [_NUMBER_DTYPES.get(type(x), "bool") for x in (self.actual, self.expected)], rtol,
            atol, path)
        self.equal_nan, self.check_dtype = equal_nan, check_dtype

    def compare(self):
        actual, expected = self.actual, self.expected
        if self.check_dtype and type(actual) is not type(expected):
            raise _Mismatch(AssertionError, f"The (d)types do not match: {type(actual)} != "
                                            f"{type(expected)}.")
        if actual == expected or (self.equal_nan and cmath.isnan(actual)
                                  and cmath.isnan(expected)):
            return
        abs_diff = abs(actual - expected)
        if cmath.isfinite(abs_diff) and abs_diff <= self.atol + self.rtol * abs(expected):
            return
        raise _Mismatch(AssertionError, _scalar_message(actual, expected, self.rtol, self.atol))


class _TensorPair:
    def __init__(self, actual, expected, path, rtol, atol, equal_nan, check_device,
                 check_dtype, check_layout, check_stride, allow_subclasses, **_):
        if not (isinstance(actual, type(expected)) or isinstance(expected, type(actual))):
            raise TypeError
        if not allow_subclasses and type(actual) is not type(expected):
            raise TypeError
        self.actual, self.expected = (self._to_tensor(x) for x in (actual, expected))
        self.rtol, self.atol = _tolerances(
            [t.dtype.name for t in (self.actual, self.expected)], rtol, atol, path)
        self.equal_nan, self.check_device = equal_nan, check_device
        self.check_dtype, self.check_stride = check_dtype, check_stride

    @staticmethod
    def _to_tensor(x):
        if isinstance(x, TensorBase):
            return x.detach()
        if isinstance(x, np.ndarray):
            from microtensor.ops.factory import as_tensor
            try:
                return as_tensor(x)
            except Exception:   # an array microtensor cannot hold: no pair handles it
                raise TypeError from None
        raise TypeError

    def compare(self):
        actual, expected = self.actual, self.expected
        for attribute, check, a, e in (
                ("shape", True, actual.shape, expected.shape),
                ("stride()", self.check_stride, actual.stride(), expected.stride()),
                ("device", self.check_device, actual.device, expected.device),
                ("dtype", self.check_dtype, actual.dtype, expected.dtype)):
            if check and a != e:
                raise _Mismatch(AssertionError, f"The values for attribute '{attribute}' do "
                                                f"not match: {a} != {e}.")
        if actual.dtype != expected.dtype:
            common = promote_types(actual.dtype, expected.dtype)
            actual, expected = actual.to(common), expected.to(common)
        # by microtensor's dtype: NumPy's kind of bfloat16 (ml_dtypes) is not "f"
        inexact = actual.dtype.is_floating_point or actual.dtype.name.startswith("complex")
        a, e = actual.cpu().numpy(), expected.cpu().numpy()
        with np.errstate(all="ignore"):
            matches = self._isclose(a, e, inexact)
            if matches.all():
                return
            if a.ndim == 0:
                msg = _scalar_message(a.item(), e.item(), self.rtol, self.atol)
            else:
                msg = self._tensor_message(a, e, matches, inexact)
        raise _Mismatch(AssertionError, msg)

    def _isclose(self, a, e, inexact):
        """``torch.isclose``: equal, or both NaN (with equal_nan), or a finite difference
        within ``atol + rtol * |expected|``, computed in the tensors' dtype."""
        matches = a == e
        if inexact:
            if self.equal_nan:
                matches |= np.isnan(a) & np.isnan(e)
            error = np.abs(a - e)
            matches |= np.isfinite(error) & (error <= self.atol + np.abs(self.rtol * e))
        elif self.rtol or self.atol:
            error = np.abs(a.astype(np.float64) - e.astype(np.float64))
            matches |= error <= self.atol + np.abs(self.rtol * e.astype(np.float64))
        return matches

    def _tensor_message(self, a, e, matches, inexact):
        total, mismatched = matches.size, int(matches.size - matches.sum())
        extra = f"Mismatched elements: {mismatched} / {total} ({mismatched / total:.1%})"
        a, e, matches = a.ravel(), e.ravel(), matches.ravel()
        if inexact:
            abs_diff = np.abs(a - e)
            abs_diff[matches] = 0
            rel_diff = abs_diff / np.abs(e)
        else:   # as PyTorch: int64 differences, divided in the default float dtype
            a, e = a.astype(np.int64), e.astype(np.int64)
            abs_diff = np.abs(a - e)
            abs_diff[matches] = 0
            real = get_default_dtype().np
            rel_diff = abs_diff.astype(real) / np.abs(e).astype(real)
        rel_diff[matches] = 0
        abs_at, rel_at = int(np.argmax(abs_diff)), int(np.argmax(rel_diff))
        shape = self.actual.shape
        return _mismatch_message("Tensor-likes", extra, abs_diff[abs_at].item(),
                                 rel_diff[rel_at].item(), self.rtol, self.atol,
                                 tuple(int(i) for i in np.unravel_index(abs_at, shape)),
                                 tuple(int(i) for i in np.unravel_index(rel_at, shape)))


_PAIR_TYPES = (_NonePair, _BooleanPair, _NumberPair, _TensorPair)


def _pairs(actual, expected, path, options):
    """The leaf pairs of ``actual`` and ``expected``, walking sequences and mappings."""
    sequence, mapping = collections.abc.Sequence, collections.abc.Mapping
    if isinstance(actual, sequence) and not isinstance(actual, str) \
            and isinstance(expected, sequence) and not isinstance(expected, str):
        if len(actual) != len(expected):
            raise _Mismatch(AssertionError, f"The length of the sequences mismatch: "
                                            f"{len(actual)} != {len(expected)}", path)
        return [pair for i in range(len(actual))
                for pair in _pairs(actual[i], expected[i], (*path, i), options)]
    if isinstance(actual, mapping) and isinstance(expected, mapping):
        actual_keys, expected_keys = set(actual.keys()), set(expected.keys())
        if actual_keys != expected_keys:
            raise _Mismatch(AssertionError,
                            f"The keys of the mappings do not match:\n"
                            f"Missing keys in the actual mapping: "
                            f"{sorted(expected_keys - actual_keys)}\n"
                            f"Additional keys in the actual mapping: "
                            f"{sorted(actual_keys - expected_keys)}", path)
        try:
            keys = sorted(actual_keys)
        except TypeError:   # keys of mixed types: any order
            keys = list(actual_keys)
        return [pair for key in keys
                for pair in _pairs(actual[key], expected[key], (*path, key), options)]
    for pair_type in _PAIR_TYPES:
        try:
            pair = pair_type(actual, expected, path, **options)
        except TypeError:   # this pair type does not take these inputs: try the next one
            continue
        pair.path = path
        return [pair]
    raise _Mismatch(TypeError, f"No comparison pair was able to handle inputs of type "
                               f"{type(actual)} and {type(expected)}.", path)


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None,
                 equal_nan=False, check_device=True, check_dtype=True, check_layout=True,
                 check_stride=False, msg=None):
    """Assert that ``actual`` and ``expected`` are close, as ``torch.testing.assert_close``.

    Tensors must match in shape, device and dtype (unless ``check_device`` /
    ``check_dtype`` is False: then both move to the CPU and a common dtype), and in
    strides with ``check_stride``; their values must satisfy
    ``|actual - expected| <= atol + rtol * |expected|`` elementwise.  Without ``rtol`` and
    ``atol`` the looser of the two dtypes' defaults applies (float32: 1.3e-6 and 1e-5,
    float64: 1e-7 and 1e-7, integers and bools: exact).  Python numbers compare likewise
    (``float`` as float64), and sequences and mappings compare item by item.  ``msg``
    replaces the failure message, or, if callable, maps it to a new one.
    ``check_layout`` is accepted as PyTorch's: every microtensor tensor is strided.
    """
    __tracebackhide__ = True
    options = dict(rtol=rtol, atol=atol, equal_nan=equal_nan, check_device=check_device,
                   check_dtype=check_dtype, check_layout=check_layout,
                   check_stride=check_stride, allow_subclasses=allow_subclasses)
    try:
        pairs = _pairs(actual, expected, (), options)
    except _Mismatch as mismatch:
        raise mismatch.to_error() from None
    for pair in pairs:
        try:
            pair.compare()
        except _Mismatch as mismatch:
            mismatch.path = pair.path
            raise mismatch.to_error(msg) from None
