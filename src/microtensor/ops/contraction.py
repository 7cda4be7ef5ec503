"""Contractions: ``einsum`` (one op, ``_einsum``, planned by NumPy into BLAS products) and
the composites written with it or with products: ``tensordot``, ``baddbmm``, ``kron``,
``cross``, ``cdist``, ``cosine_similarity``, ``pairwise_distance``.

``einsum`` parses PyTorch's equation (ellipsis, implicit output), checks the operands and
expands broadcast size-1 dims (zero-copy; their gradients are summed back by ``expand``'s
backward), then calls ``_einsum`` with an explicit equation of one letter per dim.  The
kernel contracts the operands pairwise, in the order ``np.einsum_path`` plans, each pair as
one batched matrix product (permute, reshape, BLAS ``matmul``).  The derivative of each operand is again an ``_einsum`` of the
incoming gradient with the other operands, subscripts swapped.
"""
import math
import string

import numpy as np

from microtensor._C import meta
from microtensor._C.tensor import bool_, compute_numpy, empty_contiguous, float32
from microtensor._dtype import result_type
from microtensor.ops.dispatch import call_by_name
from microtensor.ops.factory import eye, tensor
from microtensor.ops.linalg import (REDUCED_FLOATS, _checked_inplace, bmm, require_one_dtype,
                                    scaled_sum)
from microtensor.ops.loops import (_type_name, array_module, conj_if_complex, from_numpy_result,
                                   owned)
from microtensor.ops.registry import Sample, op
from microtensor.ops.shape import stack
from microtensor.vmap.helpers import call, same_level, to_front, wrap

LETTERS = string.ascii_letters


# --------------------------------------------------------------------------- einsum

def _parse_operand(subs, ndim, index):
    """``subs`` of one operand as a list of labels, "..." kept as one label."""
    labels, rest = [], subs
    if "..." in subs:
        before, _, after = subs.partition("...")
        if "." in after or "." in before:
            raise RuntimeError("einsum(): found '.' for operand " f"{index} that is not part "
                               "of any ellipsis")
        labels = list(before) + ["..."] + list(after)
        rest = before + after
    else:
        if "." in subs:
            raise RuntimeError(f"einsum(): found '.' for operand {index} that is not part of "
                               "any ellipsis")
        labels = list(subs)
    for c in rest:
        if c not in LETTERS:
            raise RuntimeError(f"einsum(): invalid subscript given at index {subs.index(c)} "
                               "in the equation string, subscripts must be in [a-zA-Z]")
    named = len(rest)
    if ("..." in labels and named > ndim) or ("..." not in labels and named != ndim):
        raise RuntimeError(f"einsum(): the number of subscripts in the equation ({named}) "
                           + ("is more than" if "..." in labels else "does not match")
                           + f" the number of dimensions ({ndim}) for operand {index}"
                           + ("" if "..." in labels else " and no ellipsis was given"))
    return labels


