"""Hardening of the core against PyTorch, the oracle: sizes whose products overflow,
strides and offsets that would leave int64, the legacy constructor ``Tensor(...)``, objects
built from Python without their fields, argument types (floats, bools, NumPy integers),
deep nesting and the repr of huge broadcast tensors."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import microtensor as mt
from microtensor._C import meta
from microtensor._C.tensor import Storage, TensorBase

try:
    import torch
except ImportError:
    torch = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")
fuzz = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INT64_MAX = 2 ** 63 - 1
HUGE_SIZES = st.sampled_from([0, 1, 2, 3, 4, 2 ** 31, 2 ** 32, 2 ** 33, 2 ** 62, INT64_MAX])


def outcome(fn):
    """``("ok", result)`` or ``(exception type name, message)``."""
    try:
        return "ok", fn()
    except Exception as error:  # noqa: BLE001 - the type is what is compared
        return type(error).__name__, str(error)


def phrase(message):
    """The part of an overflow message both libraries share."""
    for known in ("numel: integer multiplication overflow", "Storage size calculation overflowed",
                  "Stride calculation overflowed"):
        if known in message:
            return known
    return None


# ---------------------------------------------------------------------- overflowing sizes

OVERFLOWING = {
    "contiguous of 2**32 x 2**32": lambda L: L.ones(1, 1).expand(2 ** 32, 2 ** 32).contiguous(),
    "expand to 2**62 x 4": lambda L: L.ones(1).expand(2 ** 62, 4),
    "expand to 2**40 x 2**40 x 0": lambda L: L.ones(1, 1, 1).expand(2 ** 40, 2 ** 40, 0),
    "sum of a 2**62 x 4 expand": lambda L: L.ones(1, 1).expand(2 ** 62, 4).sum(),
    "sum over a dim": lambda L: L.ones(1, 1).expand(2 ** 32, 2 ** 32).sum(0),
    "mean": lambda L: L.ones(1, 1).expand(2 ** 62, 4).mean(),
    "matmul 2**32": lambda L: L.ones(1, 1).expand(2 ** 32, 1) @ L.ones(1, 1).expand(1, 2 ** 32),
    "matmul 2**31": lambda L: L.ones(1, 1).expand(2 ** 31, 1) @ L.ones(1, 1).expand(1, 2 ** 31),
    "add broadcasting": lambda L: L.ones(1, 1).expand(2 ** 32, 1) + L.ones(1, 1).expand(1, 2 ** 32),
    "as_strided": lambda L: L.ones(4).as_strided((2 ** 32, 2 ** 32), (0, 0)),
    "clone": lambda L: L.ones(1, 1).expand(2 ** 32, 2 ** 32).clone(),
    "empty 2**62": lambda L: L.empty(2 ** 62),
    "empty 2**31 x 2**31": lambda L: L.empty(2 ** 31, 2 ** 31),
    "empty 2**62 x 2**62 x 0": lambda L: L.empty(2 ** 62, 2 ** 62, 0),
    "empty_strided": lambda L: L.empty_strided((2,), (2 ** 62,)),
    "arange": lambda L: L.arange(2 ** 62),
    "arange of floats": lambda L: L.arange(0, 1e20, 1.0),
    "linspace": lambda L: L.linspace(0, 1, 2 ** 62),
    "randperm": lambda L: L.randperm(2 ** 62),
    "rand": lambda L: L.rand(2 ** 62),
    "zeros": lambda L: L.zeros(2 ** 62, 2),
    "Tensor(2**62)": lambda L: L.Tensor(2 ** 62),
}


@pytest.mark.parametrize("name", sorted(OVERFLOWING))
def test_overflowing_sizes_raise_runtime_error(name):
    kind, message = outcome(lambda: OVERFLOWING[name](mt))
    assert kind == "RuntimeError", (kind, message)
    assert "overflow" in message or "invalid size" in message


@requires_torch
@pytest.mark.parametrize("name", sorted(OVERFLOWING))
def test_overflowing_sizes_as_torch(name):
    mt_kind, mt_message = outcome(lambda: OVERFLOWING[name](mt))
    torch_kind, torch_message = outcome(lambda: OVERFLOWING[name](torch))
    assert mt_kind == torch_kind == "RuntimeError", (mt_message, torch_message)
    if phrase(torch_message) in ("numel: integer multiplication overflow",
                                 "Storage size calculation overflowed"):
        assert phrase(mt_message) is not None, (mt_message, torch_message)


CRASHED_BEFORE = """
import microtensor as mt

