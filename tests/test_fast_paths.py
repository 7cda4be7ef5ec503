"""The C fast paths (``_C/fast_paths.pxi``) agree with the ops they shortcut.

Each fast path is a method call on a tensor (``a + b``, ``x[1:]``, ``x.sum(0)`` ...); its
reference is the registered op called through the dispatcher, which never takes a fast
path (``ops.dispatch.call_by_name``, ``ops.dispatch.binary``, ``ops.indexing.getitem``).
Hypothesis draws the inputs: sizes, strides (stride 0 and overlapping ones included),
storage offsets, dtypes, broadcasting partners, Python numbers, tensors that require grad
(leaves, and views of leaves), grad mode on or off.  Both calls must then agree on the
values, the result's dtype and geometry (the strides of the dims it steps along), whether it is a view of the input, the node
autograd recorded and the gradients it gives, or raise the same error.
"""
import operator
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import microtensor as mt
import microtensor.nn.functional as F
from microtensor._C.dispatch import set_unary_kernel, unary_kernels
from microtensor._C.meta import is_contiguous
from microtensor.ops.dispatch import binary, call_by_name
from microtensor.ops.indexing import getitem
from microtensor.ops.registry import REGISTRY

DTYPES = [mt.float32, mt.float64, mt.int64, mt.int32, mt.bool]
FLOATS = [mt.float32, mt.float64]
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- inputs