def _explicit(equation, operands):
    """The equation with the ellipsis replaced by letters, one per dim, the output made
    explicit, and the operands' sizes for each letter (size-1 dims broadcast)."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    parts = lhs.split(",")
    if len(parts) != len(operands):
        raise RuntimeError("einsum(): " + ("more" if len(operands) > len(parts) else "fewer")
                           + " operands were provided than specified in the equation")
    labels = [_parse_operand(s, t.dim(), i) for i, (s, t) in enumerate(zip(parts, operands))]
    used = set(equation) & set(LETTERS)
    spare = [c for c in LETTERS if c not in used]
    ell_rank = max((t.dim() - len(ls) + 1 for ls, t in zip(labels, operands) if "..." in ls),
                   default=0)
    if len(spare) < ell_rank:
        raise RuntimeError("einsum(): too many dimensions for the available subscripts")
    ell = "".join(spare[:ell_rank])
    subs = []
    for ls, t in zip(labels, operands):
        if "..." in ls:
            n = t.dim() - len(ls) + 1
            subs.append("".join(ell[ell_rank - n:] if c == "..." else c for c in ls))
        else:
            subs.append("".join(ls))
    if arrow:
        if "..." in rhs:
            before, _, after = rhs.partition("...")
            out = before + ell + after
        else:
            out = rhs
        for i, c in enumerate(out):
            if c not in LETTERS and c not in ell:
                raise RuntimeError(f"einsum(): invalid subscript given at index {len(lhs) + 2 + i} "
                                   "in the equation string, subscripts must be in [a-zA-Z]")
            if out.count(c) > 1:
                raise RuntimeError(f"einsum(): output subscript {c} appears more than once in "
                                   "the output")
            if not any(c in s for s in subs):
                raise RuntimeError(f"einsum(): output subscript {c} does not appear in the "
                                   "equation for any input operand")
    else:
        counts = {}
        for s in subs:
            for c in s:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    sizes = {}
    for i, (s, t) in enumerate(zip(subs, operands)):
        for c, n in zip(s, t._sizes):
            if sizes.get(c, 1) != 1 and n != 1 and sizes[c] != n:
                raise RuntimeError(f"einsum(): operands do not broadcast with remapped shapes "
                                   f"(original->remapped): subscript {c} has size {n} for "
                                   f"operand {i} which does not broadcast with previously "
                                   f"seen size {sizes[c]}")
            if n != 1 or c not in sizes:
                sizes[c] = n
    return subs, out, sizes


def _einsum_samples(make):
    return [Sample("ij,jk->ik", make(2, 3), make(3, 4)), Sample("ij,jk", make(2, 3), make(3, 4)),
            Sample("bij,bjk->bik", make(2, 2, 3), make(2, 3, 2)),
            Sample("...ij,...jk", make(2, 2, 3), make(3, 2)),
            Sample("ii->i", make(3, 3)), Sample("ii", make(3, 3)), Sample("ij->", make(2, 3)),
            Sample("i,j->ij", make(3), make(2)), Sample("ij,ij->i", make(1, 3), make(2, 3)),
            Sample("bhqd,bhkd->bhqk", make(1, 2, 3, 2), make(1, 2, 4, 2)),
            Sample("i...->...", make(2, 3, 2)), Sample("ijk,jl,kl->il", make(2, 3, 2),
                                                        make(3, 2), make(2, 2)),
            Sample("ij->ji", [make(2, 3)]), Sample("iij->j", make(2, 2, 3))]


@op(kind="composite", inputs=("operands",), samples=_einsum_samples)
def einsum(equation, *operands):
    """Einstein summation with PyTorch's equation syntax (ellipsis, implicit output)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise RuntimeError("einsum(): must provide at least one operand")
    for t in operands[1:]:
        if t._dtype is not operands[0]._dtype:
            raise RuntimeError(f"expected scalar type {_dtype_name(operands[0])} but found "
                               f"{_dtype_name(t)}")
    subs, out, sizes = _explicit(equation, operands)
    # broadcast size-1 dims (a view; expand's backward sums their gradient back)
    operands = [t.expand(*[sizes[c] for c in s]) if any(n != sizes[c] for c, n in
                                                          zip(s, t._sizes)) else t
                for s, t in zip(subs, operands)]
    return _einsum(operands, ",".join(subs) + "->" + out)


def _dtype_name(t):
    return _type_name(t._dtype)


def _private_einsum_samples(make):
    return [Sample([make(2, 3), make(3, 4)], "ij,jk->ik"), Sample([make(3, 3)], "ii->i"),
            Sample([make(2, 3), make(3), make(3, 2)], "ij,j,jk->ik"),
            Sample([make(2, 2, 3)], "iij->ji"), Sample([make(2, 3)], "ij->")]


@op(inputs=("operands",), method=False, function=False, samples=_private_einsum_samples)
def _einsum(operands, equation):
    """``einsum`` of an explicit equation: one letter per dim of each operand, sizes of a
    letter equal (``einsum`` checks and expands them).  float16 and bfloat16 multiply and
    accumulate in float32, rounding the result once (PyTorch's CPU)."""
    compute = compute_numpy(operands[0]._dtype)
    arrays = [t._array().astype(compute, copy=False) for t in operands]
    lhs, out = equation.split("->")
    subs = lhs.split(",")
    if len(arrays) > 2:
        # NumPy plans the order of the pairwise products (on zero-memory stand-ins)
        stand_ins = [np.broadcast_to(np.empty((), np.float64), a.shape) for a in arrays]
        order = np.einsum_path(equation, *stand_ins, optimize="greedy")[0][1:]
    else:
        order = [tuple(range(len(arrays)))]
    pending = list(zip(subs, arrays))
    for picked in order:
        taken = [pending[i] for i in picked]
        for i in sorted(picked, reverse=True):
            del pending[i]
        needed = out + "".join(sub for sub, _ in pending)
        if len(taken) == 1:
            pending.append(_alone(*taken[0], needed))
            continue
        while len(taken) > 1:   # a step of several operands: pairwise, left to right
            rest = "".join(sub for sub, _ in taken[2:])
            taken[:2] = [_pair(taken[:2], needed + rest)]
        pending.append(taken[0])
    sub, value = pending[0]
    return _fresh(np.einsum(f"{sub}->{out}", value), operands[0])


