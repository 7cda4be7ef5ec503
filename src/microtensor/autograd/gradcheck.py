"""``gradcheck`` and ``gradgradcheck``: analytical gradients against finite differences.

``gradcheck`` compares, for every differentiable input and output, the Jacobian that
backward computes (one ``autograd.grad`` per output element) with central differences
``(f(x + eps) - f(x - eps)) / 2 eps`` taken by perturbing each input element in place
(through NumPy, so no version counter moves).  ``fast_mode`` compares ``v^T J u`` for
random ``u`` and ``v`` instead.  ``gradgradcheck`` runs ``gradcheck`` on the function
that computes the first gradient with ``create_graph=True``.  Use float64 (or complex128)
inputs.  Complex inputs and outputs are checked as pairs of reals (``_realified``), which
checks complex gradients in PyTorch's convention.
"""
import warnings

import numpy as np

from microtensor._C.tensor import TensorBase, from_array
from microtensor.autograd import engine
from microtensor.ops.loops import may_overlap


class GradcheckError(RuntimeError):
    """A gradient check failed (raised when ``raise_exception=True``)."""


def _as_tuple(x):
    if isinstance(x, tuple):
        return x
    if isinstance(x, list):
        return tuple(x)
    return (x,)


def _float_outputs(outputs):
    return [o for o in _as_tuple(outputs)
            if isinstance(o, TensorBase) and o._dtype.kind >= 2]


def _realified(func, inputs):
    """``func`` and ``inputs`` with complex tensors seen as (real, imaginary) pairs: each
    complex input that requires grad becomes a float leaf holding its ``view_as_real``
    values, which ``func`` receives through ``view_as_complex``, and complex outputs come
    back as ``view_as_real``.  The Jacobians of the pairs are what PyTorch's convention
    makes complex gradients (a real loss's gradient is ``dL/dx + i dL/dy``)."""
    from microtensor.ops.complex import view_as_complex, view_as_real
    pairs = {i: view_as_real(x.detach()).clone().requires_grad_()
             for i, x in enumerate(inputs)
             if isinstance(x, TensorBase) and x._dtype.is_complex and x.requires_grad}

    def realified(*args):
        args = tuple(view_as_complex(a) if i in pairs else a for i, a in enumerate(args))
        return tuple(view_as_real(o) if isinstance(o, TensorBase) and o._dtype.is_complex
                     else o for o in _as_tuple(func(*args)))
    return realified, tuple(pairs.get(i, x) for i, x in enumerate(inputs))


def _values(t):
    return np.array(t.detach()._array(), dtype=np.float64)


def _check_inputs(inputs):
    diff_inputs = [x for x in inputs if isinstance(x, TensorBase) and x.requires_grad]
    if not diff_inputs:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but "
                         "none of the them have requires_grad=True.")
    for i, x in enumerate(inputs):
        if isinstance(x, TensorBase) and x.requires_grad:
            if x._dtype.name not in ("float64", "complex128"):
                warnings.warn(f"Input #{i} requires gradient and is not a double precision "
                              "floating point or complex. This check will likely fail if all "
                              "the inputs are not of double precision floating point or "
                              "complex.")
            if may_overlap(x._sizes, x._strides):
                raise RuntimeError(f"The {i}th input has a dimension with stride 0 (or "
                                   "overlapping memory). gradcheck only supports inputs that are "
                                   "non-overlapping to be able to compute the numerical gradients "
                                   "correctly. You should call .contiguous on the input before "
                                   "passing it to gradcheck.")
    return diff_inputs


def _one_hot_like(t, index):
    values = np.zeros(t._numel, dtype=t._dtype.np)
    values[index] = 1
    return from_array(values.reshape(t._sizes))


# ------------------------------------------------------------------ Jacobians

def _numerical_columns(func, inputs, x, eps, direction=None):
    """For each output: rows d out / d x[k] (or one row along ``direction``)."""
    memory = x.detach()._array()
    positions = [()] if direction is not None else list(np.ndindex(*x._sizes))
    if not positions:
        return [np.zeros((0, o._numel)) for o in _float_outputs(func(*inputs))]
    columns = None
    for k, index in enumerate(positions):
        original = memory.copy() if direction is not None else memory[index].copy()
        results = []
        for step in (-eps, eps):
            if direction is None:
                memory[index] = original + step
            else:
                memory[...] = original + step * direction
            results.append([_values(o).reshape(-1) for o in _float_outputs(func(*inputs))])
        if direction is None:
            memory[index] = original
        else:
            memory[...] = original
        if columns is None:
            columns = [np.zeros((len(positions), r.size)) for r in results[0]]
        for column, minus, plus in zip(columns, *results):
            column[k] = (plus - minus) / (2 * eps)
    return columns


