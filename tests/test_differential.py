"""Differential testing against PyTorch: Hypothesis draws small random programs (pointwise
ops with broadcasting, reductions, views, in-place writes into views, matmul, cat/stack,
gather/index_select) over random float64 inputs (size-1 dims, non-contiguous layouts) and
runs each in microtensor and in torch.  Forward values, shapes and strides, gradients,
double backward, vmap (against torch.func.vmap and a Python loop), vmap(grad) and
is_grads_batched backward passes must agree, and so must the exception type whenever torch
raises.  Regression tests for the failures it found follow the property tests."""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch (the differential oracle) is not installed")
from torch.func import grad as torch_grad, vmap as torch_vmap  # noqa: E402

RTOL, ATOL = 1e-7, 1e-9
OK_ERRORS = (RuntimeError, IndexError, ValueError, TypeError)


# --------------------------------------------------------------------------- programs

class Step:
    """One op of a program: ``apply(L, vals)`` runs it with ``L`` = ``mt`` or ``torch`` and
    returns the new value; ``loopable`` is False when a loop over samples would differ from
    vmap by design (``as_strided`` offsets are per sample inside vmap)."""

    def __init__(self, text, apply, loopable=True):
        self.text, self.apply, self.loopable = text, apply, loopable

    def __repr__(self):
        return self.text


def draw_dim(draw, shape):
    return draw(st.integers(-len(shape), len(shape) - 1))


def broadcastable_shape(draw, shape):
    """A shape that broadcasts with ``shape`` to ``shape``: trailing dims kept or set to 1."""
    keep = draw(st.integers(0, len(shape)))
    tail = shape[len(shape) - keep:]
    return tuple(1 if draw(st.booleans()) else s for s in tail)


def constant(draw, shape):
    """Multiples of 1/8 in [-2, 2]: exact ties and zeros happen (tie-breaking and kinks are
    compared too), nearly-degenerate values that only test rounding do not."""
    count = int(np.prod(shape, dtype=np.int64))
    eighths = draw(st.lists(st.integers(-16, 16), min_size=count, max_size=count))
    return np.array(eighths, dtype=np.float64).reshape(shape) / 8


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

BINARY = {
    "add": lambda L, x, y: x + y,
    "sub": lambda L, x, y: L.sub(x, y, alpha=2),
    "mul": lambda L, x, y: x * y,
    "div": lambda L, x, y: x / (y * y + 1),
    "maximum": lambda L, x, y: L.maximum(x, y),
    "where": lambda L, x, y: L.where(x > 0.1, x, y),
    "lerp": lambda L, x, y: L.lerp(x, y, 0.3),
}