def _alone(sub, value, needed):
    """One operand's diagonals taken and its letters that nothing else needs summed."""
    kept = "".join(c for c in dict.fromkeys(sub) if c in needed)
    return kept, value if kept == sub else np.einsum(f"{sub}->{kept}", value)


def _pair(taken, needed):
    """Two operands contracted as one (batched) matrix product: dims permuted to (batch,
    rows, inner) and (batch, inner, columns), reshaped, multiplied by BLAS (NumPy's
    functions reach CuPy arrays through ``__array_function__``)."""
    (sa, a), (sb, b) = taken
    sa, a = _alone(sa, a, needed + sb)
    sb, b = _alone(sb, b, needed + sa)
    size = dict(zip(sa, a.shape))
    size.update(zip(sb, b.shape))
    batch = [c for c in sa if c in sb and c in needed]
    inner = [c for c in sa if c in sb and c not in needed]
    rows = [c for c in sa if c not in sb]
    cols = [c for c in sb if c not in sa]

    def count(letters):
        return math.prod(size[c] for c in letters)
    left = a.transpose([sa.index(c) for c in batch + rows + inner]).reshape(
        count(batch), count(rows), count(inner))
    right = b.transpose([sb.index(c) for c in batch + inner + cols]).reshape(
        count(batch), count(inner), count(cols))
    product = np.matmul(left, right).reshape([size[c] for c in batch + rows + cols])
    return "".join(batch + rows + cols), product


def _fresh(value, like):
    """A new contiguous tensor holding ``value`` (an array computed by the kernel)."""
    out = empty_contiguous(tuple(value.shape), like._dtype, like._storage.device)
    if out._numel:
        out._array()[...] = value
    return out


@_einsum.def_derivative("operands")
def _einsum(grad, operands, equation):
    lhs, out = equation.split("->")
    subs = lhs.split(",")
    used = set(equation)
    spare = iter(c for c in LETTERS if c not in used)
    grads = []
    for k, (s, t) in enumerate(zip(subs, operands)):
        # (the others conjugated: PyTorch's convention for complex gradients)
        others = [(subs[j], conj_if_complex(operands[j])) for j in range(len(subs)) if j != k]
        seen = out + "".join(o for o, _ in others)
        unique = "".join(dict.fromkeys(s))
        # letters summed in operand k alone: its gradient is constant along them
        kept = "".join(c for c in unique if c in seen)
        g = _einsum([grad] + [o for _, o in others],
                    ",".join([out] + [o for o, _ in others]) + "->" + kept)
        target, factors, names = [], [], [kept]
        first = {}      # each letter's name in the gradient at its first place
        for c in s:
            if c in kept and c not in first:
                first[c] = c
                target.append(c)
                continue
            # a repeated letter (a diagonal) or a letter summed here alone: a fresh letter,
            # tied to the first one by an identity matrix, or broadcast
            f = next(spare)
            if c in first:
                factors.append(_eye_like(t._sizes[s.index(c)], grad))
                names.append(first[c] + f)
            else:
                first[c] = f
            target.append(f)
        if factors:
            g = _einsum([g] + factors, ",".join(names) + "->" + "".join(
                c for c in target if any(c in n for n in names)))
        full = "".join(c for c in target)
        present = "".join(c for c in full if any(c in n for n in names))
        if present != full:
            shape = tuple(t._sizes)
            g = g.reshape(tuple(shape[i] if full[i] in present else 1
                                for i in range(len(full)))).expand(*shape)
        grads.append(g)
    # autograd takes a one-tensor list's gradient as that tensor alone
    return grads if len(grads) > 1 else grads[0]


@_einsum.def_batch_rule
def _einsum(op, level, args, kwargs):
    """The vmap dim becomes one more letter, in front of the batched operands' subscripts
    and of the output: one physical einsum."""
    bound = op.bind(args, kwargs)
    operands, equation = list(bound["operands"]), bound["equation"]
    lhs, out = equation.split("->")
    subs = lhs.split(",")
    fresh = next(c for c in string.ascii_letters if c not in equation)
    for i, t in enumerate(operands):
        if same_level(t, level):
            operands[i] = to_front(t._value, t._bdim)
            subs[i] = fresh + subs[i]
    return wrap(call(op, (operands, ",".join(subs) + "->" + fresh + out), None), 0, level)