def run(name, fn):
    try:
        fn()
        print(name, "ok")
    except Exception as error:
        print(name, type(error).__name__)

run("contiguous", lambda: mt.ones(1, 1).expand(2**32, 2**32).contiguous()[1, 7].item())
run("sum", lambda: mt.ones(1).expand(2**62, 4).sum())
run("matmul", lambda: mt.ones(1, 1).expand(2**32, 1) @ mt.ones(1, 1).expand(1, 2**32))
run("legacy", lambda: mt.Tensor([1.0]).double())
"""


def test_cases_that_crashed_or_hung_raise_in_a_fresh_process():
    """These read outside a storage, looped for ever or segfaulted: run them isolated."""
    result = subprocess.run([sys.executable, "-c", CRASHED_BEFORE], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:4] == ["contiguous RuntimeError", "sum RuntimeError",
                                             "matmul RuntimeError", "legacy ok"]


@requires_torch
@fuzz
@given(st.lists(HUGE_SIZES, min_size=1, max_size=4))
def test_numel_overflow_rule_as_torch(sizes):
    """PyTorch's rule: a product that overflows on the way is refused, even when a later
    size is 0 (a 0 first is fine); expanding never allocates, so any sizes can be tried."""
    source = (1,) * len(sizes)
    mt_kind, mt_result = outcome(lambda: mt.ones(source).expand(*sizes))
    torch_kind, torch_result = outcome(lambda: torch.ones(source).expand(*sizes))
    assert mt_kind == torch_kind
    if mt_kind == "ok":
        assert tuple(mt_result.shape) == tuple(torch_result.shape)
        assert mt_result.numel() == torch_result.numel()
        assert mt_result.stride() == torch_result.stride()
    else:
        assert phrase(mt_result) == phrase(torch_result) == "numel: integer multiplication overflow"


@requires_torch
@fuzz
@given(st.lists(HUGE_SIZES, min_size=1, max_size=4))
def test_empty_size_checks_as_torch(sizes):
    """``empty``'s checks against PyTorch's on the meta device (which allocates nothing).
    Refused sizes go through ``mt.empty`` itself; accepted ones through the same checks it
    runs before allocating, so that nothing big is allocated here."""
    torch_kind, torch_result = outcome(lambda: torch.empty(sizes, device="meta"))
    if torch_kind != "ok":
        mt_kind, mt_message = outcome(lambda: mt.empty(sizes))
        assert mt_kind == torch_kind == "RuntimeError"
        assert phrase(mt_message) == phrase(torch_result), (mt_message, torch_result)
    else:
        meta.check_size_nonnegative(sizes)
        assert meta.contiguous_strides(sizes) == torch_result.stride()
        assert meta.check_storage_nbytes(sizes, 4) == torch_result.untyped_storage().nbytes()


def test_size_products_hold_after_the_checks():
    """The invariants the kernels rely on: numel and nbytes are exact Python ints."""
    t = mt.ones(1).expand(2 ** 62)
    assert t.numel() == 2 ** 62
    assert t.nbytes == 2 ** 64  # an exact count (PyTorch's wraps to 0)
    assert mt.ones(1, 1, 1).expand(0, 2 ** 40, 2 ** 40).numel() == 0
    assert mt.Size([2 ** 32, 2 ** 32]).numel() == 2 ** 64  # exact (PyTorch's wraps to 0)
    small = mt.ones(1, 1).expand(3, 5) @ mt.ones(1, 1).expand(5, 4)
    assert small.tolist() == [[5.0] * 4] * 3


def test_tensors_too_large_for_numpy_raise_runtime_error():
    """NumPy cannot describe 2**61 float32 elements; ops that go through it refuse with a
    RuntimeError (PyTorch would grind through them) instead of NumPy's ValueError."""
    huge = mt.ones(1).expand(2 ** 61)
    for call in (huge.max, huge.numpy, lambda: huge.amax(0)):
        with pytest.raises(RuntimeError, match="too large to be viewed as a NumPy array"):
            call()


