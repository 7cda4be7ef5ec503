"""``_foreach_*`` against PyTorch: every name PyTorch has, each argument form (number,
list of numbers, list of tensors, 0-d tensor, ``alpha=``), the in-place forms, gradients
of the out-of-place forms, vmap, and the refusals with PyTorch's types and messages."""
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor._foreach import _BINARY, _UNARY

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the test "
                                                      "oracle)")

SHAPES = [(2, 3), (4,), ()]
# Inputs inside each unary op's domain (and away from its kinks and jumps).
DOMAIN = {"acos": (-0.9, 0.9), "asin": (-0.9, 0.9), "log": (0.2, 3.0), "log10": (0.2, 3.0),
          "log2": (0.2, 3.0), "log1p": (0.2, 3.0), "sqrt": (0.2, 3.0), "rsqrt": (0.2, 3.0),
          "lgamma": (0.2, 3.0), "reciprocal": (0.5, 3.0)}


def arrays(seed, low=-2.0, high=2.0, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    return [rng.uniform(low, high, shape) for shape in shapes]


def both(values, requires_grad=False, grad_count=None):
    """The same float64 tensors in microtensor and in PyTorch (the first ``grad_count``
    requiring grad, all when None)."""
    flags = [requires_grad and (grad_count is None or i < grad_count)
             for i in range(len(values))]
    return ([mt.tensor(v, requires_grad=f) for v, f in zip(values, flags)],
            [torch.tensor(v, requires_grad=f) for v, f in zip(values, flags)])


def assert_close(ours, theirs):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1]
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(np.asarray(a.detach().numpy()), b.detach().numpy(),
                                   rtol=1e-12, atol=1e-12, equal_nan=True)


def grads_of(outputs, inputs, lib):
    """The gradients of a weighted sum of ``outputs`` with respect to ``inputs``."""
    total = sum((o * (i + 1.5)).sum() for i, o in enumerate(outputs))
    return lib.autograd.grad(total, inputs, allow_unused=True)


def check(call, values, *, grad=True, grad_count=None):
    """``call(lib, tensors...)`` in both libraries: outputs, and gradients with respect to
    the inputs (the first ``grad_count``, all when None) equal."""
    ours_in, theirs_in = both(values, requires_grad=grad, grad_count=grad_count)
    ours = call(mt, ours_in)
    theirs = call(torch, theirs_in)
    assert isinstance(ours, tuple) and isinstance(theirs, tuple)
    assert_close(ours, theirs)
    if grad:
        ours_grads = grads_of(ours, [t for t in ours_in if t.requires_grad], mt)
        theirs_grads = grads_of(theirs, [t for t in theirs_in if t.requires_grad], torch)
        for a, b in zip(ours_grads, theirs_grads):
            assert (a is None) == (b is None)
            if a is not None:
                assert_close([a], [b])


def test_every_torch_foreach_function_is_here():
    theirs = {n for n in dir(torch) if n.startswith("_foreach_")}
    ours = {n for n in dir(mt) if n.startswith("_foreach_")}
    assert theirs == ours


@pytest.mark.parametrize("op", _UNARY)
def test_unary(op):
    values = arrays(1, *DOMAIN.get(op, (-2.0, 2.0)))
    check(lambda lib, ts: getattr(lib, f"_foreach_{op}")(ts), values)
    ours, theirs = both(values)
    assert getattr(mt, f"_foreach_{op}_")(ours) is ours
    getattr(torch, f"_foreach_{op}_")(theirs)
    assert_close(ours, theirs)


def binary_cases():
    cases = []
    for op, forms in _BINARY.items():
        for form in ("scalar", "scalars", "list", "tensor"):
            if form in forms:
                cases.append((op, form, False))
                if form in ("list", "tensor") and "alpha" in forms:
                    cases.append((op, form, True))
    return cases


def other_operand(lib, form, others):
    if form == "scalar":
        return 0.7
    if form == "scalars":
        return [0.7, -1.3, 2.0]
    if form == "list":
        return others
    return others[0]


@pytest.mark.parametrize("op, form, alpha", binary_cases(),
                         ids=[f"{o}-{f}{'-alpha' if a else ''}" for o, f, a in binary_cases()])