def _eye_like(n, like):
    return eye(n, dtype=like._dtype, device=like.device)


# --------------------------------------------------------------------------- composites

def _tensordot_samples(make):
    return [Sample(make(2, 3, 4), make(3, 4, 2)), Sample(make(2, 3), make(3, 2), dims=1),
            Sample(make(2, 3, 4), make(4, 3), dims=([1, 2], [1, 0])),
            Sample(make(2, 3), make(2), dims=0)]


@op(out=True, kind="composite", inputs=("a", "b"), method=False, samples=_tensordot_samples)
def tensordot(a, b, dims=2):
    """Contract the last ``dims`` dims of ``a`` with the first of ``b``, or the listed
    pairs of dims."""
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        if dims > a.dim() or dims > b.dim():
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got "
                               f"dims={dims}")
        da, db = list(range(a.dim() - dims, a.dim())), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
        if len(da) != len(db):
            raise RuntimeError("both dimension lists should have same length")
    da = [d % a.dim() for d in da]
    db = [d % b.dim() for d in db]
    for x, y in zip(da, db):
        if a._sizes[x] != b._sizes[y]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size "
                               f"{a._sizes[x]} in dim {x} and second has size {b._sizes[y]} "
                               f"in dim {y}")
    letters = iter(LETTERS)
    sa = [next(letters) for _ in range(a.dim())]
    sb = [next(letters) for _ in range(b.dim())]
    for x, y in zip(da, db):
        sb[y] = sa[x]
    result = "".join(c for i, c in enumerate(sa) if i not in da) + \
        "".join(c for i, c in enumerate(sb) if i not in db)
    return einsum("".join(sa) + "," + "".join(sb) + "->" + result, a, b)


def _baddbmm_samples(make):
    return [Sample(make(2, 3, 4), make(2, 3, 5), make(2, 5, 4)),
            Sample(make(3, 1), make(2, 3, 5), make(2, 5, 4), beta=0.5, alpha=2.0),
            Sample(make(2, 3, 4), make(2, 3, 5), make(2, 5, 4), beta=0)]


@op(out=True, kind="composite", inputs=("self", "batch1", "batch2"), samples=_baddbmm_samples)
def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """``beta * self + alpha * (batch1 @ batch2)``; with ``beta=0`` ``self`` is ignored."""
    require_one_dtype(self, batch1, batch2, "baddbmm")
    if self._dtype in REDUCED_FLOATS:     # PyTorch sums in float32 and rounds once
        return baddbmm(self.float(), batch1.float(), batch2.float(), beta=beta,
                       alpha=alpha).to(self._dtype)
    return scaled_sum(self, bmm(batch1, batch2), beta, alpha)


def _kron_samples(make):
    return [Sample(make(2, 3), make(2, 2)), Sample(make(2), make(3)),
            Sample(make(2, 1, 2), make(3, 2))]


@op(out=True, out_casting=True, kind="composite", inputs=("self", "other"), samples=_kron_samples)
def kron(self, other):
    """Kronecker product: blocks ``self[i...] * other``, as one broadcast product."""
    n = max(self.dim(), other.dim())
    a = self.reshape((1,) * (n - self.dim()) + tuple(self.shape))
    b = other.reshape((1,) * (n - other.dim()) + tuple(other.shape))
    inter_a = tuple(s for d in a.shape for s in (d, 1))
    inter_b = tuple(s for d in b.shape for s in (1, d))
    out = a.reshape(inter_a) * b.reshape(inter_b)
    return owned(out.reshape(tuple(x * y for x, y in zip(a.shape, b.shape))))


def _cross_samples(make):
    return [Sample(make(3), make(3)), Sample(make(2, 3), make(2, 3), dim=1),
            Sample(make(3, 2), make(3, 1), dim=0)]


@op(out=True, kind="composite", inputs=("input", "other"), samples=_cross_samples)
def cross(input, other, dim=None):
    """Cross product of 3-vectors along ``dim`` (default: the first dim of size 3, as
    ``torch.cross``'s deprecated default)."""
    if input.dim() != other.dim():
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    if result_type(input, other) is bool_:
        raise NotImplementedError("\"cross\" not implemented for 'Bool'")
    shape = tuple(meta.broadcast_shapes(input._sizes, other._sizes))
    input, other = input.expand(*shape), other.expand(*shape)
    if dim is None:
        dim = next((i for i, n in enumerate(input.shape) if n == 3), None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
    given, dim = dim, dim % input.dim() if input.dim() else 0
    if input.shape[dim] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {given} must have length 3. Got "
                           f"{input.shape[dim]} and {other.shape[dim]}")
    a = [input.select(dim, i) for i in range(3)]
    b = [other.select(dim, i) for i in range(3)]
    return stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                  a[0] * b[1] - a[1] * b[0]], dim)


