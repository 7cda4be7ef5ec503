"""Differential fuzzing against PyTorch: Hypothesis draws small random programs and runs
each on microtensor and on PyTorch side by side.

A program is one or two inputs (float32, float64, int32, int64 or bool; sizes 0 to 3;
contiguous, transposed, strided or expanded layouts) and a few steps, each drawn from an
op *family* (``FAMILIES``, enabled by name): ``views`` (view/reshape/transpose/permute/expand/slicing
with steps/as_strided/unfold/narrow/select/diagonal...), ``inplace`` (add_/mul_/copy_/
fill_/zero_/setitem, into views too), ``reductions`` (sum/mean/amax/prod... over dims,
keepdim), ``unary``, ``binary`` (broadcasting, type promotion, Python scalars, 0-d
tensors), ``indexing`` (basic, index tensors, bool masks; getitem and setitem),
``matmul``, ``joins`` (cat/stack/gather/index_select) and ``huge`` (sizes like 2**31,
2**32, 2**62 through expand/view/as_strided/slicing/unfold/factories).

After every step every value of the program (a write through a view reaches its base)
must agree: sizes, strides, storage offsets, dtypes, values, version counters and which
values share storage; and whenever PyTorch raises, microtensor must raise the same
exception type (and must not raise where PyTorch succeeds).  ``huge`` runs in a
subprocess, so that a crash fails its test instead of killing the run.  float64 programs
that require grad also compare the leaves' gradients, double backward, vmap, vmap(grad)
and is_grads_batched against torch.func.

``KNOWN_OPEN`` names the cases that fail today because of open bugs, with the reason: the
generators do not draw them and ``test_known_open`` skips naming each; empty an entry
when its bug is fixed.  Regression tests for failures the programs found follow the
property tests.

By default every test runs a fixed (derandomized) set of examples: about 35 s of one core
for the module, 45 s with tests/test_fuzz.py.  Longer, randomized hunts on demand, through the environment:

    MICROTENSOR_FUZZ_EXAMPLES=100000   examples per test (fresh random seeds)
    MICROTENSOR_FUZZ_FAMILIES=views,binary   only these families (default: all)
    MICROTENSOR_FUZZ_OPEN=binary:int_division_by_zero   draw these KNOWN_OPEN cases too
                                       (``all``: every one), to check a fix
"""
import math
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import microtensor as mt
from microtensor.testing.fuzzing import examples, fuzz_settings

torch = pytest.importorskip("torch", reason="PyTorch (the differential oracle) is not installed")
from torch.func import grad as torch_grad, vmap as torch_vmap  # noqa: E402

RTOL, ATOL = 1e-7, 1e-9
TOLERANCE = {"float32": (2e-5, 1e-6), "float64": (RTOL, ATOL)}
OK_ERRORS = (RuntimeError, IndexError, ValueError, TypeError, OverflowError)
DTYPES = ("float32", "float64", "int32", "int64", "bool")
SMALL = 4096          # values with more elements are compared by their metadata only
REFUSED_BYTES = 2 ** 48  # beyond any address space: PyTorch refuses without touching memory

ONLY = {name for name in os.environ.get("MICROTENSOR_FUZZ_FAMILIES", "").split(",") if name}
DRAW_OPEN = {name for name in os.environ.get("MICROTENSOR_FUZZ_OPEN", "").split(",") if name}

# Cases that fail today because of open bugs; the generators skip them.  Empty an entry
# when its bug is fixed (the fuzzer then draws the case in its family).
KNOWN_OPEN = {
    "indexing:overlapping_source":
        "index writes from overlapping sources now raise as PyTorch's, and x[None] = x is "
        "allowed as there; drawing the case still stops at an expanded x[::] = x (PyTorch "
        "skips a copy onto the very same elements before its overlap check) and at the "
        "strides of a bool-mask read whose result has dims of one element",
    "empty:kernel_checks":
        "PyTorch checks dtypes and index bounds inside kernels that do not run when the "
        "result is empty (softmax of an empty int tensor, bool @ bool or int64 @ float64 "
        "with an empty operand, an empty index write of another dtype, index 4 into a "
        "(3, 0) tensor); microtensor refuses anyway (not in issue 10; match PyTorch or "
        "keep refusing)",
    "views:multi_output_view_grad":
        "x.split(1)[0] used after a write into x: PyTorch's backward refuses ('Output 0 of "
        "Split is a view and its base ... has been modified inplace'), microtensor computes "
        "a gradient (not in issue 10)",
}


def enabled(case):
    return case not in KNOWN_OPEN or case in DRAW_OPEN or "all" in DRAW_OPEN


pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


# --------------------------------------------------------------------------- values

class Step:
    """One op of a program: ``apply(L, vals)`` runs it with ``L`` = ``mt`` or ``torch`` and
    returns the new value; ``loopable`` is False when a loop over samples would differ from
    vmap by design (``as_strided`` offsets are per sample inside vmap); ``case`` names it
    for ``KNOWN_OPEN``."""

    def __init__(self, text, apply, loopable=True, case=None):
        self.text, self.apply, self.loopable, self.case = text, apply, loopable, case

    def __repr__(self):
        return self.text


def dtype_name(t):
    return str(t.dtype).rsplit(".", 1)[-1]


def is_int(name):
    return name in ("int32", "int64")


def lit(L, values):
    """``values`` (an ndarray) as a tensor of the same dtype."""
    return L.tensor(values, dtype=getattr(L, values.dtype.name))


def numel(shape):
    return math.prod(shape)


class Draft:
    """A program being drawn: the torch values so far (each step is run on torch while
    drawing, so that the next step knows the shapes, dtypes and aliasing it can use).
    ``grad``: the inputs require grad (float64 programs that backward)."""

    def __init__(self, values, grad):
        self.values, self.grad = values, grad

    def shape(self, i):
        return tuple(self.values[i].shape)

    def dtype(self, i):
        return dtype_name(self.values[i])

    def writable(self, i):
        """Not a leaf that requires grad nor a view of one."""
        t = self.values[i]
        if not self.grad:
            return True
        return not t.is_leaf and not (t._base is not None and t._base.is_leaf)

    def distinct(self, i):
        """No two elements share memory."""
        return torch._debug_has_internal_overlap(self.values[i]) == 0

    def shares(self, i, j, empty=False):
        """Whether values ``i`` and ``j`` share storage (``empty``: or both have none at
        the same address: PyTorch's overlap checks compare addresses)."""
        a, b = self.values[i], self.values[j]
        if empty:
            return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        return _share_storage(a, b)


def draw_dim(draw, shape):
    return draw(st.integers(-len(shape), len(shape) - 1))


def any_dim(draw, d, shape):
    """A dim of ``shape``; out of range now and then, when not differentiating."""
    n = len(shape)
    if not d.grad and draw(st.integers(0, 19)) == 0 or n == 0:
        return draw(st.sampled_from([n, -n - 1]))
    return draw_dim(draw, shape)


def broadcastable_shape(draw, shape):
    """A shape that broadcasts with ``shape`` to ``shape``: trailing dims kept or set to 1."""
    keep = draw(st.integers(0, len(shape)))
    tail = shape[len(shape) - keep:]
    return tuple(1 if draw(st.booleans()) else s for s in tail)


def constant(draw, shape, dtype="float64", nonzero=False):
    """Small exact values: floats are multiples of 1/8 in [-2, 2] (exact ties and zeros
    happen, nearly-degenerate values that only test rounding do not), ints in [-4, 4]."""
    count = numel(shape)
    if dtype == "bool":
        values = draw(st.lists(st.just(True) if nonzero else st.booleans(),
                               min_size=count, max_size=count))
        return np.array(values, dtype=bool).reshape(shape)
    pool = [v for v in range(-16, 17) if v or not nonzero]
    picks = draw(st.lists(st.sampled_from(pool), min_size=count, max_size=count))
    values = np.array(picks, dtype=np.float64).reshape(shape)
    if is_int(dtype):
        return np.asarray(np.sign(values) * np.ceil(np.abs(values) / 4), dtype=dtype)
    return np.asarray(values / 8, dtype=dtype)  # 0-d arithmetic gives NumPy scalars


def operand_dtype(draw, d, like):
    """``like`` mostly, any dtype now and then (type promotion), float64 in grad programs."""
    if d.grad:
        return "float64"
    return draw(st.sampled_from([like, like, like] + list(DTYPES)))


def scalar(draw, dtype, out_of_range_case):
    """A Python number for a tensor of ``dtype``: small ints, eighths, bools, nan/inf for
    floats; numbers an int tensor cannot hold and ints beyond 64 bits when
    ``out_of_range_case`` is enabled."""
    extremes = [float("nan"), float("inf"), -float("inf"), 1e20] \
        if not is_int(dtype) and dtype != "bool" else []
    if enabled(out_of_range_case):
        extremes = [2 ** 40, -2 ** 40, 2 ** 63 - 1, 2 ** 80, float("nan"), float("inf"), 1e20]
    kind = draw(st.sampled_from(["int", "float", "bool"] + ["extreme"] * bool(extremes)))
    if kind == "int":
        return draw(st.integers(-4, 4))
    if kind == "bool":
        return draw(st.booleans())
    if kind == "float":
        return draw(st.integers(-16, 16)) / 8
    return draw(st.sampled_from(extremes))