def test_tensor_over_huge_expand_reads_only_its_storage():
    t = mt.ones(1, 1).expand(2 ** 31, 2 ** 31)  # 2**62 elements, all one storage element
    assert t[2 ** 31 - 1, 7].item() == 1.0
    with pytest.raises(RuntimeError, match="overflow"):
        t.contiguous()


# ------------------------------------------------------------------------ huge steps

STEP = st.one_of(st.integers(1, 8), st.integers(2 ** 30, INT64_MAX))


@fuzz
@given(STEP, st.integers(0, 2), st.booleans())
def test_slice_with_huge_step_never_wraps(step, dim, transposed):
    x = mt.arange(24).view(2, 3, 4)
    if transposed:
        x = x.permute(2, 0, 1)
    index = (slice(None),) * dim + (slice(None, None, step),)
    stride = x.stride(dim) * step
    if stride > INT64_MAX:
        with pytest.raises(RuntimeError, match="int64"):
            x[index]
        with pytest.raises(RuntimeError, match="int64"):
            x.slice(dim, None, None, step)
    else:
        y = x[index]
        assert y.stride(dim) == stride
        assert np.array_equal(y.numpy(), x.numpy()[index])
        if torch is not None and step < 2 ** 62:  # PyTorch's own length overflows near 2**63
            expected = torch.arange(24).view(2, 3, 4)
            if transposed:
                expected = expected.permute(2, 0, 1)
            assert y.stride() == expected[index].stride()
            assert y.tolist() == expected[index].tolist()


@fuzz
@given(st.integers(0, 1), st.integers(0, 4), STEP)
def test_unfold_with_huge_step_never_wraps(dim, size, step):
    x = mt.arange(40).view(5, 8).t()
    if size > x.shape[dim]:
        return
    if x.stride(dim) * step > INT64_MAX:
        with pytest.raises(RuntimeError, match="int64"):
            x.unfold(dim, size, step)
        return
    y = x.unfold(dim, size, step)
    assert y.stride(dim) == x.stride(dim) * step
    if torch is not None and step < 2 ** 62:
        expected = torch.arange(40).view(5, 8).t().unfold(dim, size, step)
        assert y.shape == expected.shape and y.stride() == expected.stride()
        assert y.tolist() == expected.tolist()


def test_fast_path_slice_falls_back_to_the_checked_op():
    x = mt.arange(10).view(2, 5)
    with pytest.raises(RuntimeError, match="int64"):
        x[::2 ** 62]
    assert x[:, ::2 ** 62].stride() == (5, 2 ** 62)  # fits: kept, as PyTorch
    y = mt.ones(4).as_strided((1,), (INT64_MAX,))
    assert y[1:].numel() == 0 and y[1:].storage_offset() == INT64_MAX
    with pytest.raises(RuntimeError, match="int64"):  # offset 3 + INT64_MAX: PyTorch wraps
        y.as_strided((1,), (INT64_MAX,), 3)[1:]


def test_never_stepped_dims_may_have_any_stride():
    t = mt.ones(4).as_strided((1,), (2 ** 62,))
    assert np.asarray(t).tolist() == [1.0]
    assert t.contiguous().tolist() == [1.0] and t.clone().tolist() == [1.0]
    with pytest.raises(RuntimeError, match="Negative strides"):
        meta.storage_size_for((2,), (-1,))


# ----------------------------------------------------------------- legacy constructor

LEGACY = {
    "no argument": ((), {}),
    "sizes": ((2, 3), {}),
    "one size": ((4,), {}),
    "zero size": ((2, 0), {}),
    "a Size": (("SIZE",), {}),
    "NumPy sizes": ((np.int64(2), np.int32(3)), {}),
    "float list": (([1.0, 2.5],), {}),
    "int list": (([1, 2],), {}),
    "nested list": (([[1, 2], [3, 4]],), {}),
    "tuple data": (((2, 3),), {}),
    "bool list": (([True, False],), {}),
    "ndarray": (("ARRAY",), {}),
    "cpu device": (([1.0],), {"device": "cpu"}),
    "float": ((2.0,), {}),
    "bool": ((True,), {}),
    "negative size": ((-1,), {}),
    "None": ((None,), {}),
    "float size": ((2, 3.0), {}),
    "dtype keyword": ((2,), {"dtype": "FLOAT64"}),
    "ragged": (([[1, 2], [3]],), {}),
}