# --------------------------------------------------------------------------- distances

def _cdist_samples(make):
    return [Sample(make(3, 2), make(4, 2)), Sample(make(2, 3, 2), make(2, 4, 2), p=1.0),
            Sample(make(3, 2), make(2, 2), p=3.0), Sample(make(3, 2), make(2, 2), p=float("inf")),
            Sample(make(2, 1, 3, 2), make(4, 2))]


_CDIST_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                "donot_use_mm_for_euclid_dist")


@op(kind="composite", inputs=("x1", "x2"), method=False, samples=_cdist_samples)
def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """p-norm distances between the rows of ``x1`` (..., P, M) and ``x2`` (..., R, M):
    (..., P, R); batch dims broadcast.  Every ``compute_mode`` computes the differences
    directly (PyTorch's most precise mode)."""
    if compute_mode not in _CDIST_MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    for name, t in (("X1", x1), ("X2", x2)):
        if t.dim() < 2:
            raise RuntimeError(f"cdist only supports at least 2D tensors, {name} got: "
                               f"{t.dim()}D")
        if not t.dtype.is_floating_point:
            raise RuntimeError(f"cdist only supports floating-point dtypes, {name} got: "
                               f"{_type_name(t.dtype)}")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: "
                           f"{x1.shape[-1]} X2: {x2.shape[-1]}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    diffs = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    if p == math.inf and diffs.shape[-1]:
        return _max_distance(diffs)
    return diffs.norm(p, dim=-1)


def _max_distance(diffs):
    """The inf-norm of ``diffs`` along the last dim with PyTorch's gradient (as pdist's):
    whole to each component equal to the maximum, where amax's would share it: the sum of
    the ties less the maximum (constant) counted once for each tie but one."""
    magnitude = diffs.abs()
    maximum = magnitude.detach().amax(-1)
    attains = magnitude == maximum.unsqueeze(-1)
    return (magnitude * attains).sum(-1) - (attains.sum(-1) - 1) * maximum


def _cosine_samples(make):
    # no vector shorter than eps: its gradient is PyTorch's convention, not the derivative,
    # and a zero vector's second derivative is NaN in both libraries (tests/
    # test_port_advanced.py compares those cases with PyTorch)
    return [Sample(make(3, 4), make(3, 4)), Sample(make(2, 3), make(1, 3), dim=-1),
            Sample(make(4), make(4), dim=0), Sample(make(2, 3), make(2, 3), eps=1e-3),
            Sample(make(3, 4), make(1, 4), dim=0)]


@op(kind="composite", inputs=("x1", "x2"), method=False, samples=_cosine_samples)
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim`` (norms clamped to
    ``eps``), broadcasting the other dims."""
    common = result_type(x1, x2)
    if not common.is_floating_point:
        raise RuntimeError(f"expected common dtype to be floating point, yet common dtype is "
                           f"{_type_name(common)}")
    if not eps >= 0:   # (NaN too)
        raise RuntimeError(f"eps must be non-negative, got: {eps}")
    # broadcast first, as PyTorch does: a size-1 ``dim`` stretched counts in its norm
    shape = meta.broadcast_pair(tuple(x1.shape), tuple(x2.shape))
    x1, x2 = x1.expand(shape), x2.expand(shape)
    n1 = _clamped_norm(x1, dim, eps)
    n2 = _clamped_norm(x2, dim, eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def _clamped_norm(x, dim, eps):
    """The 2-norm along ``dim`` with its value clamped to ``eps`` but the norm's gradient
    kept: PyTorch clamps the norm in place without recording the clamp, so a norm below
    ``eps`` still passes its gradient on."""
    norm = x.norm(2.0, dim=dim, keepdim=True)
    return norm + (norm.detach().clamp_min(eps) - norm.detach())


def _pairwise_samples(make):
    return [Sample(make(3, 4), make(3, 4)), Sample(make(3, 4), make(1, 4), p=1.0),
            Sample(make(4), make(4), keepdim=True), Sample(make(2, 3), make(2, 3), p=3.0)]


@op(kind="composite", inputs=("x1", "x2"), method=False, samples=_pairwise_samples)
def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``norm(x1 - x2 + eps, p)`` along the last dim."""
    rank = max(x1.dim(), x2.dim())
    if rank == 0:
        raise RuntimeError("pairwise_distance: input tensors must have at least one dim")
    return (x1 - x2 + eps).norm(p, dim=rank - 1, keepdim=keepdim)