# --------------------------------------------------------------------------- families
# Each family draws one step on value ``i`` of the draft ``d`` (or None: nothing fits).

UNARY = {
    "neg": lambda L, x: -x,
    "exp": lambda L, x: L.exp(x * 0.5),
    "sin": lambda L, x: x.sin(),
    "tanh": lambda L, x: L.tanh(x),
    "sigmoid": lambda L, x: x.sigmoid(),
    "square": lambda L, x: x * x,
    "pow3": lambda L, x: x.pow(3),
    "sqrt1": lambda L, x: (x * x + 1).sqrt(),
    "log1p": lambda L, x: L.log1p(x * x),
    "abs": lambda L, x: x.abs(),
    "relu": lambda L, x: L.relu(x),
    "clamp": lambda L, x: x.clamp(-0.5, 0.7),
    "softmax": lambda L, x: x.softmax(-1) if x.dim() else x,
    "cumsum": lambda L, x: x.cumsum(0) if x.dim() else x,
    "clone": lambda L, x: x.clone(),
    "contiguous": lambda L, x: x.contiguous(),
}
# not differentiable, or only meant for other dtypes
UNARY_ANY_DTYPE = {
    "logical_not": lambda L, x: L.logical_not(x),
    "bitwise_not": lambda L, x: ~x,
    "sign": lambda L, x: x.sign(),
    "floor": lambda L, x: x.floor(),
    "clamp_int": lambda L, x: x.clamp(-1, 2),
    "float": lambda L, x: x.float(),
    "long": lambda L, x: x.long(),
    "bool": lambda L, x: x.bool(),
    "to_int32": lambda L, x: x.to(L.int32),
}


def family_unary(draw, d, i):
    names = sorted(UNARY) + ([] if d.grad else sorted(UNARY_ANY_DTYPE))
    name = draw(st.sampled_from(names))
    fn = UNARY.get(name) or UNARY_ANY_DTYPE[name]
    case = None
    if d.dtype(i) == "bool" and name in ("abs", "relu", "floor", "neg", "sign"):
        case = "unary:bool_support"
    if d.dtype(i).startswith("float") and name == "bitwise_not":
        case = "unary:unsupported_dtype_errors"
    return Step(f"v{i}.{name}", lambda L, v: fn(L, v[i]), case=case)


BINARY = {
    "add": lambda L, x, y: x + y,
    "sub": lambda L, x, y: L.sub(x, y, alpha=2),
    "mul": lambda L, x, y: x * y,
    "div": lambda L, x, y: x / (y * y + 1),
    "maximum": lambda L, x, y: L.maximum(x, y),
    "where": lambda L, x, y: L.where(x > 0.1, x, y),
    "lerp": lambda L, x, y: L.lerp(x, y, 0.3),
}
INT_DIVISIONS = {
    "floor_divide": lambda L, x, y: x // y,
    "remainder": lambda L, x, y: x % y,
    "div_floor": lambda L, x, y: L.div(x, y, rounding_mode="floor"),
    "div_trunc": lambda L, x, y: L.div(x, y, rounding_mode="trunc"),
}
BINARY_ANY_DTYPE = dict(INT_DIVISIONS, **{
    "true_divide": lambda L, x, y: x / y,
    "eq": lambda L, x, y: x == y,
    "lt": lambda L, x, y: x < y,
    "minimum": lambda L, x, y: L.minimum(x, y),
    "pow": lambda L, x, y: x ** y,
    "logical_and": lambda L, x, y: L.logical_and(x, y),
    "bitwise_and": lambda L, x, y: x & y,
    "bitwise_xor": lambda L, x, y: x ^ y,
    "rsub": lambda L, x, y: y - x,
})


def family_binary(draw, d, i):
    """``op(v_i, other)`` or ``op(other, v_i)``: other is a value, a constant tensor
    (broadcastable, or not now and then), a 0-d tensor or a Python number."""
    shape, dtype = d.shape(i), d.dtype(i)
    names = sorted(BINARY) + ([] if d.grad else sorted(BINARY_ANY_DTYPE))
    name = draw(st.sampled_from(names))
    fn = BINARY.get(name) or BINARY_ANY_DTYPE[name]
    # the divisor (the right operand) has no zeros unless the open case is enabled
    nonzero = name in INT_DIVISIONS and not enabled("binary:int_division_by_zero")
    kinds = ["constant", "value"] if d.grad else ["constant", "value", "zero_dim", "number"]
    kind = draw(st.sampled_from(kinds))
    mine = (f"v{i}", lambda L, v: v[i], d.values[i])
    if kind == "value" and not nonzero:
        partners = [j for j in range(len(d.values)) if _broadcasts(d.shape(j), shape)]
        if not d.grad:
            partners = range(len(d.values))  # mismatched shapes must raise alike
        j = draw(st.sampled_from(partners))
        other = (f"v{j}", lambda L, v: v[j], d.values[j])
    elif kind == "number":
        number = scalar(draw, dtype, "binary:scalar_out_of_range")
        if nonzero and not number:
            number = 3
        other = (repr(number), lambda L, v: number, number)
    else:
        other_shape = () if kind == "zero_dim" else broadcastable_shape(draw, shape)
        if not d.grad and draw(st.integers(0, 9)) == 0:
            other_shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
        values = constant(draw, other_shape, operand_dtype(draw, d, dtype), nonzero=nonzero)
        other = (_text(values), lambda L, v: lit(L, values), torch.from_numpy(values))
    x, y = (other, mine) if not nonzero and draw(st.booleans()) else (mine, other)
    return Step(f"{name}({x[0]}, {y[0]})", lambda L, v: fn(L, x[1](L, v), y[1](L, v)),
                case=binary_case(name, x[2], y[2]))


TENSOR_ONLY = {"maximum", "minimum", "logical_and", "lerp"}  # Python numbers refused


def binary_case(name, x, y):
    """The open case ``name(x, y)`` (torch tensors or Python numbers) falls in, or None."""
    tensors = [t for t in (x, y) if isinstance(t, torch.Tensor)]
    numbers = [t for t in (x, y) if not isinstance(t, torch.Tensor)]
    kinds = {"bool" if t.dtype == torch.bool else "float" if t.is_floating_point() else "int"
             for t in tensors} | {type(n).__name__ for n in numbers}
    if numbers and (name in TENSOR_ONLY or name == "where" and not isinstance(x, torch.Tensor)):
        return "binary:number_for_tensor"
    if name in ("sub", "rsub") and "bool" in kinds:
        return "binary:bool_subtraction"
    if name == "lerp" and (len({t.dtype for t in tensors}) > 1 or kinds & {"int", "bool"}):
        return "binary:lerp_dtypes"
    # an int beyond PyTorch's scalars (refused first) promotes as any int
    promoted = torch.result_type(*[t if isinstance(t, torch.Tensor) or type(t) is not int
                                   else 0 for t in (x, y)])
    if name in ("pow", *INT_DIVISIONS) and promoted == torch.bool:
        return "binary:unsupported_dtype_errors"
    if name.startswith("bitwise") and promoted.is_floating_point:
        return "binary:unsupported_dtype_errors"
    if name == "pow" and not promoted.is_floating_point and isinstance(y, torch.Tensor) and \
            not y.is_floating_point() and bool((y < 0).any()):
        return "binary:int_pow_negative_tensor"
    return None


def family_reductions(draw, d, i):
    shape = d.shape(i)
    if d.grad:
        return _grad_reduction(draw, i, shape)
    n = len(shape)
    name = draw(st.sampled_from(["sum", "mean", "amax", "amin", "prod", "all", "any",
                                 "sum_dtype", "max_dim"]))
    form = draw(st.sampled_from(["all", "int", "tuple"]))
    keepdim = draw(st.booleans())
    if form == "all" or name == "max_dim" and n == 0:
        if name in ("max_dim", "sum_dtype"):
            return Step(f"v{i}.sum(dtype=float64)",
                        lambda L, v: v[i].sum(dtype=L.float64))
        return Step(f"v{i}.{name}()", lambda L, v: getattr(v[i], name)())
    if form == "int" or name in ("prod", "max_dim"):
        dims = draw(st.integers(-n - 1, n)) if n else draw(st.sampled_from([0, -1, 1]))
    else:
        dims = tuple(draw(st.lists(st.integers(-n - 1, n) if n else st.sampled_from([0, -1]),
                                   max_size=max(n, 1) + 1)))
        if dims == () and name in ("all", "any") and \
                not enabled("reductions:empty_dim_tuple"):
            return None
    text = f"v{i}.{name}({dims}, keepdim={keepdim})"
    case = None
    if n == 0 and name in ("all", "any") and dims not in (0, -1, (0,), (-1,), ()):
        case = "reductions:all_any_dim_checks"
    if name == "max_dim":
        return Step(text, lambda L, v: v[i].max(dims, keepdim=keepdim).values, case=case)
    if name == "sum_dtype":
        return Step(text, lambda L, v: v[i].sum(dims, keepdim=keepdim, dtype=L.float64),
                    case=case)
    return Step(text, lambda L, v: getattr(v[i], name)(dims, keepdim=keepdim), case=case)