def draw_step(draw, metas, tracked):
    """Draws one step for values whose (shape, writable, distinct) are ``metas``: writable
    values are not (views of) leaves, distinct ones have no two elements sharing memory;
    ``tracked`` are the values in torch."""
    i = draw(st.integers(0, len(metas) - 1))
    shape, writable, distinct = metas[i]
    kind = draw(st.sampled_from(
        ["inplace", "view", "binary_val", "unary", "binary", "reduce", "view", "inplace",
         "view", "inplace", "matmul", "cat", "gather"]))
    n = len(shape)
    if kind == "unary":
        name = draw(st.sampled_from(sorted(UNARY)))
        return Step(f"v{i}.{name}", lambda L, v: UNARY[name](L, v[i]))
    if kind == "binary":
        name = draw(st.sampled_from(sorted(BINARY)))
        other = constant(draw, broadcastable_shape(draw, shape))
        if draw(st.booleans()):
            return Step(f"{name}(v{i}, c{other.shape})",
                        lambda L, v: BINARY[name](L, v[i], L.tensor(other)))
        return Step(f"{name}(c{other.shape}, v{i})",
                    lambda L, v: BINARY[name](L, L.tensor(other), v[i]))
    if kind == "binary_val":
        name = draw(st.sampled_from(sorted(BINARY)))
        partners = [j for j, m in enumerate(metas) if _broadcasts(m[0], shape)]
        j = draw(st.sampled_from(partners))
        return Step(f"{name}(v{i}, v{j})", lambda L, v: BINARY[name](L, v[i], v[j]))
    if kind == "reduce":
        name = draw(st.sampled_from(["sum", "mean", "amax", "var", "std", "logsumexp", "norm",
                                     "prod"]))  # max(dim): test_max_dim_saves_only_indices
        keepdim = draw(st.booleans())
        if n == 0 or name in ("logsumexp", "max_dim") or draw(st.booleans()):
            dim = draw_dim(draw, shape) if n else 0
            dims = dim
        else:
            dims = tuple(sorted(set(draw(st.lists(st.integers(0, n - 1), min_size=1,
                                                  max_size=n)))))
        text = f"v{i}.{name}({dims}, keepdim={keepdim})"
        if name == "max_dim":
            if n == 0:
                return None
            return Step(text, lambda L, v: v[i].max(dims, keepdim=keepdim)[0])
        if name == "norm":
            return Step(text, lambda L, v: (v[i] + 3).norm(dim=dims, keepdim=keepdim))
        if name in ("var", "std") and _reduced_count(shape, dims) < 2:
            return None  # nan gradients, which PyTorch special-cases for 0-d inputs
        if name == "prod":
            if not isinstance(dims, int):
                return None
            return Step(text, lambda L, v: (v[i] + 3).prod(dims, keepdim=keepdim))
        return Step(text, lambda L, v: getattr(v[i], name)(dims, keepdim=keepdim))
    if kind == "view":
        return draw_view(draw, i, shape)
    if kind == "inplace":
        return draw_inplace(draw, metas, tracked)
    if kind == "matmul":
        if n == 0:
            return None
        if n == 1:
            other = constant(draw, (shape[0], draw(st.integers(1, 3))))
        else:
            batch = draw(st.sampled_from([(), shape[:-2][-1:]])) if n > 2 else ()
            other = constant(draw, batch + (shape[-1], draw(st.integers(1, 3))))
        if draw(st.booleans()) and n >= 2:
            left = constant(draw, (draw(st.integers(1, 3)), shape[-2]))
            return Step(f"c{left.shape} @ v{i}", lambda L, v: L.tensor(left) @ v[i])
        return Step(f"v{i} @ c{other.shape}", lambda L, v: v[i].matmul(L.tensor(other)))
    if kind == "cat":
        same = [j for j, m in enumerate(metas) if m[0] == shape]
        j = draw(st.sampled_from(same))
        if draw(st.booleans()):
            dim = draw(st.integers(-n - 1, n))
            return Step(f"stack([v{i}, v{j}], {dim})",
                        lambda L, v: L.stack([v[i], v[j] * 2], dim))
        if n == 0:
            return None
        dim = draw_dim(draw, shape)
        return Step(f"cat([v{i}, v{j}], {dim})", lambda L, v: L.cat([v[i], v[j] * 2], dim))
    if kind == "gather":
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
    return None


def _reduced_count(shape, dims):
    dims = (dims,) if isinstance(dims, int) else dims
    return int(np.prod([shape[d] for d in dims])) if shape else 1


def _broadcasts(small, big):
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(reversed(small), reversed(big)))