@st.composite
def recipes(draw, dtypes=DTYPES, max_dims=3, sizes=None):
    """How to build an input tensor (built twice: once per path, so that gradients and
    in-place state of one call cannot leak into the other)."""
    if sizes is None:
        ndim = draw(st.integers(0, max_dims))
        sizes = tuple(draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    if draw(st.booleans()):
        strides = tuple(mt.empty(sizes).stride())
    else:
        strides = tuple(draw(st.lists(st.integers(0, 5), min_size=len(sizes),
                                      max_size=len(sizes))))
    dtype = draw(st.sampled_from(dtypes))
    grad = draw(st.sampled_from(["none", "leaf", "view of leaf"])) \
        if dtype.is_floating_point else "none"
    return dict(sizes=sizes, strides=strides, offset=draw(st.integers(0, 3)), dtype=dtype,
                seed=draw(st.integers(0, 2 ** 32 - 1)), grad=grad)


def build(recipe):
    """(input tensor, the leaf whose gradient the test compares or None)."""
    sizes, strides, offset = recipe["sizes"], recipe["strides"], recipe["offset"]
    extent = offset + 1 + sum((n - 1) * s for n, s in zip(sizes, strides))
    values = np.random.default_rng(recipe["seed"]).standard_normal(max(extent, offset + 1)) * 3
    dtype = recipe["dtype"]
    if dtype is mt.bool:
        values = values > 0
    elif not dtype.is_floating_point:
        values = np.round(values)
    storage = mt.tensor(values.tolist(), dtype=dtype)
    if recipe["grad"] == "leaf":
        leaf = storage.as_strided(sizes, strides, offset).detach().requires_grad_()
        return leaf, leaf
    if recipe["grad"] == "view of leaf":
        leaf = storage.requires_grad_()
        return leaf.as_strided(sizes, strides, offset), leaf
    return storage.as_strided(sizes, strides, offset), None


def python_numbers():
    return st.one_of(st.integers(-4, 4), st.sampled_from([2 ** 31, -2 ** 40, 2 ** 53 + 1, 2 ** 70]),
                     st.floats(-4, 4, width=32), st.sampled_from([0.1, 1e300, float("inf"),
                                                                  float("nan")]),
                     st.booleans())


def broadcast_partner_sizes(draw, sizes):
    """Sizes that broadcast with ``sizes`` (mostly) or arbitrary ones (mostly refused)."""
    if draw(st.integers(0, 4)) == 0:
        ndim = draw(st.integers(0, 3))
        return tuple(draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    kept = sizes[draw(st.integers(0, len(sizes))):]
    lead = (1,) * draw(st.integers(0, 1))
    return lead + tuple(1 if draw(st.booleans()) else n for n in kept)


# --------------------------------------------------------------------------- comparison

def outcome(fn, recipes_, grad_enabled, seed):
    """What calling ``fn`` on inputs built from ``recipes_`` gives: the result's
    observable state, the gradients it sends to the leaves, or the error."""
    built = [build(r) if isinstance(r, dict) else (r, None) for r in recipes_]
    args = [value for value, _ in built]
    leaves = [leaf for _, leaf in built if leaf is not None]
    try:
        with mt.set_grad_enabled(grad_enabled):
            out = fn(*args)
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return ("error", type(exc), str(exc))
    state = {
        "type": type(out), "dtype": out.dtype, "sizes": tuple(out.shape),
        "strides": _stepped_strides(out), "offset": out.storage_offset(),
        # the flag a path sets must be what the geometry says (fast paths may pass it on)
        "contiguous": (out.is_contiguous(), is_contiguous(out.shape, out.stride())),
        "is self": [out is a for a in args], "is view": out._is_view(),
        "base": [out._base is (a._base if a._base is not None else a)
                 for a in args if isinstance(a, mt.Tensor)],
        "requires_grad": out.requires_grad, "is_leaf": out.is_leaf,
        "node": type(out.grad_fn).__name__ if out.grad_fn is not None else None,
        "values": out.detach().numpy().copy(),
    }
    if out.requires_grad:
        gradient = np.random.default_rng(seed).standard_normal(out.shape)
        try:
            out.backward(mt.tensor(gradient.tolist(), dtype=out.dtype).reshape(out.shape))
        except Exception as exc:  # noqa: BLE001 - both paths' nodes must fail alike
            state["backward error"] = (type(exc), str(exc))
        else:
            state["grads"] = [leaf.grad.numpy().copy() if leaf.grad is not None else None
                              for leaf in leaves]
    return state


def _stepped_strides(t):
    """The strides of the dims an index steps along (size > 1, in a non-empty tensor).
    The others are never multiplied by a non-zero index, and there the two paths may pick
    different values: PyTorch's own choice for them depends on whether a number operand
    became a 0-dim tensor (``(empty_strided((2, 1), (1, 5)) + 0).stride()`` is ``(1, 2)``
    but ``(x + x).stride()`` is ``(1, 1)``)."""
    if t.numel() == 0:
        return None
    return tuple(s if n > 1 else None for n, s in zip(t.shape, t.stride()))


def assert_agree(fast, reference, recipes_, grad_enabled=True, seed=0, exact=True):
    got = outcome(fast, recipes_, grad_enabled, seed)
    want = outcome(reference, recipes_, grad_enabled, seed)
    if isinstance(got, tuple) or isinstance(want, tuple):   # an error
        assert got == want
        return
    assert got.keys() == want.keys()
    for key in want:
        if key in ("values", "grads"):
            continue
        assert got[key] == want[key], key
    _assert_same_numbers(got["values"], want["values"], exact)
    for a, b in zip(got.get("grads", []), want.get("grads", [])):
        assert (a is None) == (b is None)
        if a is not None:
            _assert_same_numbers(a, b, exact)


def _assert_same_numbers(got, want, exact):
    assert got.dtype == want.dtype and got.shape == want.shape
    if exact or got.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
    else:   # sums and products: the fast paths add in another order
        tol = 1e-5 if got.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# --------------------------------------------------------------------------- the paths

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # 0/0, inf - inf

BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
          "div": operator.truediv}


@SETTINGS
@given(st.data(), st.sampled_from(sorted(BINARY)), st.booleans())
def test_arithmetic_with_a_tensor(data, name, grad_enabled):
    left = data.draw(recipes())
    partner = broadcast_partner_sizes(data.draw, left["sizes"])
    same_dtype = data.draw(st.booleans())
    right = data.draw(recipes(dtypes=[left["dtype"]] if same_dtype else DTYPES,
                              sizes=partner))
    if data.draw(st.booleans()):
        left, right = right, left
    assert_agree(BINARY[name], lambda a, b: binary(name, a, b), [left, right], grad_enabled)


@SETTINGS
@given(st.data(), st.sampled_from(sorted(BINARY)), st.booleans(), st.booleans())
def test_arithmetic_with_a_python_number(data, name, number_first, grad_enabled):
    tensor, number = data.draw(recipes()), data.draw(python_numbers())
    operands = [number, tensor] if number_first else [tensor, number]
    assert_agree(BINARY[name], lambda a, b: binary(name, a, b), operands, grad_enabled)


@SETTINGS
@given(st.data(), st.booleans())
def test_matmul(data, grad_enabled):
    m, k, n = (data.draw(st.integers(0, 5)) for _ in range(3))
    k2 = k if data.draw(st.integers(0, 5)) else data.draw(st.integers(0, 5))
    dtype = data.draw(st.sampled_from(DTYPES))
    a = data.draw(recipes(dtypes=[dtype], sizes=(m, k)))
    b = data.draw(recipes(dtypes=[dtype] if data.draw(st.booleans()) else DTYPES,
                          sizes=(k2, n)))
    assert_agree(operator.matmul, lambda x, y: call_by_name("matmul", x, y), [a, b],
                 grad_enabled, exact=False)


@SETTINGS
@given(st.data(), st.booleans())
def test_matrix_times_vector(data, grad_enabled):
    """(m, k) @ (k,): the fast path's one BLAS call (recorded when autograd records),
    against the op; a mismatched size or dtype takes the op's path and its error."""
    m, k = (data.draw(st.integers(0, 5)) for _ in range(2))
    k2 = k if data.draw(st.integers(0, 5)) else data.draw(st.integers(0, 5))
    dtype = data.draw(st.sampled_from(DTYPES))
    a = data.draw(recipes(dtypes=[dtype], sizes=(m, k)))
    b = data.draw(recipes(dtypes=[dtype] if data.draw(st.booleans()) else DTYPES,
                          sizes=(k2,)))
    assert_agree(operator.matmul, lambda x, y: call_by_name("matmul", x, y), [a, b],
                 grad_enabled, exact=False)


def test_matmul_above_the_small_product_limit():
    """The large-product branch (NumPy's matmul into the result)."""
    for dtype in FLOATS:
        a = dict(sizes=(20, 30), strides=(1, 20), offset=1, dtype=dtype, seed=1, grad="leaf")
        b = dict(sizes=(30, 20), strides=(20, 1), offset=0, dtype=dtype, seed=2, grad="none")
        assert_agree(operator.matmul, lambda x, y: call_by_name("matmul", x, y), [a, b],
                     exact=False)


@SETTINGS
@given(st.data(), st.booleans())
def test_matmul_by_a_stacked_repeated_matrix(data, grad_enabled):
    """(B, m, k) @ (B, k, n) where the second operand repeats one matrix (stride 0 along
    B, a weight expanded over a vmap batch): the fast path's single product, against the
    op; other layouts of the first operand take the op's path."""
    batch, m, k, n = (data.draw(st.integers(0, 4)) for _ in range(4))
    dtype = data.draw(st.sampled_from(FLOATS))
    a = data.draw(recipes(dtypes=[dtype], sizes=(batch, m, k)))
    b = data.draw(recipes(dtypes=[dtype], sizes=(batch, k, n)))
    b["strides"] = (0,) + b["strides"][1:]
    assert_agree(operator.matmul, lambda x, y: call_by_name("matmul", x, y), [a, b],
                 grad_enabled, exact=False)


indices = st.one_of(st.integers(-6, 6),
                    st.builds(slice, st.none() | st.integers(-6, 6), st.none() | st.integers(-6, 6),
                              st.none() | st.integers(-2, 3) | st.just(2 ** 62)))


@SETTINGS
@given(recipes(), indices, st.booleans())
def test_getitem(recipe, index, grad_enabled):
    assert_agree(lambda x: x[index], lambda x: getitem(x, index), [recipe], grad_enabled)


dims = st.integers(-4, 4)


@SETTINGS
@given(recipes(), dims, dims, st.booleans())
def test_transpose_and_t(recipe, dim0, dim1, grad_enabled):
    assert_agree(lambda x: x.transpose(dim0, dim1),
                 lambda x: call_by_name("transpose", x, dim0, dim1), [recipe], grad_enabled)
    assert_agree(lambda x: x.t(), lambda x: call_by_name("t", x), [recipe], grad_enabled)


@SETTINGS
@given(recipes(), st.integers(-5, 5), st.booleans())
def test_unsqueeze(recipe, dim, grad_enabled):
    assert_agree(lambda x: x.unsqueeze(dim), lambda x: call_by_name("unsqueeze", x, dim),
                 [recipe], grad_enabled)


@st.composite
def target_shapes(draw, sizes):
    numel = int(np.prod(sizes))
    candidates = [(numel,), (-1,), (1, numel), (numel, 1), tuple(reversed(sizes)), sizes,
                  (1,) + tuple(sizes), ()]
    if numel % 2 == 0:
        candidates += [(2, -1), (-1, 2, 1)]
    shape = draw(st.sampled_from(candidates) |
                 st.lists(st.integers(-2, 6), max_size=3).map(tuple))
    return shape


@SETTINGS
@given(st.data(), st.sampled_from(["view", "reshape"]), st.booleans())
def test_view_and_reshape(data, name, grad_enabled):
    recipe = data.draw(recipes())
    shape = data.draw(target_shapes(recipe["sizes"]))
    form = data.draw(st.sampled_from(["varargs", "tuple", "Size"]))
    args = {"varargs": shape, "tuple": (shape,), "Size": (mt.Size(shape),)}[form]
    assert_agree(lambda x: getattr(x, name)(*args),
                 lambda x: call_by_name(name, x, *args), [recipe], grad_enabled)


@SETTINGS
@given(st.data(), st.booleans())
def test_expand(data, grad_enabled):
    recipe = data.draw(recipes())
    lead = tuple(data.draw(st.lists(st.integers(0, 3), max_size=2)))
    per_dim = tuple(data.draw(st.sampled_from([-1, n, 3 if n == 1 else n + 1, -2]))
                    for n in recipe["sizes"])
    shape = lead + per_dim
    args = shape if data.draw(st.booleans()) else (shape,)
    assert_agree(lambda x: x.expand(*args), lambda x: call_by_name("expand", x, *args),
                 [recipe], grad_enabled)


@SETTINGS
@given(st.data(), st.booleans())
def test_as_strided(data, grad_enabled):
    recipe = data.draw(recipes())
    ndim = data.draw(st.integers(0, 3))
    size = tuple(data.draw(st.lists(st.integers(-1, 3), min_size=ndim, max_size=ndim)))
    stride_ndim = ndim if data.draw(st.integers(0, 5)) else data.draw(st.integers(0, 3))
    stride = tuple(data.draw(st.lists(st.integers(-1, 3), min_size=stride_ndim,
                                      max_size=stride_ndim)))
    offset = data.draw(st.none() | st.integers(-1, 6))
    assert_agree(lambda x: x.as_strided(size, stride, offset),
                 lambda x: call_by_name("as_strided", x, size, stride, offset),
                 [recipe], grad_enabled)


formats = st.sampled_from([None, mt.preserve_format, mt.contiguous_format, mt.channels_last])


@SETTINGS
@given(recipes(max_dims=4), formats, st.booleans())
def test_clone_and_contiguous(recipe, memory_format, grad_enabled):
    kwargs = {} if memory_format is None else {"memory_format": memory_format}
    assert_agree(lambda x: x.clone(**kwargs), lambda x: call_by_name("clone", x, **kwargs),
                 [recipe], grad_enabled)
    if memory_format is not mt.preserve_format:
        assert_agree(lambda x: x.contiguous(**kwargs),
                     lambda x: call_by_name("contiguous", x, **kwargs), [recipe],
                     grad_enabled)


sum_dims = st.one_of(st.none(), st.integers(-4, 4),
                     st.lists(st.integers(-4, 4), max_size=3).map(tuple),
                     st.lists(st.integers(-4, 4), min_size=1, max_size=2))


@SETTINGS
@given(recipes(), sum_dims, st.sampled_from([None, False, True]), st.booleans(),
       st.booleans())
def test_sum(recipe, dim, keepdim, by_keyword, grad_enabled):
    if dim is None and keepdim is None:
        args, kwargs = (), {}
    elif by_keyword:
        args, kwargs = (), {"dim": dim, **({} if keepdim is None else {"keepdim": keepdim})}
    else:
        args, kwargs = (dim,) + (() if keepdim is None else (keepdim,)), {}
    assert_agree(lambda x: x.sum(*args, **kwargs),
                 lambda x: call_by_name("sum", x, *args, **kwargs), [recipe], grad_enabled,
                 exact=False)


def test_the_comparison_sees_a_wrong_result():
    """The harness is not vacuous: a path that differs in values, strides or node fails."""
    recipe = dict(sizes=(2, 3), strides=(3, 1), offset=0, dtype=mt.float32, seed=0,
                  grad="leaf")
    with pytest.raises(AssertionError):
        assert_agree(lambda x: x * 2, lambda x: x * 3, [recipe])
    with pytest.raises(AssertionError):
        assert_agree(lambda x: x.t().contiguous().t(), lambda x: x.clone(), [recipe])
    with pytest.raises(AssertionError):
        assert_agree(lambda x: x.view(6).view(2, 3), lambda x: x.clone(), [recipe])
    with pytest.raises(AssertionError):
        assert_agree(lambda x: x[0], lambda x: x[1], [recipe])


# --------------------------------------------------------------------------- one-input ops
# The dispatcher serves the one-input pointwise ops in C (``dispatch.set_unary_kernel``);
# the reference is the same call with the op's entry taken out of that table.

UNARY_KERNELS = unary_kernels()
UNARY = sorted(op.name for op in UNARY_KERNELS)
OPERATORS = {"neg": operator.neg, "abs": operator.abs}
FUNCTIONAL = {"relu": F.relu, "tanh": F.tanh, "sigmoid": F.sigmoid, "silu": F.silu,
              "mish": F.mish, "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish,
              "log_sigmoid": F.logsigmoid}


def unary_callers(name):
    """Every spelling of op ``name`` on one tensor: method, function, the op object,
    Python's operator, ``nn.functional``."""
    op = REGISTRY[name]
    callers = {"op": op}
    if op.method:
        callers["method"] = lambda x: getattr(x, name)()
    if op.function:
        callers["function"] = lambda x: getattr(mt, name)(x)
    if name in OPERATORS:
        callers["operator"] = OPERATORS[name]
    if name in FUNCTIONAL:
        callers["functional"] = FUNCTIONAL[name]
    return callers


def without_c_path(name):
    """``op(x)`` with the op's entry out of the C table: the dispatcher's general way."""
    op = REGISTRY[name]

    def reference(x):
        set_unary_kernel(op, None)
        try:
            return op(x)
        finally:
            set_unary_kernel(op, UNARY_KERNELS[op])
    return reference


def test_the_common_one_input_ops_are_served():
    assert {"tanh", "exp", "log", "sigmoid", "relu", "neg", "abs", "sqrt", "sin", "cos",
            "silu", "erf"} <= set(UNARY)
    assert set(FUNCTIONAL) <= set(UNARY)


@SETTINGS
@given(st.data(), recipes(dtypes=DTYPES + [mt.float16]), st.sampled_from(UNARY),
       st.booleans())
def test_one_input_pointwise_op(data, recipe, name, grad_enabled):
    callers = unary_callers(name)
    fast = callers[data.draw(st.sampled_from(sorted(callers)))]
    assert_agree(fast, without_c_path(name), [recipe], grad_enabled)


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", [mt.float32, mt.float64])
def test_one_input_ops_on_whole_storages_equal_the_general_path(name, dtype):
    """A whole contiguous storage is run by the ufunc's own inner loop (``unary_loops``):
    the same bits as the general path, over lengths that reach the SIMD loops' tails and
    values that overflow or leave the domain, with no NumPy warning."""
    values = np.concatenate([np.random.default_rng(5).standard_normal(1000) * 4,
                             [0.0, -0.0, 1e-30, 1.0, -1.0, 100.0, -100.0, 1e30, -1e30,
                              np.inf, -np.inf, np.nan]])
    for length in (1, 7, 16, 33, len(values)):
        x = mt.tensor(values[:length], dtype=dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fast = REGISTRY[name](x)
        expected = without_c_path(name)(x)
        np.testing.assert_array_equal(fast.numpy(), expected.numpy())


@pytest.mark.parametrize("name", ["tanh", "relu", "sigmoid", "silu", "erf"])
def test_one_input_ops_skip_the_python_kernel_for_float32_and_float64(name, monkeypatch):
    """The test above compares two paths; this one checks that the first is the C path:
    float32 and float64 calls never reach the op's Python kernel, other dtypes and calls
    with ``out=`` do (``out=None`` is the call without it)."""
    op = REGISTRY[name]

    def refuse(*args, **kwargs):
        raise AssertionError("the Python kernel ran")
    monkeypatch.setattr(op, "kernel", refuse)
    for dtype in FLOATS:
        leaf = mt.ones(2, 3, dtype=dtype, requires_grad=True)
        assert op(leaf).grad_fn is not None
        assert op(mt.nn.Parameter(mt.ones(2, dtype=dtype))).grad_fn is not None
        with mt.no_grad():
            assert op(leaf).grad_fn is None
    calls = [lambda: op(mt.ones(2, dtype=mt.int64)), lambda: op(mt.ones(2, dtype=mt.float16))]
    if op.out:   # (relu takes no out=)
        calls.append(lambda: op(mt.ones(2), out=mt.empty(2)))
    for call in calls:
        with pytest.raises(AssertionError, match="Python kernel"):
            call()