def _grad_reduction(draw, i, shape):
    name = draw(st.sampled_from(["sum", "mean", "amax", "var", "std", "logsumexp", "norm",
                                 "prod"]))  # max(dim): test_max_dim_saves_only_indices
    keepdim = draw(st.booleans())
    n = len(shape)
    if n == 0 or name == "logsumexp" or draw(st.booleans()):
        dims = draw_dim(draw, shape) if n else 0
    else:
        dims = tuple(sorted(set(draw(st.lists(st.integers(0, n - 1), min_size=1,
                                              max_size=n)))))
    text = f"v{i}.{name}({dims}, keepdim={keepdim})"
    if name == "norm":
        return Step(text, lambda L, v: (v[i] + 3).norm(dim=dims, keepdim=keepdim))
    if name in ("var", "std") and _reduced_count(shape, dims) < 2:
        return None  # nan gradients, which PyTorch special-cases for 0-d inputs
    if name == "prod":
        if not isinstance(dims, int):
            return None
        return Step(text, lambda L, v: (v[i] + 3).prod(dims, keepdim=keepdim))
    return Step(text, lambda L, v: getattr(v[i], name)(dims, keepdim=keepdim))


def _reduced_count(shape, dims):
    dims = (dims,) if isinstance(dims, int) else dims
    return int(np.prod([shape[d] for d in dims])) if shape else 1


def _broadcasts(small, big):
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(reversed(small), reversed(big)))