def _legacy_args(L, args, kwargs):
    swap = {"SIZE": L.Size([2, 3]), "ARRAY": np.array([1, 2, 3])}
    args = tuple(swap.get(a, a) if isinstance(a, str) else a for a in args)
    kwargs = {k: (L.float64 if v == "FLOAT64" else v) for k, v in kwargs.items()}
    return args, kwargs


@requires_torch
@pytest.mark.parametrize("name", sorted(LEGACY))
def test_legacy_constructor_as_torch(name):
    results = []
    for L in (mt, torch):
        args, kwargs = _legacy_args(L, *LEGACY[name])
        results.append(outcome(lambda: L.Tensor(*args, **kwargs)))
    (mt_kind, mt_t), (torch_kind, torch_t) = results
    assert mt_kind == torch_kind, (mt_t, torch_t)
    if mt_kind == "ok":
        assert type(mt_t) is mt.Tensor
        assert tuple(mt_t.shape) == tuple(torch_t.shape)
        assert mt_t.stride() == torch_t.stride()
        assert mt_t.dtype.name == str(torch_t.dtype).replace("torch.", "")
        if "list" in name or name in ("tuple data", "ndarray", "cpu device"):
            assert mt_t.tolist() == torch_t.tolist()


def test_legacy_constructor_builds_whole_tensors():
    x = mt.Tensor([1.0])
    assert x.double().tolist() == [1.0] and x.double().dtype is mt.float64
    y = mt.Tensor(2, 3)
    assert y.numel() == 6 and y.shape == (2, 3) and y.dtype is mt.float32
    assert (y * 0).sum().item() == 0
    assert mt.Tensor().shape == (0,)
    with pytest.raises(RuntimeError, match="legacy constructor expects device type: cpu"):
        mt.Tensor(2, device="cuda")


def test_legacy_constructor_follows_the_default_dtype():
    mt.set_default_dtype(mt.float64)
    try:
        assert mt.Tensor(2).dtype is mt.float64
        assert mt.Tensor([1, 2]).dtype is mt.float64
    finally:
        mt.set_default_dtype(mt.float32)


def test_legacy_constructor_of_a_tensor_is_an_alias():
    x = mt.tensor([1.0, 2.0], dtype=mt.float64, requires_grad=True)
    y = mt.Tensor(x)
    assert y is not x and y.dtype is mt.float64 and y.data_ptr() == x.data_ptr()
    assert y._base is x and y.requires_grad
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]
    if torch is not None:
        t = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
        assert torch.Tensor(t)._base is t


def test_subclasses_construct_like_tensor():
    class Sub(mt.Tensor):
        pass

    s = Sub([1.0, 2.0])
    assert type(s) is Sub and s.tolist() == [1.0, 2.0] and s.dtype is mt.float32
    assert type(Sub(2, 3)) is Sub and Sub(2, 3).shape == (2, 3)
    other = mt.ones(3)
    alias = Sub(other)
    assert type(alias) is Sub and alias.data_ptr() == other.data_ptr()
    assert (Sub([1.0]) + 1).tolist() == [2.0]
    p = mt.nn.Parameter(mt.ones(2))
    assert type(p) is mt.nn.Parameter and p.requires_grad and p.tolist() == [1.0, 1.0]


def test_nothing_builds_a_tensor_or_storage_without_fields():
    with pytest.raises(RuntimeError, match="Cannot directly construct TensorBase"):
        TensorBase()
    with pytest.raises(RuntimeError, match="Cannot directly construct TensorBase"):
        TensorBase.__new__(TensorBase)
    blank = TensorBase.__new__(mt.Tensor)
    assert blank.shape == (0,) and blank.dtype is mt.float32 and blank.tolist() == []
    assert not hasattr(TensorBase, "__setstate_cython__")
    storage = Storage.__new__(Storage)
    assert storage.size() == 0 and storage.device == "cpu"
    assert not hasattr(Storage, "__setstate_cython__")
    import copy
    import pickle
    kept = pickle.loads(pickle.dumps(mt.ones(3).untyped_storage()))
    assert kept.data.tolist() == [1.0, 1.0, 1.0] and copy.copy(kept).size() == 12   # bytes