def test_binary(op, form, alpha):
    low = 0.3 if op in ("pow", "div") else -2.0     # pow of positive bases, no 0 divisors
    values = arrays(2, low, 2.0) + (arrays(3, low, 2.0) if form == "list" else
                                    arrays(3, low, 2.0, [()]))
    n = len(SHAPES)
    kwargs = {"alpha": 0.25} if alpha else {}

    def call(lib, ts, inplace=False):
        name = f"_foreach_{op}{'_' if inplace else ''}"
        return getattr(lib, name)(ts[:n], other_operand(lib, form, ts[n:]), **kwargs)
    # (PyTorch's backward fails for a 0-d tensor operand that requires grad.)
    check(call, values, grad_count=n if form == "tensor" else None)
    ours, theirs = both(values)
    assert call(mt, ours, inplace=True) is not None
    call(torch, theirs, inplace=True)
    assert_close(ours, theirs)


def test_pow_of_a_number():
    check(lambda lib, ts: lib._foreach_pow(2.0, ts), arrays(4))


def test_maximum_minimum_with_numbers_promote_and_split_ties_as_torch():
    for op in ("maximum", "minimum", "clamp_min", "clamp_max"):
        check(lambda lib, ts: getattr(lib, f"_foreach_{op}")(ts, 0.5),
              [np.array([0.5, 1.0, 0.2]), np.array([[0.5, -3.0]])])
        ints = [mt.tensor([1, 2])], [torch.tensor([1, 2])]
        assert_close(getattr(mt, f"_foreach_{op}")(ints[0], 1.5),
                     getattr(torch, f"_foreach_{op}")(ints[1], 1.5))


@pytest.mark.parametrize("op", ["addcmul", "addcdiv"])
@pytest.mark.parametrize("form", ["value", "scalars", "tensor"])
def test_addcmul_addcdiv(op, form):
    # PyTorch's addcdiv backward fails on a tensor with fewer elements than the list has
    # tensors (it indexes it by position), so every tensor here has at least three.
    shapes = [(2, 3), (4,), (3,)]
    values = arrays(5, shapes=shapes) + arrays(6, shapes=shapes) + arrays(7, 0.5, 2.0, shapes)
    n = len(shapes)
    weights = [0.5, -2.0, 3.0]

    def call(lib, ts, inplace=False):
        extra = {"value": 0.5} if form == "value" else (
            {"scalars": weights} if form == "scalars" else {"scalars": lib.tensor(weights)})
        fn = getattr(lib, f"_foreach_{op}{'_' if inplace else ''}")
        return fn(ts[:n], ts[n:2 * n], ts[2 * n:], **extra)
    check(call, values, grad=form != "tensor")    # PyTorch has no derivative for that form
    ours, theirs = both(values)
    assert call(mt, ours, inplace=True) is not None
    call(torch, theirs, inplace=True)
    assert_close(ours, theirs)


@pytest.mark.parametrize("form", ["scalar", "scalars", "list"])
def test_lerp(form):
    values = arrays(8) + arrays(9) + (arrays(10, 0.0, 1.0) if form == "list" else [])
    n = len(SHAPES)

    def call(lib, ts, inplace=False):
        weight = {"scalar": 0.3, "scalars": [0.3, 0.9, -0.5], "list": ts[2 * n:]}[form]
        fn = getattr(lib, f"_foreach_lerp{'_' if inplace else ''}")
        return fn(ts[:n], ts[n:2 * n], weight)
    check(call, values)
    ours, theirs = both(values)
    call(mt, ours, inplace=True)
    call(torch, theirs, inplace=True)
    assert_close(ours, theirs)


@pytest.mark.parametrize("ord", [2, 1, 3, 0.5, float("inf"), 0])
def test_norm_and_powsum(ord):
    values = [np.array([[3.0, -4.0], [0.5, 1.5]]), np.array([-0.25, 2.0, 0.75])]
    check(lambda lib, ts: lib._foreach_norm(ts, ord), values, grad=ord not in (0,))
    check(lambda lib, ts: lib._foreach_powsum(ts, ord), values, grad=False)  # (none in PyTorch)


def test_norm_powsum_dtype_max_mm_clone_copy_zero():
    values = [np.array([[3.0, -4.0], [0.5, 1.5]]), np.array([-0.25, 2.0, 0.75])]
    for fn in ("_foreach_norm", "_foreach_powsum"):
        ours, theirs = both(values)
        ours = [t.float() for t in ours]
        theirs = [t.float() for t in theirs]
        assert_close(getattr(mt, fn)(ours, 2, dtype=mt.float64),
                     getattr(torch, fn)(theirs, 2, dtype=torch.float64))
    check(lambda lib, ts: lib._foreach_max(ts), values)
    check(lambda lib, ts: lib._foreach_clone(ts), values)
    check(lambda lib, ts: lib._foreach_mm(ts[:2], ts[2:]),
          arrays(11, shapes=[(2, 3), (1, 2), (3, 4), (2, 2)]))
    ours, theirs = both(values)
    sources = both(arrays(12, shapes=[(2, 2), (3,)]))
    assert mt._foreach_copy_(ours, sources[0]) is ours
    torch._foreach_copy_(theirs, sources[1])
    assert_close(ours, theirs)
    assert mt._foreach_zero_(ours) is ours
    assert all(t.abs().sum().item() == 0 for t in ours)