def family_views(draw, d, i):
    shape = d.shape(i)
    n = len(shape)
    name = draw(st.sampled_from(["transpose", "permute", "slice", "select", "narrow",
                                 "diagonal", "unsqueeze", "expand", "reshape", "as_strided",
                                 "flatten", "squeeze", "movedim", "mT", "view", "unfold",
                                 "unflatten", "split", "t"]))
    if name == "unsqueeze":
        dim = draw(st.integers(-n - 1, n))
        return Step(f"v{i}.unsqueeze({dim})", lambda L, v: v[i].unsqueeze(dim))
    if name == "expand":
        sizes = tuple(draw(st.integers(1, 3)) if s == 1 else
                      draw(st.sampled_from([s, s, -1])) for s in shape)
        lead = tuple(draw(st.lists(st.integers(0 if not d.grad else 1, 3), max_size=1)))
        return Step(f"v{i}.expand({lead + sizes})", lambda L, v: v[i].expand(lead + sizes))
    if name in ("reshape", "view"):
        total = numel(shape)
        divisors = [k for k in range(1, total + 1) if total % k == 0] or [0]
        first = draw(st.sampled_from(divisors))
        new = draw(st.sampled_from([(first, -1), (-1,), (first, total // max(first, 1), 1)]))
        if not d.grad and draw(st.integers(0, 9)) == 0:
            new = (total + 1,)
        return Step(f"v{i}.{name}({new})", lambda L, v: getattr(v[i], name)(new))
    if name == "flatten":
        return Step(f"v{i}.flatten()", lambda L, v: v[i].flatten())
    if name == "as_strided":
        return _as_strided(draw, d, i, shape)
    if name == "t":
        return Step(f"v{i}.t()", lambda L, v: v[i].t()) if n <= 2 or not d.grad else None
    if n == 0:
        return None
    if name == "squeeze":
        dim = any_dim(draw, d, shape)
        return Step(f"v{i}.squeeze({dim})", lambda L, v: v[i].squeeze(dim))
    if name in ("transpose", "movedim"):
        a, b = any_dim(draw, d, shape), any_dim(draw, d, shape)
        return Step(f"v{i}.{name}({a}, {b})", lambda L, v: getattr(v[i], name)(a, b))
    if name == "permute":
        perm = tuple(draw(st.permutations(range(n))))
        return Step(f"v{i}.permute{perm}", lambda L, v: v[i].permute(perm))
    if name == "mT":
        if n < 2:
            return None
        return Step(f"v{i}.mT", lambda L, v: v[i].mT)
    dim = any_dim(draw, d, shape)
    size = shape[dim] if -n <= dim < n else 1
    if name == "slice":
        start = draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
        stop = draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
        step = draw(st.integers(1, 3))
        index = (slice(None),) * (dim % n) + (slice(start, stop, step),)
        return Step(f"v{i}[{index}]", lambda L, v: v[i][index])
    if name == "unfold":
        width, step = draw(st.integers(0, size + 1)), draw(st.integers(1, 3))
        if d.grad and width == 0:
            return None
        return Step(f"v{i}.unfold({dim}, {width}, {step})",
                    lambda L, v: v[i].unfold(dim, width, step))
    if name == "unflatten":
        sizes = draw(st.sampled_from([(size, 1), (1, -1), (-1,), (size + 1, -1)]))
        if d.grad and sizes[0] == size + 1:
            return None
        return Step(f"v{i}.unflatten({dim}, {sizes})", lambda L, v: v[i].unflatten(dim, sizes))
    if name == "split":
        chunk = draw(st.integers(1, 3))
        k = draw(st.integers(0, max(0, -(-size // chunk) - 1)))
        return Step(f"v{i}.split({chunk}, {dim})[{k}]",
                    lambda L, v: v[i].split(chunk, dim)[k],
                    case="views:multi_output_view_grad" if d.grad else None)
    if size == 0:
        return None
    if name == "select":
        index = draw(st.integers(-size, size - 1))
        return Step(f"v{i}.select({dim}, {index})", lambda L, v: v[i].select(dim, index))
    if name == "narrow":
        start = draw(st.integers(0, size - 1))
        length = draw(st.integers(0, size - start))
        return Step(f"v{i}.narrow({dim}, {start}, {length})",
                    lambda L, v: v[i].narrow(dim, start, length))
    if n < 2:
        return None
    d2 = draw_dim(draw, shape)
    offset = draw(st.integers(-2, 2))
    return Step(f"v{i}.diagonal({offset}, {dim}, {d2})",
                lambda L, v: v[i].diagonal(offset, dim, d2))


def _as_strided(draw, d, i, shape):
    """In grad programs, over a fresh contiguous copy (so that a loop over samples and
    vmap agree); otherwise straight over the storage, out of its bounds now and then."""
    total = numel(shape) if d.grad else d.values[i].untyped_storage().nbytes() // \
        d.values[i].element_size()
    if total == 0:
        return None
    size = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    stride = tuple(draw(st.integers(0, 2)) for _ in size)
    extent = sum((s - 1) * t for s, t in zip(size, stride))
    if extent >= total and d.grad:
        return None
    offset = draw(st.integers(0, max(0, total - 1 - extent) + (0 if d.grad else 1)))
    if d.grad:
        return Step(f"v{i}.contiguous().as_strided({size}, {stride}, +{offset})",
                    lambda L, v: _as_strided_from_start(v[i].contiguous(), size, stride,
                                                        offset), loopable=False)
    return Step(f"v{i}.as_strided({size}, {stride}, {offset})",
                lambda L, v: v[i].as_strided(size, stride, offset))


def _share_storage(a, b):
    sa, sb = a.untyped_storage(), b.untyped_storage()
    return sa.nbytes() > 0 and sa.data_ptr() == sb.data_ptr()


def _as_strided_from_start(t, size, stride, offset):
    return t.as_strided(size, stride, t.storage_offset() + offset)


INPLACE_NAMES = ("add_", "mul_", "copy_", "fill_", "setitem", "add_val", "sigmoid_", "zero_",
                 "sub_", "clamp_")


def family_inplace(draw, d, i):
    """A write into value ``i`` or a view of it (with grad: only into values that are not
    leaves or their views, and have no self-overlap)."""
    if d.grad:
        targets = [j for j in range(len(d.values)) if d.writable(j) and d.distinct(j)]
        if not targets:  # make something to write into
            return Step(f"v{i}.mul(1.5)", lambda L, v: v[i].mul(1.5))
        i = draw(st.sampled_from(targets))
    shape, dtype = d.shape(i), d.dtype(i)
    n = len(shape)
    view_kind = draw(st.sampled_from(["whole", "select", "slice", "diagonal", "transpose"]))
    if view_kind == "select" and n and shape[0]:
        k = draw(st.integers(0, shape[0] - 1))
        view, vtext = (lambda t: t.select(0, k)), f".select(0, {k})"
        vshape = shape[1:]
    elif view_kind == "slice" and n:
        step = draw(st.integers(1, 2))
        view, vtext = (lambda t: t[..., ::step]), f"[..., ::{step}]"
        vshape = shape[:-1] + ((shape[-1] + step - 1) // step,)
    elif view_kind == "diagonal" and n >= 2:
        view, vtext = (lambda t: t.diagonal()), ".diagonal()"
        vshape = shape[:-2] + (min(shape[-2], shape[-1]),)
    elif view_kind == "transpose" and n >= 2:
        view, vtext = (lambda t: t.transpose(0, 1)), ".transpose(0, 1)"
        vshape = (shape[1], shape[0]) + shape[2:]
    else:
        view, vtext, vshape = (lambda t: t), "", shape
    name = draw(st.sampled_from(INPLACE_NAMES))
    text = f"v{i}{vtext}.{name}"
    if name == "add_val":
        sources = [j for j in range(len(d.values)) if _broadcasts(d.shape(j), vshape)]
        if not sources:
            return None
        j = draw(st.sampled_from(sources))
        if d.shares(i, j):  # partial overlap: test_add_partial_overlap
            return Step(f"{text}(v{j}.clone())", lambda L, v: view(v[i]).add_(v[j].clone()))
        return Step(f"{text}(v{j})", lambda L, v: view(v[i]).add_(v[j]))
    if name == "sigmoid_":
        return Step(text, lambda L, v: view(v[i]).sigmoid_())
    if name == "zero_":
        return Step(text, lambda L, v: view(v[i]).zero_())
    if name == "clamp_":
        return Step(f"{text}(-1, 1)", lambda L, v: view(v[i]).clamp_(-1, 1))
    if name == "fill_":
        value = draw(st.floats(-2, 2, allow_nan=False, width=32)) if d.grad else \
            scalar(draw, dtype, "inplace:scalar_out_of_range")
        return Step(f"{text}({value!r})", lambda L, v: view(v[i]).fill_(value))
    source = constant(draw, broadcastable_shape(draw, vshape), operand_dtype(draw, d, dtype))
    if name == "setitem":
        if not d.distinct(i) and not enabled("inplace:write_into_expanded"):
            return None
        if not d.grad and draw(st.booleans()):
            source = scalar(draw, dtype, "inplace:scalar_out_of_range")

        def assign(L, v):
            target = view(v[i])
            target[...] = source if not isinstance(source, np.ndarray) else lit(L, source)
            return target
        return Step(f"{text}({_text(source)})", assign)
    bool_sub = name == "sub_" and "bool" in (dtype, source.dtype.name)
    return Step(f"{text}({_text(source)})",
                lambda L, v: getattr(view(v[i]), name)(lit(L, source)),
                case="binary:bool_subtraction" if bool_sub else None)


def _text(source):
    if isinstance(source, np.ndarray):
        return f"c{source.shape}:{source.dtype}"
    return repr(source)


def family_indexing(draw, d, i):
    """``v_i[index]`` or ``v_i[index] = source`` with ints, slices with steps, None,
    Ellipsis, int index tensors and bool masks."""
    shape, dtype = d.shape(i), d.dtype(i)
    write = draw(st.booleans()) and d.writable(i) and (not d.grad or d.distinct(i))
    if write and not d.distinct(i) and not enabled("inplace:write_into_expanded"):
        return None
    source_kind = draw(st.sampled_from(["number", "constant", "value"])) if write else None
    if d.grad and source_kind in ("number", "value"):
        source_kind = "constant"
    unique = source_kind in ("constant", "value")  # duplicate writes: undefined order
    parts = draw_index(draw, shape, unique, d.grad)
    index = lambda L: tuple(lit(L, p) if isinstance(p, np.ndarray) else p for p in parts)  # noqa
    text = f"v{i}[{', '.join(_index_text(p) for p in parts)}]"
    if not write:
        return Step(text, lambda L, v: v[i][index(L)])
    try:
        picked = tuple(d.values[i][index(torch)].shape)
    except OK_ERRORS:
        picked = ()
    if source_kind == "number":
        source = scalar(draw, dtype, "inplace:scalar_out_of_range")
        return Step(f"{text} = {source!r}", lambda L, v: _setitem(v[i], index(L), source))
    if source_kind == "value":
        sources = [j for j in range(len(d.values)) if _broadcasts(d.shape(j), picked) and
                   (enabled("indexing:overlapping_source") or not d.shares(i, j, empty=True))]
        if sources:
            j = draw(st.sampled_from(sources))
            return Step(f"{text} = v{j}", lambda L, v: _setitem(v[i], index(L), v[j]))
    source = constant(draw, broadcastable_shape(draw, picked), operand_dtype(draw, d, dtype))
    return Step(f"{text} = {_text(source)}",
                lambda L, v: _setitem(v[i], index(L), lit(L, source)))


def _setitem(target, index, source):
    target[index] = source
    return target


def _index_text(part):
    if isinstance(part, np.ndarray):
        return f"tensor({part.tolist()})"
    if isinstance(part, slice):
        return ":".join("" if p is None else str(p) for p in (part.start, part.stop, part.step))
    return "..." if part is Ellipsis else repr(part)


def draw_index(draw, shape, unique, grad):
    """Index parts consuming dims of ``shape`` left to right; out of range now and then
    (not in grad programs).  With ``unique`` no element is picked twice."""
    parts, dim = [], 0
    ellipsis = False
    bad = not grad and draw(st.integers(0, 9)) == 0  # one bad index part now and then
    for _ in range(draw(st.integers(1, max(1, len(shape)))) + bad):
        size = shape[dim] if dim < len(shape) else 0
        kind = draw(st.sampled_from(["int", "slice", "slice", "none", "ellipsis", "list",
                                     "mask"]))
        if dim >= len(shape) and not bad:  # every dim indexed: only new axes fit
            kind = draw(st.sampled_from(["none", "ellipsis"]))
        if kind == "none":
            parts.append(None)
            continue
        if kind == "ellipsis":
            if ellipsis:
                continue
            ellipsis = True
            parts.append(Ellipsis)
            dim = max(dim, len(shape) - (len(parts) + 1))  # a guess; errors are compared
            continue
        if kind == "int":
            low, high = (-size - 1, size) if bad else (-size, size - 1)
            if high < low:
                continue
            parts.append(draw(st.integers(low, high)))
        elif kind == "slice":
            start = draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
            stop = draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
            parts.append(slice(start, stop, draw(st.one_of(st.none(), st.integers(1, 3)))))
        elif kind == "list":
            if unique:
                picks = draw(st.permutations(range(size)))[:draw(st.integers(0, size))]
                picks = [p - size if draw(st.booleans()) else p for p in picks]
            else:
                low, high = (-size - 2, size + 1) if bad else (-size, size - 1)
                if high < low:
                    continue
                picks = draw(st.lists(st.integers(low, high), max_size=3))
            parts.append(np.array(picks, dtype=np.int64))
        else:
            mask_shape = (size + 1,) if bad else shape[dim:dim + draw(st.integers(1, 2))]
            parts.append(constant(draw, mask_shape, "bool"))
            dim += len(mask_shape)
            continue
        dim += 1
    return parts


def family_matmul(draw, d, i):
    shape, dtype = d.shape(i), d.dtype(i)
    n = len(shape)
    if n == 0 and d.grad:
        return None
    other_dtype = operand_dtype(draw, d, dtype)
    if n == 0:
        other = constant(draw, (2,), other_dtype)
    elif n == 1:
        other = constant(draw, (shape[0], draw(st.integers(1, 3))), other_dtype)
    else:
        batch = draw(st.sampled_from([(), shape[:-2][-1:]])) if n > 2 else ()
        other = constant(draw, batch + (shape[-1], draw(st.integers(1, 3))), other_dtype)
    if not d.grad and draw(st.integers(0, 9)) == 0:  # mismatched inner sizes
        other = constant(draw, (shape[-1] + 1 if n else 1, 2), other_dtype)
    case = None
    if ("bool" in (dtype, other_dtype) or dtype != other_dtype) and \
            (0 in shape or 0 in other.shape):
        case = "empty:kernel_checks"
    if draw(st.booleans()) and n >= 2:
        left = constant(draw, (draw(st.integers(1, 3)), shape[-2]), other_dtype)
        return Step(f"c{left.shape}:{left.dtype} @ v{i}", lambda L, v: lit(L, left) @ v[i],
                    case=case)
    return Step(f"v{i} @ c{other.shape}:{other.dtype}",
                lambda L, v: v[i].matmul(lit(L, other)), case=case)


def family_joins(draw, d, i):
    """cat/stack with another value, gather/index_select."""
    shape = d.shape(i)
    n = len(shape)
    kind = draw(st.sampled_from(["cat", "gather"]))
    if kind == "cat":
        same = [j for j in range(len(d.values)) if d.shape(j) == shape or
                not d.grad and len(d.shape(j)) == n]
        j = draw(st.sampled_from(same))
        if draw(st.booleans()):
            dim = draw(st.integers(-n - 1, n))
            return Step(f"stack([v{i}, v{j}], {dim})",
                        lambda L, v: L.stack([v[i], v[j] * 2], dim))
        if n == 0:
            return None
        dim = draw_dim(draw, shape)
        return Step(f"cat([v{i}, v{j}], {dim})", lambda L, v: L.cat([v[i], v[j] * 2], dim))
    if n == 0 or 0 in shape:
        return None
    dim = draw_dim(draw, shape)
    size = shape[dim]
    if draw(st.booleans()):
        index = np.array(draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=4)))
        return Step(f"v{i}.index_select({dim}, {index.tolist()})",
                    lambda L, v: v[i].index_select(dim, L.tensor(index)))
    index_shape = tuple(draw(st.integers(1, s)) if s else 0 for s in shape)
    index_shape = index_shape[:dim % n] + (draw(st.integers(1, 4)),) + index_shape[dim % n + 1:]
    index = np.array(draw(st.lists(st.integers(0, size - 1),
                                   min_size=int(np.prod(index_shape)),
                                   max_size=int(np.prod(index_shape))))).reshape(index_shape)
    return Step(f"v{i}.gather({dim}, {index.tolist()})",
                lambda L, v: v[i].gather(dim, L.tensor(index)))


HUGE = (2 ** 31, 2 ** 32, 2 ** 33, 2 ** 48, 2 ** 62, 2 ** 63 - 1)
BEYOND_INT64 = (2 ** 63, 2 ** 64)


def huge_number(draw):
    pool = HUGE + (BEYOND_INT64 if enabled("huge:beyond_int64") else ())
    return draw(st.sampled_from(pool))


def _refusable(count, itemsize=4):
    """A result of ``count`` elements is cheap to ask for: small, or refused at once."""
    return count <= SMALL or count * itemsize >= REFUSED_BYTES


def family_huge(draw, d, i):
    """Huge sizes, strides, offsets and steps through views and factories; materializing
    steps only where PyTorch computes little or refuses at once (``_refusable``)."""
    shape = d.shape(i)
    n = len(shape)
    kind = draw(st.sampled_from(["expand", "as_strided", "slice", "unfold", "narrow",
                                 "select", "view", "factory", "outer", "materialize",
                                 "repr"]))
    big = lambda: huge_number(draw) if draw(st.booleans()) else draw(st.integers(0, 3))  # noqa
    if kind == "expand":
        sizes = tuple(big() if s == 1 else s for s in shape)
        lead = tuple(big() for _ in range(draw(st.integers(0, 2))))
        return Step(f"v{i}.expand({lead + sizes})", lambda L, v: v[i].expand(lead + sizes))
    if kind == "as_strided":
        count = draw(st.integers(1, 3))
        size = tuple(big() for _ in range(count))
        stride = tuple(draw(st.sampled_from([0, 0, 1, 2, 2 ** 31, 2 ** 62])) for _ in size)
        offset = draw(st.sampled_from([0, 1, 2 ** 32, 2 ** 62]))
        return Step(f"v{i}.as_strided({size}, {stride}, {offset})",
                    lambda L, v: v[i].as_strided(size, stride, offset))
    if kind == "factory":
        sizes = tuple(big() for _ in range(draw(st.integers(1, 3))))
        if not _refusable(numel(sizes)):
            return None
        strides = tuple(draw(st.sampled_from([0, 1, 2 ** 31])) for _ in sizes)
        count = numel(sizes)
        extent = 1 + sum((s - 1) * t for s, t in zip(sizes, strides)) if count else 0
        if not _refusable(extent):
            return None
        makers = {"empty": lambda L: _filled(L.empty(sizes), count),
                  "empty_strided": lambda L: _filled(L.empty_strided(sizes, strides), extent),
                  "zeros": lambda L: L.zeros(sizes), "ones": lambda L: L.ones(sizes),
                  "full": lambda L: L.full(sizes, 2.0), "arange": lambda L: L.arange(0, count),
                  "linspace": lambda L: L.linspace(0, 1, count)}
        name = draw(st.sampled_from(sorted(makers)))
        text = {"empty_strided": f"empty_strided({sizes}, {strides})",
                "arange": f"arange(0, {count})", "linspace": f"linspace(0, 1, {count})"}
        return Step(text.get(name, f"{name}({sizes})"), lambda L, v: makers[name](L))
    if kind == "outer":
        m, k = big(), big()
        if not _refusable(m * k) or not _refusable(m) or not _refusable(k):
            return None
        return Step(f"ones(1,1).expand({m},1) @ ones(1,1).expand(1,{k})",
                    lambda L, v: L.ones(1, 1).expand(m, 1) @ L.ones(1, 1).expand(1, k))
    if kind == "materialize":
        name = draw(st.sampled_from(["contiguous", "clone", "add", "sum", "item", "index"]))
        count = numel(shape)
        if count > SMALL and (name in ("sum", "item", "index") or
                              not _refusable(count, d.values[i].element_size())):
            return None
        ops = {"contiguous": lambda t: t.contiguous(), "clone": lambda t: t.clone(),
               "add": lambda t: t + 1, "sum": lambda t: t.sum(),
               "item": lambda t: t.new_full((), t.item()),
               "index": lambda t: t[(-1,) * t.dim()]}
        return Step(f"v{i}.{name}", lambda L, v: ops[name](v[i]))
    if kind == "repr":
        return Step(f"repr(v{i})", lambda L, v: (repr(v[i]), v[i])[1], case="huge:repr")
    if kind == "view":
        new = draw(st.sampled_from([(-1,), (big(), -1), (big(), big())]))
        return Step(f"v{i}.view({new})", lambda L, v: v[i].view(new))
    if n == 0:
        return None
    dim = draw_dim(draw, shape)
    signed = lambda: big() * draw(st.sampled_from([1, -1]))  # noqa
    # PyTorch wraps a stride times a step that overflows int64 (microtensor must raise)
    wraps = lambda step: (step or 1) * d.values[i].stride(dim) >= 2 ** 63  # noqa: E731
    if kind == "slice":
        start = draw(st.sampled_from([None, signed()]))
        stop = draw(st.sampled_from([None, signed()]))
        step = draw(st.sampled_from([None, 1, 2, huge_number(draw)]))
        # PyTorch's slice length, (length + step - 1) // step, overflows int64 there
        overflows = step is not None and d.values[i].shape[dim] + step - 1 >= 2 ** 63
        if wraps(step) or overflows:
            return None
        index = (slice(None),) * (dim % n) + (slice(start, stop, step),)
        return Step(f"v{i}[{index}]", lambda L, v: v[i][index])
    if kind == "unfold":
        width, step = draw(st.sampled_from([0, 1, 2, huge_number(draw)])), big()
        if wraps(step):
            return None
        return Step(f"v{i}.unfold({dim}, {width}, {step})",
                    lambda L, v: v[i].unfold(dim, width, step))
    if kind == "narrow":
        start, length = signed(), big()
        return Step(f"v{i}.narrow({dim}, {start}, {length})",
                    lambda L, v: v[i].narrow(dim, start, length))
    index = signed()
    return Step(f"v{i}.select({dim}, {index})", lambda L, v: v[i].select(dim, index))


# PyTorch's own overflows (slice bounds near 2**63, unfold with huge steps): not compared
TORCH_OVERFLOWS = ("cannot be represented as a SymInt", "Negative strides are not supported")


def _filled(t, extent):
    """``t`` (fresh from empty()) with its ``extent`` storage elements set to 1, where
    that is small enough (else nothing of it is compared, or PyTorch refused it)."""
    if extent <= SMALL:
        t.as_strided((extent,), (1,), 0).fill_(1)
    return t


def classify(error):
    """The open case a PyTorch error of the huge family belongs to, or None."""
    message = str(error)
    if isinstance(error, OverflowError) or "Overflow" in message:
        return "huge:beyond_int64"
    if "allocate" in message or "Storage size calculation overflowed" in message:
        return "huge:allocation"
    if "overflow" in message or "invalid storage offset -" in message:
        return "huge:int64_overflow"
    return None


FAMILIES = {
    "views": family_views,
    "inplace": family_inplace,
    "reductions": family_reductions,
    "unary": family_unary,
    "binary": family_binary,
    "indexing": family_indexing,
    "matmul": family_matmul,
    "joins": family_joins,
    "huge": family_huge,
}
GRAD_FAMILIES = ("views", "views", "inplace", "inplace", "reductions", "unary", "binary",
                 "binary", "indexing", "matmul", "joins")


def selected(families):
    """``families`` less those MICROTENSOR_FUZZ_FAMILIES leaves out."""
    return tuple(f for f in families if not ONLY or f in ONLY)


# --------------------------------------------------------------------------- programs

@st.composite
def input_specs(draw, grad=False):
    """One or two inputs: (values, layout) where layout rebuilds a non-contiguous tensor
    (``expanded``: with a stride-0 dim, not in grad programs: it would not be a leaf)."""
    specs = []
    for _ in range(draw(st.integers(1, 2))):
        sizes = st.integers(1, 3) if grad else st.sampled_from([0, 1, 2, 2, 3, 3])
        shape = tuple(draw(st.lists(sizes, max_size=3)))
        layouts = ["contiguous", "transposed", "strided"] + ([] if grad else ["expanded"])
        layout = draw(st.sampled_from(layouts))
        if len(shape) < 2 and layout == "transposed" or not shape and layout == "expanded":
            layout = "contiguous"
        dtype = "float64" if grad else draw(st.sampled_from(DTYPES))
        values = constant(draw, shape, dtype)
        if layout == "expanded":  # one row repeated: elements share memory
            values = np.ascontiguousarray(np.broadcast_to(values[:1], shape))
        specs.append((values, layout))
    return specs


def make_input(L, values, layout, requires_grad=False):
    if layout == "expanded":
        return lit(L, values[:1]).expand(values.shape)
    if layout == "transposed":
        t = lit(L, np.ascontiguousarray(values.swapaxes(0, 1))).transpose(0, 1)
    elif layout == "strided" and values.ndim:
        wide = np.zeros(values.shape[:-1] + (values.shape[-1] * 2,), dtype=values.dtype)
        wide[..., ::2] = values
        t = lit(L, wide)[..., ::2]
    else:
        t = lit(L, values)
    return t.requires_grad_(requires_grad)


class Program(list):
    """The steps, the inputs (``specs``), and which values are outputs (decided on the
    torch run: under vmap, ``contiguous()`` may copy where a loop over samples aliases, or
    the reverse)."""

    def __init__(self, steps, outputs, specs=()):
        super().__init__(steps)
        self.outputs, self.specs = outputs, specs

    def __repr__(self):
        inputs = ", ".join(f"v{k} = {layout} {values.dtype}{list(values.shape)}"
                           f"{values.tolist() if values.size <= 16 else '...'}"
                           for k, (values, layout) in enumerate(self.specs))
        return f"[{inputs}; " + "; ".join(map(repr, self)) + "]"


@st.composite
def programs(draw, families=GRAD_FAMILIES, grad=True, max_steps=6, inputs=None):
    """(input specs, Program) drawing each step from one of ``families``; the program ends
    at the first step PyTorch refuses (its exception type is compared too)."""
    families = selected(families) or families
    specs = draw(inputs if inputs is not None else input_specs(grad))
    tracked = [make_input(torch, v, layout, requires_grad=grad) for v, layout in specs]
    d = Draft(tracked, grad)
    steps = []
    length = draw(st.integers(2, max_steps))
    for _ in range(4 * length):
        if len(steps) == length:
            break
        i = draw(st.integers(0, len(tracked) - 1))
        family = draw(st.sampled_from(families))
        step = FAMILIES[family](draw, d, i)
        if step is None or step.case is not None and not enabled(step.case):
            continue
        try:
            out = step.apply(torch, tracked)
        except OK_ERRORS as error:
            if family == "huge" and not enabled(classify(error) or "") or \
                    any(text in str(error) for text in TORCH_OVERFLOWS):
                continue
            steps.append(step)
            break
        if any(size < 0 for size in out.shape):  # PyTorch's own overflow (slicing near 2**63)
            continue
        steps.append(step)
        tracked.append(out)
    assume(steps)
    # the values the program made, each once (in-place ops return their target again)
    made = [k for k in range(len(specs), len(tracked))
            if all(tracked[k] is not tracked[j] for j in range(k))]
    return specs, Program(steps, made, specs)


@st.composite
def huge_inputs(draw):
    """A small float32 range that the huge family blows up."""
    shape = tuple(draw(st.lists(st.sampled_from([1, 1, 2, 3]), max_size=3)))
    values = np.arange(numel(shape), dtype=np.float32).reshape(shape)
    return [(values, draw(st.sampled_from(["contiguous", "strided"])))]


def run_program(L, inputs, steps):
    """Runs ``steps``; returns (values after the last step, error type or None)."""
    vals = list(inputs)
    for step in steps:
        try:
            vals.append(step.apply(L, vals))
        except OK_ERRORS as error:
            return vals, type(error)
    return vals, None


def outputs_of(vals, steps):
    return [vals[k] for k in steps.outputs] or [vals[0] * 1]


# --------------------------------------------------------------------------- comparisons

def as_np(t):
    if isinstance(t, torch.Tensor):
        return t.detach().numpy(force=True)
    return np.array(t.detach()._array())


def assert_close(a, e, what):
    assert tuple(a.shape) == tuple(e.shape), f"{what}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    rtol, atol = TOLERANCE.get(dtype_name(e), (0, 0))
    np.testing.assert_allclose(as_np(a), as_np(e), rtol=rtol, atol=atol, err_msg=what)


def assert_strides(a, e, what):
    """Strides must match on every dim of size > 1 (PyTorch leaves size-1 strides loose)."""
    ours = [s for s, n in zip(a.stride(), a.shape) if n > 1]
    theirs = [s for s, n in zip(e.stride(), e.shape) if n > 1]
    assert ours == theirs, f"{what}: strides {a.stride()} != {e.stride()} (shape {tuple(e.shape)})"


def storage_groups(values):
    """For each value, the first value sharing its storage (-1: no storage)."""
    keys = [v.untyped_storage().data_ptr() if v.untyped_storage().nbytes() else None
            for v in values]
    return [-1 if k is None else keys.index(k) for k in keys]


def assert_same_values(ours, theirs, what, versions=None):
    """Every value: dtype, sizes, strides, storage offset, contents (small ones), the same
    pattern of shared storage, and (given the ``versions`` before the step, of both
    libraries) whether the step bumped each value's version counter."""
    for k, (a, e) in enumerate(zip(ours, theirs)):
        at = f"{what}: v{k}"
        assert dtype_name(a) == dtype_name(e), f"{at}: dtype {a.dtype} != {e.dtype}"
        assert tuple(a.shape) == tuple(e.shape), f"{at}: shape {tuple(a.shape)} != {tuple(e.shape)}"
        if numel(e.shape):  # the strides and offset of an empty tensor mean nothing
            assert_strides(a, e, at)
            assert a.storage_offset() == e.storage_offset(), \
                f"{at}: storage offset {a.storage_offset()} != {e.storage_offset()}"
        if 0 < numel(e.shape) <= SMALL:
            assert_close(a, e, at)
    for k, (before_ours, before_theirs) in enumerate(zip(*(versions or ((), ())))):
        bumped, expected = ours[k]._version != before_ours, theirs[k]._version != before_theirs
        assert bumped == expected, f"{what}: v{k}: version bumped {bumped}, in torch {expected}"
    assert storage_groups(ours) == storage_groups(theirs), f"{what}: storage sharing differs"


def builtin_type(error):
    """The built-in exception class ``error`` is an instance of (torch.OutOfMemoryError
    is a RuntimeError, NumPy's _ArrayMemoryError a MemoryError)."""
    return next(c for c in type(error).__mro__ if c.__module__ == "builtins")


def check_program(specs, steps, grad=False):
    """Runs the program step by step on both libraries; after each step compares every
    value (``assert_same_values``), or the exception types when PyTorch raises.  Returns
    how many steps were compared and whether every step ran without error."""
    vals = {L: [make_input(L, v, layout, requires_grad=grad) for v, layout in specs]
            for L in (mt, torch)}
    assert_same_values(vals[mt], vals[torch], f"{steps}: inputs")
    for k, step in enumerate(steps):
        what = f"{steps}: step {k} ({step})"
        results = {}
        versions = tuple([v._version for v in vals[L]] for L in (mt, torch))
        for L in (torch, mt):
            try:
                results[L] = step.apply(L, vals[L]), None
            except Exception as error:  # noqa: BLE001 -- any type is compared
                results[L] = None, error
        theirs, their_error = results[torch]
        ours, our_error = results[mt]
        if their_error is not None:
            assert isinstance(their_error, OK_ERRORS), f"{what}: the step is broken"
            assert our_error is not None, f"{what}: torch raised {their_error!r}, microtensor returned"
            # code that catches torch's exception must catch ours
            assert isinstance(our_error, builtin_type(their_error)), \
                f"{what}: microtensor raised {our_error!r}, torch {their_error!r}"
            return k + 1, False
        if our_error is not None:
            if not enabled("empty:kernel_checks") and numel(theirs.shape) == 0 and \
                    isinstance(our_error, OK_ERRORS):
                return k + 1, False
            raise AssertionError(f"{what}: microtensor raised, torch returned") from our_error
        vals[torch].append(theirs)
        vals[mt].append(ours)
        assert_same_values(vals[mt], vals[torch], what, versions)
    return len(steps), True


def completes(specs, steps):
    """Whether the grad program runs to its end on both libraries (what else happens is
    judged by ``check_program``)."""
    compared, completed = check_program(specs, steps, grad=True)
    assert compared >= 1, f"{steps}: nothing was compared"
    return completed


def attempt(fn):
    try:
        return fn(), None
    except OK_ERRORS as error:
        return None, error


def agree(run_mt, run_torch, what, loop=None):
    """Runs both; when torch raises, microtensor must raise the same type; returns both.
    Where torch's vmap refuses an op it could batch (``as_strided`` with the batch dim not
    outermost), ``loop`` computes the expected values one sample at a time instead."""
    expected, torch_error = attempt(run_torch)
    if torch_error is not None and loop is not None and "vmap" in str(torch_error):
        expected, torch_error = attempt(loop)
    if torch_error is not None:
        with pytest.raises(type(torch_error)):
            run_mt()
        return None, None
    return run_mt(), expected


def weights_for(outs, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(o.shape)) for o in outs]


def weighted_sum(L, outs, weights):
    total = L.tensor(0.0, dtype=L.float64)
    for o, w in zip(outs, weights):
        total = total + (o * L.tensor(w)).sum()
    return total


def grads_of(L, loss, leaves, **kwargs):
    grads = L.autograd.grad(loss, leaves, allow_unused=True, **kwargs)
    return [g if g is not None else L.zeros_like(x) for g, x in zip(grads, leaves)]


# --------------------------------------------------------------------------- the tests

FAMILY_EXAMPLES = 200  # per family: the module takes about 35 s of one core
IN_SUBPROCESS = {"huge"}  # may crash the interpreter while bugs are open


def family_mix(family):
    """The families a test of ``family`` draws from: views too (writes into views,
    reductions of expanded or strided values...), except for ``huge``, whose values
    only its own steps can handle."""
    return (family,) if family in ("views", "huge") else (family, family, "views")


def _family_test(family):
    inputs = huge_inputs() if family == "huge" else None

    @fuzz_settings(FAMILY_EXAMPLES)
    @given(programs(family_mix(family), grad=False, inputs=inputs))
    def run(program):
        specs, steps = program
        trace = os.environ.get("MICROTENSOR_FUZZ_TRACE")
        if trace:  # names the program that was running if this process dies
            pathlib.Path(trace).write_text(repr(steps))
        assert check_program(specs, steps)[0] >= 1, f"{steps}: nothing was compared"
    return run


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family(family):
    """Random programs of one family agree with PyTorch after every step."""
    if ONLY and family not in ONLY:
        pytest.skip(f"MICROTENSOR_FUZZ_FAMILIES={','.join(sorted(ONLY))}")
    if family in IN_SUBPROCESS and not os.environ.get("MICROTENSOR_FUZZ_CHILD"):
        _run_in_subprocess(family)
    else:
        _family_test(family)()


def _run_in_subprocess(family):
    """Runs ``test_family[family]`` in a child interpreter: a crash fails this test and
    names the program that was running."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = pathlib.Path(tmp) / "program"
        env = dict(os.environ, MICROTENSOR_FUZZ_CHILD="1", MICROTENSOR_FUZZ_TRACE=str(trace),
                   PYTHONPATH=os.pathsep.join([str(pathlib.Path(mt.__file__).parent.parent),
                                               os.environ.get("PYTHONPATH", "")]))
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
             f"{__file__}::test_family[{family}]"],
            capture_output=True, text=True, env=env,
            timeout=600 * max(1, examples(FAMILY_EXAMPLES) // FAMILY_EXAMPLES))
        last = trace.read_text() if trace.exists() else "(none)"
    assert proc.returncode == 0, \
        f"exit status {proc.returncode}; last program: {last}\n{proc.stdout[-4000:]}" \
        f"{proc.stderr[-2000:]}"


@pytest.mark.parametrize("case", sorted(KNOWN_OPEN) or ["(none)"])
def test_known_open(case):
    """The cases the generators leave out for now, each with its reason."""
    assert case == "(none)" or case.split(":")[0] in (*FAMILIES, "empty"), case
    if not enabled(case):
        pytest.skip(f"known open {case}: {KNOWN_OPEN[case]}")


@fuzz_settings(300)
@given(programs(), st.integers(0, 2 ** 16), st.booleans())
def test_forward_backward_double_backward(program, seed, double):
    """float64 programs that require grad: every value after every step, then the leaves'
    gradients and (``double``) second derivatives."""
    specs, steps = program
    if not completes(specs, steps):
        return
    leaves = {L: [make_input(L, v, layout, requires_grad=True) for v, layout in specs]
              for L in (mt, torch)}
    vals_t, _ = run_program(torch, leaves[torch], steps)
    vals_m, _ = run_program(mt, leaves[mt], steps)
    outs_t, outs_m = outputs_of(vals_t, steps), outputs_of(vals_m, steps)
    weights = weights_for(outs_t, seed)

    def backward(L, outs):
        return grads_of(L, weighted_sum(L, outs, weights), leaves[L], create_graph=double)

    grads_m, grads_t = agree(lambda: backward(mt, outs_m), lambda: backward(torch, outs_t),
                             f"{steps}: backward")
    if grads_t is None:
        return
    for k, (a, e) in enumerate(zip(grads_m, grads_t)):
        assert_close(a, e, f"{steps}: grad of input {k}")
    if not double:
        return
    if any(np.isnan(as_np(g)).any() for g in grads_t):
        return  # e.g. var of one element: PyTorch returns a constant nan gradient for 0-d
    vweights = weights_for(grads_t, seed + 1)

    def double_backward(L, grads):
        if not any(g.requires_grad for g in grads):
            return [L.zeros_like(x) for x in leaves[L]]
        return grads_of(L, weighted_sum(L, [g for g in grads], vweights), leaves[L])

    second_m, second_t = agree(lambda: double_backward(mt, grads_m),
                               lambda: double_backward(torch, grads_t), f"{steps}: double")
    for k, (a, e) in enumerate(zip(second_m or [], second_t or [])):
        assert_close(a, e, f"{steps}: second derivative for input {k}")


@st.composite
def batched_programs(draw):
    specs, steps = draw(programs())
    size = draw(st.integers(1, 3))
    batched = []
    for values, layout in specs:
        in_dim = draw(st.one_of(st.none(), st.integers(0, values.ndim)))
        scales = 1 + 0.25 * np.arange(size)
        physical = np.stack([values * s for s in scales])
        batched.append((physical, in_dim))
    return specs, steps, batched


def physical_input(L, physical, in_dim, requires_grad=False):
    if in_dim is None:
        return L.tensor(physical[0]).requires_grad_(requires_grad)
    t = L.tensor(np.ascontiguousarray(np.moveaxis(physical, 0, in_dim))).movedim(in_dim, 0)
    return t.movedim(0, in_dim).requires_grad_(requires_grad)


def program_function(L, steps, n_inputs):
    def f(*inputs):
        vals, error = run_program(L, list(inputs), steps)
        if error is not None:
            raise error("the program raised")
        return tuple(outputs_of(vals, steps))
    return f


def _loop_comparable(steps):
    """Whether a loop over samples must give vmap's values: not when a step may alias in
    one and copy in the other (reshape, contiguous) and something writes in place."""
    if not all(s.loopable for s in steps):
        return False
    may_alias = any(w in s.text for s in steps for w in ("contiguous", "reshape", "flatten"))
    writes = any(w in s.text for s in steps for w in INPLACE_NAMES + (" = ",))
    return not (may_alias and writes)


@fuzz_settings(300)
@given(batched_programs(), st.integers(0, 2 ** 16))
def test_vmap_and_vmap_grad(program, seed):
    specs, steps, batched = program
    if not completes(specs, steps):
        return
    if all(d is None for _, d in batched):
        batched[0] = (batched[0][0], 0)
    in_dims = tuple(d for _, d in batched)
    inputs = {L: [physical_input(L, p, d) for p, d in batched] for L in (mt, torch)}
    f = {L: program_function(L, steps, len(specs)) for L in (mt, torch)}
    def torch_loop(fn):
        size = next(x.shape[d] for x, d in zip(inputs[torch], in_dims) if d is not None)
        rows = [fn(*[x if d is None else x.select(d, b) for x, d in zip(inputs[torch], in_dims)])
                for b in range(size)]
        return tuple(torch.stack(column) for column in zip(*rows))

    outs_m, outs_t = agree(lambda: mt.vmap(f[mt], in_dims=in_dims)(*inputs[mt]),
                           lambda: torch_vmap(f[torch], in_dims=in_dims)(*inputs[torch]),
                           f"{steps}: vmap", loop=lambda: torch_loop(f[torch]))
    if outs_t is None:
        return
    for k, (a, e) in enumerate(zip(outs_m, outs_t)):
        assert_close(a, e, f"{steps}: vmap output {k}")
    if _loop_comparable(steps):
        size = outs_t[0].shape[0]
        fresh = [physical_input(mt, p, d) for p, d in batched]
        for b in range(size):
            sample = [x if d is None else x.select(d, b) for x, d in zip(fresh, in_dims)]
            for k, out in enumerate(f[mt](*[x.clone() for x in sample])):
                assert_close(outs_m[k][b], out, f"{steps}: vmap vs loop, sample {b} output {k}")

    weights = weights_for([o[0] for o in outs_t], seed)

    def loss(L):
        return lambda *xs: weighted_sum(L, f[L](*xs), weights)

    argnums = tuple(range(len(specs)))
    grads_m, grads_t = agree(
        lambda: mt.func.vmap(mt.func.grad(loss(mt), argnums), in_dims=in_dims)(*inputs[mt]),
        lambda: torch_vmap(torch_grad(loss(torch), argnums), in_dims=in_dims)(*inputs[torch]),
        f"{steps}: vmap(grad)", loop=lambda: torch_loop(torch_grad(loss(torch), argnums)))
    for k, (a, e) in enumerate(zip(grads_m or [], grads_t or [])):
        assert_close(a, e, f"{steps}: vmap(grad) for input {k}")


@fuzz_settings(300)
@given(batched_programs(), st.integers(0, 2 ** 16))
def test_is_grads_batched(program, seed):
    specs, steps, _ = program
    if not completes(specs, steps):
        return
    leaves = {L: [make_input(L, v, layout, requires_grad=True) for v, layout in specs]
              for L in (mt, torch)}
    vals_t, _ = run_program(torch, leaves[torch], steps)
    vals_m, _ = run_program(mt, leaves[mt], steps)
    outs_t, outs_m = outputs_of(vals_t, steps), outputs_of(vals_m, steps)
    keep = [k for k, o in enumerate(outs_t) if o.requires_grad]
    if not keep:
        return
    rng = np.random.default_rng(seed)
    cotangents = [rng.standard_normal((3,) + tuple(outs_t[k].shape)) for k in keep]

    def batched(L, outs):
        return L.autograd.grad([outs[k] for k in keep], leaves[L],
                               [L.tensor(c) for c in cotangents], allow_unused=True,
                               retain_graph=True, is_grads_batched=True)

    def one_at_a_time(L, outs):
        """The oracle where torch's vmap refuses an op (as_strided with the batch inside)."""
        rows = [L.autograd.grad([outs[k] for k in keep], leaves[L],
                                [L.tensor(c[b]) for c in cotangents], allow_unused=True,
                                retain_graph=True) for b in range(3)]
        return [None if r[0] is None else L.stack(r) for r in zip(*rows)]

    grads_m, grads_t = agree(lambda: batched(mt, outs_m), lambda: batched(torch, outs_t),
                             f"{steps}: is_grads_batched", loop=lambda: one_at_a_time(torch, outs_t))
    for k, (a, e) in enumerate(zip(grads_m or [], grads_t or [])):
        assert (a is None) == (e is None), f"{steps}: grad {k} None-ness differs"
        if e is not None:
            assert_close(a, e, f"{steps}: batched grad of input {k}")


# --------------------------------------------------------------------------- regressions
# Minimized failures the programs above found; each compares with torch directly.

def both(fn):
    """``fn(L)`` for microtensor and torch: (microtensor's, torch's) result or exception."""
    return tuple(attempt(lambda: fn(L)) for L in (mt, torch))


def assert_same_outcome(fn):
    (ours, our_error), (theirs, their_error) = both(fn)
    assert type(our_error) is type(their_error), \
        f"microtensor: {our_error!r}, torch: {their_error!r}"
    if their_error is None:
        for a, e in zip(ours, theirs):
            assert_close(a, e, "result")


def _grad_after_write(forward, write, L):
    """Gradient of ``forward(x * 1.5)`` after ``write`` changed ``x * 1.5`` in place."""
    x = L.tensor([[1.0, 2.0], [3.0, -4.0]], dtype=L.float64, requires_grad=True)
    hidden = x * 1.5
    out = forward(L, hidden)
    write(hidden)
    return L.autograd.grad(out.sum(), x)


@pytest.mark.parametrize("name, forward", [
    ("prod", lambda L, h: h.prod(0)),
    ("gather", lambda L, h: h.gather(0, L.tensor([[1, 0]]))),
    ("masked_select", lambda L, h: h.masked_select(h > 2)),
    ("lerp scalar weight", lambda L, h: L.lerp(h, h.detach() * 2, 0.3)),
    ("index_select", lambda L, h: h.index_select(0, L.tensor([1]))),
    ("amax", lambda L, h: h.amax(0)),
])
def test_inplace_write_after_use_agrees(name, forward):
    """Ops must save what PyTorch saves: a write into a saved input fails backward's version
    check exactly when it does in PyTorch (prod saves its result, gather/masked_select
    save self, lerp with a number weight saves nothing)."""
    assert_same_outcome(lambda L: _grad_after_write(forward, lambda h: h.add_(1.0), L))


def test_write_into_product_fails_backward():
    assert_same_outcome(lambda L: _grad_after_write(
        lambda L, h: h.prod(0), lambda h: h.prod(0).add_(1.0), L))


def test_product_gradient_uses_saved_result():
    for values in ([[1.0, 2.0], [3.0, -4.0]], [[0.0, 2.0], [3.0, 0.0]], [[0.0, 0.0], [1.0, 2.0]]):
        def f(L):
            x = L.tensor(values, dtype=L.float64, requires_grad=True)
            g, = L.autograd.grad(x.prod(1).sum(), x, create_graph=True)
            return (g,) + L.autograd.grad((g * g).sum(), x)
        assert_same_outcome(f)


def test_vmap_grad_of_product_written_in_place():
    def f(L, vmap, grad):
        def loss(x):
            y = x.prod(0)
            y.add_(L.tensor(1.0, dtype=L.float64))
            return y.sum()
        return vmap(grad(loss))(L.ones(2, 2, 3, dtype=L.float64))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        f(torch, torch_vmap, torch_grad)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        f(mt, mt.vmap, mt.func.grad)


def test_norm_fro_over_three_dims_raises():
    assert_same_outcome(lambda L: (L.zeros(1, 1, 1).norm(dim=(0, 1, 2)),))
    assert_same_outcome(lambda L: (L.ones(2, 3, 1).norm(dim=(0, 2)),))


def test_batched_gradient_through_write_into_empty_tensor():
    """CopySlices' batched buffer for an empty sample has batch stride 0 (nothing to write)."""
    def f(L):
        x = L.zeros(1, dtype=L.float64, requires_grad=True)
        empty = x.narrow(0, 0, 0) * 1.5
        empty[...] = L.tensor(2.0, dtype=L.float64)
        return L.autograd.grad([empty], [x], [L.ones(3, 0, dtype=L.float64)],
                               is_grads_batched=True)
    assert_same_outcome(f)


@pytest.mark.parametrize("batched", [False, True])
def test_grad_of_one_tensor_passed_twice_as_output(batched):
    def f(L):
        x = L.tensor(0.5, dtype=L.float64, requires_grad=True)
        y = x * 2
        shape = (3,) if batched else ()
        return L.autograd.grad([y, y], [x], [L.ones(shape, dtype=L.float64)] * 2,
                               is_grads_batched=batched)
    assert_same_outcome(f)


@pytest.mark.parametrize("write", [
    lambda L: (lambda y: y[1:].add_(y[:-1]))(L.arange(5.0)),
    lambda L: (lambda y: y.add_(y.t()))(L.arange(4.0).view(2, 2)),
    lambda L: (lambda y: y[..., ::2].add_(y))(L.zeros(1, 1) @ L.zeros(1, 1)),
])
def test_add_partial_overlap(write):
    assert_same_outcome(lambda L: (write(L),))


@pytest.mark.parametrize("write", [
    lambda L: L.zeros(1).expand(2).add_(1),
    lambda L: L.zeros(1).as_strided((2,), (0,)).mul_(2),
    lambda L: L.zeros(1).expand(2).sigmoid_(),
    lambda L: L.add(L.ones(2), 1, out=L.zeros(1).expand(2)),
])
def test_inplace_into_overlapping_memory(write):
    assert_same_outcome(lambda L: (write(L),))


@pytest.mark.parametrize("reduce", [lambda t: t.max(0)[0], lambda t: t.min(1)[0]])
def test_max_dim_saves_only_indices(reduce):
    assert_same_outcome(lambda L: _grad_after_write(lambda L, h: reduce(h),
                                                    lambda h: h.add_(1.0), L))


def _inplace(method, other):
    def write(x):
        getattr(x, method)(other)
        return x
    return write


@pytest.mark.parametrize("make", [
    lambda L: L.tensor([True, False]) & L.tensor(3),
    lambda L: L.tensor([True, False]) & 1,
    lambda L: 2 | L.tensor([True, False]),
    lambda L: L.tensor([True]) ^ L.tensor([2]),
    lambda L: L.tensor([True, False]) & L.tensor([True, True]),
    lambda L: _inplace("__ixor__", True)(L.tensor([True, False])),
    lambda L: _inplace("__iand__", L.tensor([1, 0]))(L.tensor([True, False])),
])
def test_bitwise_operators_of_bools_promote(make):
    """``&``, ``|``, ``^`` of a bool tensor and ints are bitwise in the promoted int dtype
    (bool ^ 2 is 3, not False); in place into a bool tensor they refuse the int result."""
    (ours, our_error), (theirs, their_error) = both(make)
    assert type(our_error) is type(their_error), (our_error, their_error)
    if their_error is None:
        assert dtype_name(ours) == dtype_name(theirs)
        assert_close(ours, theirs, "result")