def draw_view(draw, i, shape):
    n = len(shape)
    name = draw(st.sampled_from(["transpose", "permute", "slice", "select", "narrow",
                                 "diagonal", "unsqueeze", "expand", "reshape", "as_strided",
                                 "flatten", "squeeze", "movedim", "mT"]))
    if name == "unsqueeze":
        dim = draw(st.integers(-n - 1, n))
        return Step(f"v{i}.unsqueeze({dim})", lambda L, v: v[i].unsqueeze(dim))
    if name == "expand":
        sizes = tuple(draw(st.integers(1, 3)) if s == 1 else s for s in shape)
        lead = tuple(draw(st.lists(st.integers(1, 3), max_size=1)))
        return Step(f"v{i}.expand({lead + sizes})", lambda L, v: v[i].expand(lead + sizes))
    if name == "reshape":
        total = int(np.prod(shape, dtype=np.int64))
        if total == 0:
            return None
        divisors = [d for d in range(1, total + 1) if total % d == 0]
        first = draw(st.sampled_from(divisors))
        new = draw(st.sampled_from([(first, -1), (-1,), (first, total // first, 1)]))
        return Step(f"v{i}.reshape({new})", lambda L, v: v[i].reshape(new))
    if name == "flatten":
        return Step(f"v{i}.flatten()", lambda L, v: v[i].flatten())
    if name == "squeeze":
        return Step(f"v{i}.squeeze()", lambda L, v: v[i].squeeze())
    if name == "as_strided":
        total = int(np.prod(shape, dtype=np.int64))
        if total == 0:
            return None
        size = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
        stride = tuple(draw(st.integers(0, 2)) for _ in size)
        extent = sum((s - 1) * t for s, t in zip(size, stride))
        if extent >= total:
            return None
        offset = draw(st.integers(0, total - 1 - extent))
        return Step(f"v{i}.contiguous().as_strided({size}, {stride}, +{offset})",
                    lambda L, v: _as_strided_from_start(v[i].contiguous(), size, stride,
                                                        offset), loopable=False)
    if n == 0:
        return None
    if name in ("transpose", "movedim"):
        a, b = draw_dim(draw, shape), draw_dim(draw, shape)
        return Step(f"v{i}.{name}({a}, {b})", lambda L, v: getattr(v[i], name)(a, b))
    if name == "permute":
        perm = tuple(draw(st.permutations(range(n))))
        return Step(f"v{i}.permute{perm}", lambda L, v: v[i].permute(perm))
    if name == "mT":
        if n < 2:
            return None
        return Step(f"v{i}.mT", lambda L, v: v[i].mT)
    dim = draw_dim(draw, shape)
    size = shape[dim]
    if name == "slice":
        start = draw(st.integers(-size - 1, size + 1))
        stop = draw(st.integers(-size - 1, size + 1))
        step = draw(st.integers(1, 3))
        index = (slice(None),) * (dim % n) + (slice(start, stop, step),)
        return Step(f"v{i}[{index}]", lambda L, v: v[i][index])
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


def _share_storage(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _as_strided_from_start(t, size, stride, offset):
    return t.as_strided(size, stride, t.storage_offset() + offset)


INPLACE_NAMES = ("add_", "mul_", "copy_", "fill_", "setitem", "add_val", "sigmoid_")


def draw_inplace(draw, metas, tracked):
    # writing into overlapping memory: test_inplace_into_overlapping_memory
    targets = [j for j, m in enumerate(metas) if m[1] and m[2]]
    if not targets:  # make something to write into
        i = draw(st.integers(0, len(metas) - 1))
        return Step(f"v{i}.mul(1.5)", lambda L, v: v[i].mul(1.5))
    i = draw(st.sampled_from(targets))
    shape, _, distinct = metas[i]
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
        sources = [j for j, m in enumerate(metas) if _broadcasts(m[0], vshape)]
        if not sources:
            return None
        j = draw(st.sampled_from(sources))
        if _share_storage(tracked[i], tracked[j]):  # partial overlap: test_add_partial_overlap
            return Step(f"{text}(v{j}.clone())", lambda L, v: view(v[i]).add_(v[j].clone()))
        return Step(f"{text}(v{j})", lambda L, v: view(v[i]).add_(v[j]))
    if name == "sigmoid_":
        return Step(text, lambda L, v: view(v[i]).sigmoid_())
    if name == "fill_":
        value = draw(st.floats(-2, 2, allow_nan=False, width=32))
        return Step(f"{text}({value})", lambda L, v: view(v[i]).fill_(value))
    source = constant(draw, broadcastable_shape(draw, vshape))
    if name == "setitem":
        def assign(L, v):
            target = view(v[i])
            target[...] = L.tensor(source)
            return target
        return Step(f"{text}(c{source.shape})", assign)
    return Step(f"{text}(c{source.shape})",
                lambda L, v: getattr(view(v[i]), name)(L.tensor(source)))


@st.composite
def input_specs(draw):
    """One or two inputs: (values, layout) where layout rebuilds a non-contiguous tensor."""
    specs = []
    for _ in range(draw(st.integers(1, 2))):
        shape = tuple(draw(st.lists(st.integers(1, 3), max_size=3)))
        layout = draw(st.sampled_from(["contiguous", "transposed", "strided"]))
        if len(shape) < 2 and layout == "transposed":
            layout = "contiguous"
        specs.append((constant(draw, shape), layout))
    return specs


def make_input(L, values, layout, requires_grad=True):
    if layout == "transposed":
        t = L.tensor(np.ascontiguousarray(values.swapaxes(0, 1))).transpose(0, 1)
    elif layout == "strided":
        wide = np.zeros(values.shape[:-1] + (values.shape[-1] * 2,)) if values.ndim else None
        if wide is None:
            t = L.tensor(values)
        else:
            wide[..., ::2] = values
            t = L.tensor(wide)[..., ::2]
    else:
        t = L.tensor(values)
    return t.requires_grad_(requires_grad)


@st.composite
def programs(draw):
    specs = draw(input_specs())
    tracked = [make_input(torch, v, layout) for v, layout in specs]
    metas = [(tuple(t.shape), False, True) for t in tracked]
    steps = []
    length = draw(st.integers(2, 6))
    for _ in range(3 * length):
        if len(steps) == length:
            break
        step = draw_step(draw, metas, tracked)
        if step is None:
            continue
        steps.append(step)
        try:
            out = step.apply(torch, tracked)
        except OK_ERRORS:
            break
        tracked.append(out)
        writable = not (out._base is not None and out._base.is_leaf) and not out.is_leaf
        metas.append((tuple(out.shape), writable, torch._debug_has_internal_overlap(out) == 0))
    # the values the program made, each once (in-place ops return their target again)
    made = [k for k in range(len(specs), len(tracked))
            if all(tracked[k] is not tracked[j] for j in range(k))]
    return specs, Program(steps, made)


class Program(list):
    """The steps, and which values are outputs (decided on the torch run: under vmap,
    ``contiguous()`` may copy where a loop over samples aliases, or the reverse)."""

    def __init__(self, steps, outputs):
        super().__init__(steps)
        self.outputs = outputs


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
    np.testing.assert_allclose(as_np(a), as_np(e), rtol=RTOL, atol=ATOL, err_msg=what)


def assert_strides(a, e, what):
    """Strides must match on every dim of size > 1 (PyTorch leaves size-1 strides loose)."""
    ours = [s for s, n in zip(a.stride(), a.shape) if n > 1]
    theirs = [s for s, n in zip(e.stride(), e.shape) if n > 1]
    assert ours == theirs, f"{what}: strides {a.stride()} != {e.stride()} (shape {tuple(e.shape)})"


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
        expected, torch_error = loop(), None
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


pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")

# DIFFERENTIAL_EXAMPLES=2000 runs a longer, randomized hunt.
EXAMPLES = int(os.environ.get("DIFFERENTIAL_EXAMPLES", "0"))
SETTINGS = settings(max_examples=EXAMPLES or 300, deadline=None, derandomize=not EXAMPLES,
                    suppress_health_check=list(HealthCheck))


@SETTINGS
@given(programs(), st.integers(0, 2 ** 16), st.booleans())
def test_forward_backward_double_backward(program, seed, double):
    specs, steps = program
    leaves = {L: [make_input(L, v, layout) for v, layout in specs] for L in (mt, torch)}
    (vals_t, error_t) = run_program(torch, leaves[torch], steps)
    (vals_m, error_m) = run_program(mt, leaves[mt], steps)
    assert error_m == error_t, f"{steps}: microtensor raised {error_m}, torch {error_t}"
    if error_t is not None:
        return
    outs_t, outs_m = outputs_of(vals_t, steps), outputs_of(vals_m, steps)
    for k, (a, e) in enumerate(zip(outs_m, outs_t)):
        assert_close(a, e, f"{steps}: output {k}")
        assert_strides(a, e, f"{steps}: output {k}")
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
    writes = any(w in s.text for s in steps for w in INPLACE_NAMES)
    return not (may_alias and writes)


@SETTINGS
@given(batched_programs(), st.integers(0, 2 ** 16))
def test_vmap_and_vmap_grad(program, seed):
    specs, steps, batched = program
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


@SETTINGS
@given(batched_programs(), st.integers(0, 2 ** 16))
def test_is_grads_batched(program, seed):
    specs, steps, _ = program
    leaves = {L: [make_input(L, v, layout) for v, layout in specs] for L in (mt, torch)}
    vals_t, error_t = run_program(torch, leaves[torch], steps)
    vals_m, error_m = run_program(mt, leaves[mt], steps)
    assert error_m == error_t, f"{steps}: microtensor raised {error_m}, torch {error_t}"
    if error_t is not None:
        return
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