class _Sub(mt.Tensor):
    pass


@pytest.mark.parametrize("make", [lambda: mt.Tensor.__new__(mt.Tensor), lambda: _Sub.__new__(_Sub),
                                  lambda: mt.nn.Parameter.__new__(mt.nn.Parameter),
                                  lambda: mt.Tensor()])
def test_every_attribute_of_a_blank_tensor_is_safe(make):
    """Reading every attribute, and calling every method without arguments, of a tensor
    made without data raises at most a Python exception."""
    blank = make()
    for name in dir(blank):
        if name in ("__del__", "__init_subclass__", "__subclasshook__", "__class_getitem__"):
            continue
        value = outcome(lambda: getattr(blank, name))
        if value[0] == "ok" and callable(value[1]) and not isinstance(value[1], type):
            outcome(value[1])


# -------------------------------------------------------------------- argument types

@requires_torch
@pytest.mark.parametrize("call", [
    lambda L: L.zeros(2.0), lambda L: L.zeros(True), lambda L: L.zeros((True, 2)),
    lambda L: L.zeros(np.float64(2)), lambda L: L.ones(6).view(2.0, 3),
    lambda L: L.ones(6).view(True, 6), lambda L: L.empty_strided((2,), (1.5,)),
    lambda L: L.empty_strided((2,), (True,)), lambda L: L.ones(2, 3).sum(1.0),
    lambda L: L.ones(2, 3).sum(True), lambda L: L.ones(2, 3).size(1.0),
    lambda L: L.ones(2, 3).size(True), lambda L: L.ones(2, 3).transpose(True, 0),
    lambda L: L.ones(2, 3).transpose(np.float64(0), 1), lambda L: L.ones(6).unfold(0, True, 1),
    lambda L: L.ones(2, 3).argmax(True), lambda L: L.Tensor(2.5),
], ids=lambda call: str(call.__code__.co_firstlineno))
def test_float_and_bool_sizes_and_dims_are_type_errors(call):
    assert outcome(lambda: call(mt))[0] == outcome(lambda: call(torch))[0] == "TypeError"


NUMPY_INTS = {
    "index": lambda L, x: x[np.int64(3)],
    "int32 index": lambda L, x: x[np.int32(-1)],
    "index pair": lambda L, x: x.view(3, 4)[np.int64(1), np.int64(2)],
    "slice": lambda L, x: x[np.int64(1):np.int64(7):np.int64(2)],
    "index list": lambda L, x: x[[np.int64(0), np.int64(2)]],
    "sum": lambda L, x: x.view(3, 4).sum(np.int64(0)),
    "sum of dims": lambda L, x: x.view(3, 4).sum((np.int64(0), np.int32(1))),
    "mean": lambda L, x: x.view(3, 4).float().mean(np.int64(-1)),
    "argmax": lambda L, x: x.view(3, 4).argmax(np.int64(1)),
    "transpose": lambda L, x: x.view(3, 4).transpose(np.int64(0), 1),
    "view": lambda L, x: x.view(np.int64(2), 6),
    "reshape": lambda L, x: x.reshape(np.int64(6), -1),
    "unsqueeze": lambda L, x: x.unsqueeze(np.int64(0)),
    "size": lambda L, x: L.tensor(x.view(3, 4).size(np.int64(1))),
    "zeros": lambda L, x: L.zeros(np.int64(2), np.int32(3)),
    "zeros tuple": lambda L, x: L.zeros((np.int64(2),)),
    "expand": lambda L, x: x[:1].expand(np.int64(3), 1),
    "arange": lambda L, x: L.arange(np.int64(5)),
    "full": lambda L, x: L.full((np.int64(2),), 1.5),
    "new_zeros": lambda L, x: x.new_zeros(np.int64(3)),
    "linspace": lambda L, x: L.linspace(0, 1, np.int64(3)),
    "eye": lambda L, x: L.eye(np.int64(2)),
}