def _analytical_rows(outputs, diff_inputs, out, index, grad_output=None):
    """The gradients of ``outputs[out]`` (weighted by a one-hot at ``index`` or by
    ``grad_output``) with respect to each differentiable input, as flat arrays."""
    o = outputs[out]
    seed = _one_hot_like(o, index) if grad_output is None else grad_output
    grads = engine.grad(o, diff_inputs, seed, retain_graph=True, allow_unused=True)
    rows = []
    for x, g in zip(diff_inputs, grads):
        if g is None:
            rows.append(np.zeros(x._numel))
            continue
        if g._sizes != x._sizes:
            raise GradcheckError(f"Analytical gradient has incorrect size: got "
                                 f"{list(g._sizes)}, expected {list(x._sizes)}")
        if g._dtype is not x._dtype:
            raise GradcheckError(f"Gradient has dtype mismatch: got {g._dtype.name}, expected "
                                 f"{x._dtype.name}")
        rows.append(_values(g).reshape(-1))
    return rows


def _mismatch(out, inp, numerical, analytical):
    return GradcheckError(f"Jacobian mismatch for output {out} with respect to input {inp},\n"
                          f"numerical:{numerical}\nanalytical:{analytical}\n")


def _slow_check(func, inputs, outputs, diff_inputs, eps, atol, rtol, nondet_tol):
    numerical = [_numerical_columns(func, inputs, x, eps) for x in diff_inputs]
    # PyTorch's rule: outputs that do not require grad (saved statistics, a permutation)
    # are checked for a zero numerical gradient only when no output requires grad
    any_differentiable = any(o.requires_grad for o in outputs)
    for out, o in enumerate(outputs):
        if not o.requires_grad:
            if any_differentiable:
                continue
            for i, columns in enumerate(numerical):
                if not np.allclose(columns[out], 0, rtol=rtol, atol=atol):
                    raise GradcheckError("Numerical gradient for function expected to be zero")
            continue
        analytical = [np.zeros((x._numel, o._numel)) for x in diff_inputs]
        for j in range(o._numel):
            for i, row in enumerate(_analytical_rows(outputs, diff_inputs, out, j)):
                analytical[i][:, j] = row
        for i, x in enumerate(diff_inputs):
            if not np.allclose(analytical[i], numerical[i][out], rtol=rtol, atol=atol):
                raise _mismatch(out, i, numerical[i][out], analytical[i])
        if o._numel:
            again = _analytical_rows(outputs, diff_inputs, out, 0)
            for i, row in enumerate(again):
                if np.abs(row - analytical[i][:, 0]).max(initial=0) > nondet_tol:
                    raise GradcheckError(
                        "Backward is not reentrant, i.e., running backward with same input and "
                        "grad_output multiple times gives different values, although analytical "
                        "gradient matches numerical gradient.The tolerance for nondeterminism "
                        f"was {nondet_tol}.")


def _fast_check(func, inputs, outputs, diff_inputs, eps, atol, rtol, rng):
    directions = [rng.standard_normal(x._sizes) for x in diff_inputs]
    numerical = [_numerical_columns(func, inputs, x, eps, u)
                 for x, u in zip(diff_inputs, directions)]
    for out, o in enumerate(outputs):
        v = rng.standard_normal(o._sizes)
        if not o.requires_grad:
            continue
        rows = _analytical_rows(outputs, diff_inputs, out, None,
                                from_array(v.astype(o._dtype.np)))
        for i, u in enumerate(directions):
            n = float(numerical[i][out][0] @ v.reshape(-1))
            a = float(rows[i] @ u.reshape(-1))
            if not np.isclose(a, n, rtol=rtol, atol=atol):
                raise _mismatch(out, i, n, a)