def test_inplace_forms_record_autograd_on_non_leaves_as_torch():
    for lib in (mt, torch):
        w = lib.tensor([1.0, 2.0], requires_grad=True)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            lib._foreach_mul_([w], 3.0)
    ours, theirs = both([np.array([1.0, 2.0])], requires_grad=True)
    results = []
    for lib, (w,) in ((mt, ours), (torch, theirs)):
        b = w * 1.0
        lib._foreach_mul_([b], 3.0)
        lib._foreach_addcmul_([b], [w], [w], value=0.5)
        b.sum().backward()
        results.append(w.grad)
    assert_close([results[0]], [results[1]])


def test_under_vmap_without_the_loop_fallback():
    x, y = mt.randn(4, 3), mt.randn(4, 3)

    def f(a, b):
        added = mt._foreach_add([a, b], [b, a], alpha=2.0)
        return mt._foreach_norm(mt._foreach_lerp(added, [a, b], 0.3))[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")         # the fallback warns
        batched = mt.vmap(f)(x, y)
    looped = mt.stack([f(x[i], y[i]) for i in range(4)])
    np.testing.assert_allclose(batched.numpy(), looped.numpy(), rtol=1e-6)


ERRORS = [
    ("lengths", lambda lib, a, b: lib._foreach_add(a, b[:1])),
    ("scalar list length", lambda lib, a, b: lib._foreach_mul(a, [1.0])),
    ("empty", lambda lib, a, b: lib._foreach_add([], 1)),
    ("0-d tensor operand", lambda lib, a, b: lib._foreach_mul(a, lib.ones(2))),
    ("addcmul lengths", lambda lib, a, b: lib._foreach_addcmul(a, a, b[:1])),
    ("addcmul scalars", lambda lib, a, b: lib._foreach_addcmul(a, a, a, [1.0])),
    ("addcmul tensor scalars", lambda lib, a, b: lib._foreach_addcdiv(a, a, b,
                                                                      lib.ones(3))),
    ("lerp lengths", lambda lib, a, b: lib._foreach_lerp(a, b[:1], 0.5)),
    ("lerp weights", lambda lib, a, b: lib._foreach_lerp_(a, b, [0.5])),
    ("copy lengths", lambda lib, a, b: lib._foreach_copy_(a, b[:1])),
    ("mm lengths", lambda lib, a, b: lib._foreach_mm(a, b[:1])),
    ("shape", lambda lib, a, b: lib._foreach_add_(a, [b[0], b[0]])),
    ("max of empty", lambda lib, a, b: lib._foreach_max([lib.ones(0)])),
    ("norm of ints", lambda lib, a, b: lib._foreach_norm([lib.ones(2, dtype=lib.int64)])),
    ("in-place cast", lambda lib, a, b: lib._foreach_add_([lib.ones(2, dtype=lib.int64)],
                                                         1.5)),
    ("a tensor, not a list", lambda lib, a, b: lib._foreach_add(a[0], 1)),
    ("alpha with a number", lambda lib, a, b: lib._foreach_add(a, 1, alpha=2)),
    ("no tensor form for sub", lambda lib, a, b: lib._foreach_sub(a, lib.tensor([1.0]))),
]


@pytest.mark.parametrize("call", [c for _, c in ERRORS], ids=[n for n, _ in ERRORS])
def test_refusals_as_torch(call):
    """PyTorch's exception type and message (its TypeErrors' first line), nothing changed
    (the first tensor of a list refused on its second tensor's shape excepted, as in
    PyTorch, which updates the tensors one by one)."""
    raised = []
    for lib in (mt, torch):
        a = [lib.ones(2), lib.ones(3)]
        b = [lib.ones(2), lib.ones(3)]
        with pytest.raises((RuntimeError, TypeError)) as info:
            call(lib, a, b)
        raised.append((info.type, str(info.value).split(", but expected")[0], a[1].tolist()))
    assert raised[0] == raised[1]