# --------------------------------------------------------------------------- attention

def _sdpa_samples(make):
    def mask(*shape):
        return make(*shape) > 0
    return [Sample(make(2, 3, 4), make(2, 5, 4), make(2, 5, 3)),
            Sample(make(1, 2, 3, 4), make(1, 2, 3, 4), make(1, 2, 3, 2), is_causal=True),
            Sample(make(2, 3, 4), make(2, 5, 4), make(2, 5, 3), make(3, 5), scale=0.5),
            Sample(make(2, 3, 4), make(2, 5, 4), make(2, 5, 3),
                   mask(3, 5) | (make(3, 1) > -10)),
            Sample(make(4, 3, 2), make(2, 5, 2), make(2, 5, 3), enable_gqa=True),
            Sample(make(1, 2, 3, 4), make(1, 2, 5, 4), make(1, 2, 5, 4), make(3, 5),
                   is_causal=True)]


@op(kind="composite", inputs=("query", "key", "value", "attn_mask"), method=False,
    function=False, samples=_sdpa_samples)
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, *, scale=None, enable_gqa=False):
    """``softmax(query @ key.mT * scale + mask) @ value``, PyTorch's reference math: a
    composite of products and ``softmax``, whose derivatives and batching rules it uses.
    ``is_causal`` with an ``attn_mask`` applies both where PyTorch's CPU flash kernel
    takes the call; elsewhere PyTorch's math kernel refuses it."""
    if is_causal and attn_mask is not None and not _flash_takes(query, key, value, dropout_p,
                                                                enable_gqa):
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be "
                           "set when is_causal=True")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() < 2:
            raise RuntimeError(f"scaled_dot_product_attention: expected {name} to have at "
                               f"least 2 dimensions, got {t.dim()}")
    if not (query._dtype is key._dtype is value._dtype):
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got "
                           f"query.dtype: {query.dtype} key.dtype: {key.dtype} and "
                           f"value.dtype: {value.dtype} instead.")
    if attn_mask is not None and attn_mask._dtype not in (bool_, float32, query._dtype):
        raise RuntimeError(f"Expected attn_mask dtype to be bool or float or to match query "
                           f"dtype, but got attn_mask.dtype: "
                           f"{_CPP_TYPE_NAMES[attn_mask.dtype.name]} and  query.dtype: "
                           f"{_CPP_TYPE_NAMES[query.dtype.name]} instead.")
    if enable_gqa and query.dim() >= 3 and key.dim() >= 3:
        heads, kv_heads = query.shape[-3], key.shape[-3]
        if heads % kv_heads:
            raise RuntimeError("Number of heads in key and value must divide the number of "
                               "heads in query")
        key, value = _repeat_heads(key, heads // kv_heads), _repeat_heads(value,
                                                                          heads // kv_heads)
    length, source = query.shape[-2], key.shape[-2]
    if scale is None:
        # an empty head dim gives scores of 0 whatever the scale (PyTorch scales q and k)
        scale = 1.0 / math.sqrt(query.shape[-1]) if query.shape[-1] else 1.0
    scores = query.matmul(key.mT) * scale
    if is_causal:
        keep = query.new_ones((length, source), dtype=bool_).tril()
        scores = scores.masked_fill(keep.logical_not(), -math.inf)
    if attn_mask is None:
        weights = scores.softmax(-1)
    else:
        if attn_mask._dtype is bool_:
            scores = scores.masked_fill(attn_mask.logical_not(), -math.inf)
        else:
            scores = scores + attn_mask
        # PyTorch's CPU attention kernel gives a query whose every key is masked zero
        # weights (and zero gradients), where the softmax of a row of -inf is NaN
        blocked = (scores == -math.inf).all(-1, keepdim=True)
        weights = scores.masked_fill(blocked, 0.0).softmax(-1).masked_fill(blocked, 0.0)
    if dropout_p > 0.0:
        keep = call_by_name("rand_like", weights) >= dropout_p
        weights = weights * keep / (1.0 - dropout_p)
    return weights.matmul(value)


def _flash_takes(query, key, value, dropout_p, enable_gqa):
    """Whether PyTorch's CPU flash-attention kernel computes this call: 4-D inputs of one
    batch size and head size, as many key as value heads (and as query heads unless
    ``enable_gqa``), no dropout."""
    if not (query.dim() == key.dim() == value.dim() == 4) or dropout_p != 0.0:
        return False
    (n, heads, _, size), (kn, kheads, _, ksize) = query.shape, key.shape
    vn, vheads, _, vsize = value.shape
    return (n == kn == vn and size == ksize == vsize and kheads == vheads
            and (heads == kheads or enable_gqa))


def _repeat_heads(t, times):
    """Each head of ``t`` (..., H, S, D) ``times`` times in a row (repeat_interleave)."""
    shape = tuple(t.shape)
    return t.unsqueeze(-3).expand(*shape[:-2], times, *shape[-2:]).reshape(
        shape[:-3] + (shape[-3] * times,) + shape[-2:])


__all__ = ["einsum", "tensordot", "baddbmm", "kron", "cross", "cdist", "cosine_similarity",
           "pairwise_distance", "scaled_dot_product_attention"]
__all__ += ["bilinear", "pdist"]


# --------------------------------------------------------------------------- bilinear, pdist

# PyTorch's names of dtypes in bilinear's message (C++ type names)
_CPP_TYPE_NAMES = {"float32": "float", "float64": "double", "float16": "c10::Half",
                   "bfloat16": "c10::BFloat16", "int64": "long int", "int32": "int",
                   "int16": "short int", "int8": "signed char", "uint8": "unsigned char",
                   "bool": "bool"}


def _check_bilinear(input1, input2, weight, bias):
    """PyTorch's checks of ``bilinear``'s arguments, in its order."""
    tensors = [("input1", input1), ("input2", input2), ("weight", weight)]
    if bias is not None:
        tensors.append(("bias", bias))
    if len({t._dtype for _, t in tensors}) != 1:
        names = ", ".join(f"{name}: {_CPP_TYPE_NAMES.get(t.dtype.name, t.dtype.name)}"
                          for name, t in tensors)
        raise RuntimeError(f"All tensors must have the same dtype, got {names}")
    if input1.dim() != input2.dim():
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {input1.dim()} "
                           f"and {input2.dim()}")
    if input1.dim() == 0:
        raise IndexError("Dimension specified as -1 but tensor has no dimensions")
    for i, (a, b) in enumerate(zip(input1.shape[:-1], input2.shape[:-1])):
        if a != b:
            raise RuntimeError(f"bilinear(): input batch dimensions do not match at dim {i}: "
                               f"got {a} and {b}")
    for name, t, d in (("input1", input1, 1), ("input2", input2, 2)):
        if weight.dim() <= d:
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-weight.dim()}, {weight.dim() - 1}], but got {d})")
        if t.shape[-1] != weight.shape[d]:
            raise RuntimeError(f"bilinear(): {name} size does not match weight size: got "
                               f"{t.shape[-1]} but expected {weight.shape[d]}")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != weight.shape[0]):
        raise RuntimeError(f"bilinear(): bias size does not match weight size: got "
                           f"{bias.shape[0] if bias.dim() else 1} but expected "
                           f"{weight.shape[0]}")