def _batched_check(outputs, diff_inputs, atol, rtol, rng):
    for out, o in enumerate(outputs):
        if not o.requires_grad:
            continue
        seeds = rng.standard_normal((2,) + tuple(o._sizes)).astype(o._dtype.np)
        batched = engine.grad(o, diff_inputs, from_array(seeds), retain_graph=True,
                              allow_unused=True, is_grads_batched=True)
        for b in range(2):
            expected = _analytical_rows(outputs, diff_inputs, out, None, from_array(seeds[b]))
            for i, g in enumerate(batched):
                got = np.zeros(diff_inputs[i]._numel) if g is None else \
                    _values(g)[b].reshape(-1)
                if not np.allclose(got, expected[i], rtol=rtol, atol=atol):
                    raise GradcheckError(f"For output {out} and input {i}:\nbatched grad:{got}\n"
                                         f"expected:{expected[i]}")


# ------------------------------------------------------------------ public API

def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
              nondet_tol=0.0, check_undefined_grad=True, check_grad_dtypes=False,
              check_batched_grad=False, check_batched_forward_grad=False,
              check_forward_ad=False, check_backward_ad=True, fast_mode=False, masked=None):
    """Check ``func``'s gradients at ``inputs`` against finite differences.

    Returns True, or on failure raises ``GradcheckError`` (``raise_exception=True``) or
    returns False.  ``check_undefined_grad``, ``check_grad_dtypes`` (dtypes are always
    checked) and ``masked`` are accepted for compatibility.
    """
    if check_forward_ad or check_batched_forward_grad:
        raise NotImplementedError("gradcheck: microtensor has no forward-mode AD "
                                  "(check_forward_ad / check_batched_forward_grad)")
    inputs = _as_tuple(inputs)
    try:
        diff_inputs = _check_inputs(inputs)
        func, inputs = _realified(func, inputs)
        diff_inputs = [x for x in inputs if isinstance(x, TensorBase) and x.requires_grad]
        if check_backward_ad:
            outputs = _float_outputs(func(*inputs))
            rng = np.random.default_rng(0)
            if fast_mode:
                _fast_check(func, inputs, outputs, diff_inputs, eps, atol, rtol, rng)
            else:
                _slow_check(func, inputs, outputs, diff_inputs, eps, atol, rtol, nondet_tol)
            if check_batched_grad:
                _batched_check(outputs, diff_inputs, atol, rtol, rng)
    except GradcheckError:
        if raise_exception:
            raise
        return False
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True, nondet_tol=0.0,
                  check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
                  check_fwd_over_rev=False, check_rev_over_rev=True, fast_mode=False,
                  masked=False):
    """Check second derivatives: ``gradcheck`` of ``(inputs, grad_outputs) ->
    autograd.grad(func(inputs), inputs, grad_outputs, create_graph=True)``.

    ``grad_outputs`` default to random tensors that require grad (non-contiguous ones with
    ``gen_non_contig_grad_outputs``).
    """
    if check_fwd_over_rev:
        raise NotImplementedError("gradgradcheck: microtensor has no forward-mode AD "
                                  "(check_fwd_over_rev)")
    inputs = _as_tuple(inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(1)
        grad_outputs = tuple(_random_like(o, rng, gen_non_contig_grad_outputs)
                             for o in _float_outputs(func(*inputs)) if o.requires_grad)
    grad_outputs = _as_tuple(grad_outputs)
    count = len(inputs)

    def first_gradients(*args):
        outputs = [o for o in _float_outputs(func(*args[:count])) if o.requires_grad]
        diff_inputs = [x for x in args[:count] if isinstance(x, TensorBase) and x.requires_grad]
        grads = engine.grad(outputs, diff_inputs, args[count:], create_graph=True,
                            allow_unused=True)
        return tuple(g for g in grads if g is not None)

    if not check_rev_over_rev:
        return True
    return gradcheck(first_gradients, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, nondet_tol=nondet_tol,
                     check_batched_grad=check_batched_grad, fast_mode=fast_mode)


def _random_like(t, rng, noncontiguous):
    values = rng.standard_normal(tuple(t._sizes))
    if t._dtype.is_complex:
        values = values + 1j * rng.standard_normal(tuple(t._sizes))
    values = values.astype(t._dtype.np)
    if noncontiguous and values.ndim:
        spaced = np.zeros(values.shape[:-1] + (2 * values.shape[-1],), dtype=values.dtype)
        spaced[..., ::2] = values
        g = from_array(spaced)[..., ::2]
    else:
        g = from_array(values)
    return g.requires_grad_()


__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]