@pytest.mark.parametrize("name", sorted(NUMPY_INTS))
def test_numpy_integers_as_indices_dims_and_sizes(name):
    result = NUMPY_INTS[name](mt, mt.arange(12))
    assert isinstance(result, mt.Tensor)
    if torch is not None:
        expected = NUMPY_INTS[name](torch, torch.arange(12))
        assert tuple(result.shape) == tuple(expected.shape)
        assert result.tolist() == expected.tolist()


PER_SAMPLE_NUMPY_DIMS = {
    "sum": lambda t: t.sum(np.int64(0)),
    "sum of dims": lambda t: t.sum((np.int64(0), 1)),
    "amax": lambda t: t.amax(np.int64(1)),
    "all": lambda t: (t > 0).all(np.int64(1)),
    "argmax": lambda t: t.argmax(np.int64(1)),
    "transpose": lambda t: t.transpose(np.int64(0), 1),
    "index": lambda t: t[np.int64(1)],
    "squeeze": lambda t: t[:1].squeeze(np.int64(0)),
    "flip": lambda t: t.flip(np.int64(0)),
    "roll": lambda t: t.roll(np.int64(1), np.int64(0)),
    "cat": lambda t: mt.cat([t, t], np.int64(1)),
    "softmax": lambda t: t.softmax(np.int64(1)),
}


@pytest.mark.parametrize("name", sorted(PER_SAMPLE_NUMPY_DIMS))
def test_numpy_integer_dims_under_vmap_match_a_loop(name):
    fn = PER_SAMPLE_NUMPY_DIMS[name]
    x = mt.randn(3, 4, 5)
    batched = mt.vmap(fn)(x)
    looped = mt.stack([fn(x[i]) for i in range(3)])
    assert batched.shape == looped.shape
    assert batched.tolist() == looped.tolist()


@requires_torch
def test_numpy_bools_are_not_indices():
    x = mt.arange(3)
    assert outcome(lambda: x[np.True_])[0] == outcome(lambda: torch.arange(3)[np.True_])[0] \
        == "IndexError"


def _nested(depth):
    data = 1.0
    for _ in range(depth):
        data = [data]
    return data


@pytest.mark.parametrize("depth", [65, 2000])
@pytest.mark.parametrize("dtype", [None, mt.float64])
def test_deep_nesting_is_a_value_error(depth, dtype):
    with pytest.raises(ValueError, match="too many dimensions 'list'"):
        mt.tensor(_nested(depth), dtype=dtype)
    with pytest.raises(ValueError, match="too many dimensions"):
        mt.tensor([1.0, _nested(depth)])
    assert mt.tensor(_nested(64)).dim() == 64


@requires_torch
def test_deep_nesting_as_torch():
    with pytest.raises(ValueError, match="too many dimensions 'list'"):
        torch.tensor(_nested(2000))


# --------------------------------------------------------------------------- printing

HUGE_REPRS = [
    lambda L: L.ones(1).expand(2 ** 40),
    lambda L: L.ones(1).expand(2 ** 62),
    lambda L: L.arange(3).expand(2 ** 40, 3),
    lambda L: L.ones(1, 1, 1).expand(2 ** 20, 2 ** 20, 2 ** 20),
    lambda L: L.arange(7000.0).view(7, 1000).t(),
    lambda L: L.arange(6000.0).view(6, 1000),
    lambda L: L.arange(1001),
]


@pytest.mark.parametrize("make", HUGE_REPRS)
def test_repr_of_huge_tensors_is_summarized(make):
    text = repr(make(mt))
    assert "..." in text and text.startswith("tensor(")
    if torch is not None:
        assert text == repr(make(torch)).replace("torch.", "microtensor.")


@pytest.mark.parametrize("data, dtype", [([2**40], "int32"), ([2**70], "int64"),
                                         ([1, 2**63], None), ([[2**64]], "int32")])
def test_tensor_of_out_of_range_python_ints(data, dtype):
    kind = outcome(lambda: mt.tensor(data, dtype=dtype and getattr(mt, dtype)))[0]
    assert kind in ("RuntimeError", "ValueError")
    if torch is not None:
        assert kind == outcome(lambda: torch.tensor(data, dtype=dtype and getattr(torch, dtype)))[0]