def _bilinear_samples(make):
    return [Sample(make(2, 3), make(2, 4), make(5, 3, 4), make(5)),
            Sample(make(3), make(2), make(4, 3, 2)),
            Sample(make(2, 3, 2), make(2, 3, 4), make(3, 2, 4), make(3))]


@op(kind="composite", inputs=("input1", "input2", "weight", "bias"), method=False,
    samples=_bilinear_samples)
def bilinear(input1, input2, weight, bias=None):
    """``input1ᵀ weight[k] input2 + bias[k]`` for each output feature ``k``: one
    contraction (``einsum``) over both inputs' last dims, the batch dims kept."""
    _check_bilinear(input1, input2, weight, bias)
    out = einsum("...i,kij,...j->...k", input1, weight, input2)
    return out if bias is None else out + bias


def _pairs(rows, device):
    """The row indices (first, second) of the pairs ``i < j`` of ``rows`` rows, in
    row-major order, as int64 tensors."""
    return tuple(tensor(index, device=device) for index in np.triu_indices(rows, 1))


def _norms(diffs, p):
    """The ``p``-norms of the last dim of the array ``diffs``."""
    magnitudes = np.abs(diffs)
    if p == 0:
        return (magnitudes != 0).sum(-1).astype(diffs.dtype)
    if p == 1:
        return magnitudes.sum(-1)
    if p == 2:
        return np.sqrt((magnitudes * magnitudes).sum(-1))
    if math.isinf(p):
        return magnitudes.max(-1) if diffs.shape[-1] else magnitudes.sum(-1)
    return (magnitudes ** p).sum(-1) ** (1.0 / p)


def _pdist_kernel_samples(make):
    return [Sample(make(3, 4)), Sample(make(2, 4, 3), 1.0), Sample(make(5, 2), p=3.0),
            Sample(make(3, 2), float("inf")), Sample(make(4, 2), 0.0),
            Sample(make(4, 3).t(), 1.5), Sample(make(1, 3))]


@op(method=False, function=False, samples=_pdist_kernel_samples)
def _pdist(self, p=2.0):
    """The ``p``-norm distances between the pairs of rows ``i < j`` of each (N, M) matrix
    of ``self`` (..., N, M): (..., N (N - 1) / 2), pairs in row-major order."""
    a = self._array()
    first, second = (array_module(a).asarray(index)
                     for index in np.triu_indices(self.shape[-2], 1))
    compute = compute_numpy(self._dtype)
    diffs = a[..., first, :].astype(compute, copy=False) - a[..., second, :]
    return from_numpy_result(_norms(diffs, p), self._dtype)


@_pdist.def_derivative("self")
def _pdist(grad, self, p, result):
    # PyTorch's pdist_backward, per pair: 0 where the distance is 0; for p = inf the
    # gradient goes whole to each component equal to the maximum
    first, second = _pairs(self.shape[-2], self.device)
    diffs = self.index_select(-2, first) - self.index_select(-2, second)
    grad, dist = grad.unsqueeze(-1), result.unsqueeze(-1)
    if p == 0:
        per_pair = diffs * 0
    elif p == 1:
        per_pair = diffs.sign() * grad
    elif math.isinf(p):
        per_pair = diffs.sign() * (diffs.abs() == dist) * grad
    else:
        # zero distances and components replaced before dividing and raising to powers,
        # so that no inf or nan enters the graph
        at_zero = dist == 0
        safe_dist = dist.masked_fill(at_zero, 1.0)
        if p == 2:
            slope = diffs / safe_dist
        else:
            zero = diffs == 0
            powered = diffs.abs().masked_fill(zero, 1.0).pow(p - 1).masked_fill(zero, 0.0)
            slope = diffs.sign() * powered / safe_dist.pow(p - 1)
        per_pair = (slope * grad).masked_fill(at_zero, 0.0)
    zeros = self.new_zeros(self.shape)
    return zeros.index_add(-2, first, per_pair).index_add(-2, second, -per_pair)


@_pdist.def_batch_rule
def _pdist(op, level, args, kwargs):
    """The batch dim in front: the op takes leading dims already."""
    bound = op.bind(args, kwargs)
    self = bound["self"]
    return wrap(call(op, (to_front(self._value, self._bdim), bound["p"]), None), 0, level)


def _pdist_samples(make):
    return [Sample(make(4, 3)), Sample(make(5, 2), 1.0), Sample(make(3, 4), p=3.0),
            Sample(make(3, 2), float("inf")), Sample(make(4, 3).t()), Sample(make(1, 3))]


@op(kind="composite", method=False, samples=_pdist_samples)
def pdist(self, p=2.0):
    """The ``p``-norm distance between each pair of rows ``i < j`` of ``self`` (N, M),
    in row-major order of the pairs: (N (N - 1) / 2,)."""
    if self.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {self.dim()}D")
    if not self._dtype.is_floating_point:
        raise RuntimeError("pdist only supports floating-point dtypes")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    # PyTorch's kernel exists for float32 and float64, but fewer than 2 rows never reach it
    if self._dtype.name not in ("float32", "float64") and self.shape[0] > 1:
        raise NotImplementedError(f"\"pdist\" not implemented for '{_type_name(self._dtype)}'")
    return _pdist(self, p)


# --------------------------------------------------------------------------- more in-place

@op(kind="composite", inputs=("self", "batch1", "batch2"), function=False)
def baddbmm_(self, batch1, batch2, *, beta=1, alpha=1):
    require_one_dtype(self, batch1, batch2, "baddbmm_")
    return _checked_inplace(self, baddbmm(self, batch1, batch2, beta=beta, alpha=alpha))


__all__ += ["baddbmm_"]
