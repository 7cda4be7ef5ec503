"""``autograd.functional``: ``vjp``, ``jvp``, ``jacobian``, ``hessian``, ``vhp``, ``hvp`` of a
function of tensors, as PyTorch's (the older API; ``microtensor.func`` is the composable
one).

Inputs and results are a Tensor or a tuple of Tensors, mirroring what was given.  The
products are computed with ``autograd.grad`` on a graph recorded from fresh leaves, so
``create_graph=True`` keeps them differentiable with respect to the caller's inputs, and
``strict=True`` refuses a result that does not depend on an input (PyTorch's checks and
messages).  Forward-mode products use the double-backward trick, as PyTorch does; the
``"forward-mode"`` strategy of ``jacobian`` is ``microtensor.func.jacfwd``.
"""
from microtensor._C.tensor import TensorBase
from microtensor.autograd.engine import grad as autograd_grad
from microtensor.autograd.grad_mode import enable_grad, is_grad_enabled, set_grad_enabled
from microtensor.ops.factory import zeros_like

__all__ = ["vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"]


def _as_tuple(value, arg_name, fn_name):
    """``(was_tuple, value as a tuple)``, every element checked to be a Tensor."""
    is_tuple = isinstance(value, tuple)
    values = value if is_tuple else (value,)
    for i, el in enumerate(values):
        if not isinstance(el, TensorBase):
            where = f"the value at index {i}" if is_tuple else f"the given {arg_name}"
            raise TypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or a "
                            f"tuple of Tensors but {where} has type {type(el)}.")
    return is_tuple, values


def _unpack(res, to_unpack):
    """``res`` (tuples) shaped as the caller gave inputs/outputs: ``to_unpack`` is one flag,
    or ``(outer, inner)`` flags for a nested result (a Jacobian)."""
    if isinstance(to_unpack, tuple):
        if not to_unpack[1]:
            res = tuple(el[0] for el in res)
        if not to_unpack[0]:
            res = res[0]
    elif not to_unpack:
        res = res[0]
    return res


def _preprocess(inputs, create_graph, need_graph):
    """Fresh leaves for ``inputs`` (differentiable aliases with ``create_graph``, so that the
    result stays connected to the caller's graph)."""
    return tuple(inp.view_as(inp) if create_graph and inp.requires_grad
                 else inp.detach().requires_grad_(need_graph) for inp in inputs)


def _postprocess(values, create_graph):
    if isinstance(values[0], TensorBase):
        return values if create_graph else tuple(v.detach() for v in values)
    return tuple(_postprocess(v, create_graph) for v in values)


def _check_v(v, other, is_other_tuple, fn_name, create_graph, what):
    """The vector ``v`` of a product against ``other`` (the inputs or outputs), prepared;
    None is allowed when ``other`` is a single one-element tensor."""
    if v is None:
        if len(other) != 1 or other[0].nelement() != 1:
            raise RuntimeError(f"The vector v can only be None if the {what} a single Tensor "
                               "with a single element.")
        return None
    _, v = _as_tuple(v, "v", fn_name)
    v = _preprocess(v, create_graph, need_graph=False)
    if len(other) != len(v):
        if is_other_tuple:
            raise RuntimeError(f"v is a tuple of invalid length: should be {len(other)} but "
                               f"got {len(v)}.")
        raise RuntimeError("The given v should contain a single Tensor.")
    for i, (el_v, el_other) in enumerate(zip(v, other)):
        if el_v.size() != el_other.size():
            prefix = f"Entry {i} in " if is_other_tuple else ""
            raise RuntimeError(f"{prefix}v has invalid size: should be {el_other.size()} but "
                               f"got {el_v.size()}.")
    return v


_INPUT_V = "input to the user-provided function is"
_OUTPUT_V = "user-provided function returns"

_NOT_REQUIRING = {
    "outputs": "Output {i} of the user-provided function does not require gradients. The "
               "outputs must be computed in a differentiable manner from the input when "
               "running in strict mode.",
    "grad_inputs": "The gradient with respect to input {i} is independent of the inputs of the "
                   "user-provided function. This is not allowed in strict mode.",
    "jacobian": "While computing the hessian, found that the jacobian of the user-provided "
                "function with respect to input {i} is independent of the input. This is not "
                "allowed in strict mode. You should ensure that your function is twice "
                "differentiable and that the jacobian depends on the inputs (this would be "
                "violated by a linear function for example).",
    "hessian": "The hessian of the user-provided function with respect to input {i} is "
               "independent of the input. This is not allowed in strict mode. You should "
               "ensure that your function is thrice differentiable and that the hessian "
               "depends on the inputs.",
}


def _check_requires_grad(values, kind, strict):
    if not strict:
        return
    for i, value in enumerate(values):
        if value is None:
            raise RuntimeError(f"The output of the user-provided function is independent of "
                               f"input {i}. This is not allowed in strict mode.")
        if not value.requires_grad:
            raise RuntimeError(_NOT_REQUIRING[kind].format(i=i))


def _grad(outputs, inputs, grad_outputs=None, create_graph=False, retain_graph=None,
          is_grads_batched=False):
    """``autograd.grad`` over the outputs that require grad (None for every input when none
    does; None for an input they do not reach)."""
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o is not None and o.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    return autograd_grad([o for o, _ in pairs], inputs, [g for _, g in pairs],
                         allow_unused=True, create_graph=create_graph,
                         retain_graph=retain_graph, is_grads_batched=is_grads_batched)


_INDEPENDENT = {
    "back": "The output of the user-provided function is independent of input {i}. This is "
            "not allowed in strict mode.",
    "back_trick": "The gradient with respect to the input is independent of entry {i} in the "
                  "grad_outputs when using the double backward trick to compute forward mode "
                  "gradients. This is not allowed in strict mode.",
    "double_back": "The jacobian of the user-provided function is independent of input {i}. "
                   "This is not allowed in strict mode.",
    "double_back_trick": "The hessian of the user-provided function is independent of entry "
                         "{i} in the grad_jacobian. This is not allowed in strict mode as it "
                         "prevents from using the double backward trick to replace forward "
                         "mode AD.",
}


def _fill_in_zeros(grads, refs, strict, create_graph, stage):
    """Zeros (shaped as ``refs``) for the gradients that are None, or PyTorch's strict-mode
    error for the ``stage`` of the computation."""
    result = []
    for i, g in enumerate(grads):
        if g is None:
            if strict:
                raise RuntimeError(_INDEPENDENT[stage].format(i=i))
            g = zeros_like(refs[i])
        elif strict and create_graph and not g.requires_grad:
            what = "hessian" if "double" in stage else "jacobian"
            raise RuntimeError(f"The {what} of the user-provided function is independent of "
                               f"input {i}. This is not allowed in strict mode when "
                               "create_graph=True.")
        result.append(g)
    return tuple(result)


def _outputs(func, inputs, fn_name, strict):
    is_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function",
                                  fn_name)
    _check_requires_grad(outputs, "outputs", strict)
    return is_tuple, outputs


def _single_output(is_tuple, outputs, fn_name):
    if is_tuple or not isinstance(outputs[0], TensorBase):
        raise RuntimeError(f"The function given to {fn_name} should return a single Tensor")
    if outputs[0].nelement() != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {fn_name} should "
                           "contain a single element")


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T J)``: the vector-Jacobian product at ``inputs``."""
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _preprocess(inputs, create_graph, need_graph=True)
        is_outputs_tuple, outputs = _outputs(func, inputs, "vjp", strict)
        v = _check_v(v, outputs, is_outputs_tuple, "vjp", create_graph, _OUTPUT_V)
    with set_grad_enabled(create_graph or is_grad_enabled()):
        grads = _grad(outputs, inputs, v, create_graph=create_graph)
        result = _fill_in_zeros(grads, inputs, strict, create_graph, "back")
    return (_unpack(_postprocess(outputs, create_graph), is_outputs_tuple),
            _unpack(_postprocess(result, create_graph), is_inputs_tuple))


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), J v)``: the Jacobian-vector product at ``inputs`` (by the double
    backward trick: the vjp is linear in its vector, so its own vjp gives ``J v``)."""
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _preprocess(inputs, create_graph, need_graph=True)
        v = _check_v(v, inputs, is_inputs_tuple, "jvp", create_graph, _INPUT_V)
        is_outputs_tuple, outputs = _outputs(func, inputs, "jvp", strict)
        grad_outputs = tuple(zeros_like(out, requires_grad=True) for out in outputs)
        grad_inputs = _grad(outputs, inputs, grad_outputs, create_graph=True)
        _check_requires_grad(grad_inputs, "grad_inputs", strict)
    with set_grad_enabled(create_graph or is_grad_enabled()):
        grads = _grad(grad_inputs, grad_outputs, v, create_graph=create_graph)
        result = _fill_in_zeros(grads, outputs, strict, create_graph, "back_trick")
    return (_unpack(_postprocess(outputs, create_graph), is_outputs_tuple),
            _unpack(_postprocess(result, create_graph), is_outputs_tuple))


def _standard_basis(tensors, numels):
    """For each tensor, its rows of the identity over all elements: ``[total, numel]``."""
    total = sum(numels)
    chunks = tuple(t.new_zeros(total, n) for t, n in zip(tensors, numels))
    start = 0
    for chunk, n in zip(chunks, numels):
        chunk.diagonal(start).fill_(1)
        start -= n
    return chunks


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    """The Jacobian of ``func`` at ``inputs``: for a tuple of outputs and a tuple of inputs,
    ``jac[i][j]`` has shape ``outputs[i].shape + inputs[j].shape`` (a Tensor where a single
    Tensor was given).  ``vectorize`` computes all rows in one batched backward pass
    (``is_grads_batched``) instead of one pass per output element."""
    if strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or '
                             '"reverse-mode". Hint: If your function has more outputs than '
                             'inputs, "forward-mode" tends to be more performant. Otherwise, '
                             'prefer to use "reverse-mode".')
    if strategy == "forward-mode":
        return _jacobian_forward(func, inputs, create_graph, strict, vectorize)
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _preprocess(inputs, create_graph, need_graph=True)
        is_outputs_tuple, outputs = _outputs(func, inputs, "jacobian", strict)
        if vectorize:
            if strict:
                raise RuntimeError("microtensor.autograd.functional.jacobian: `strict=True` and "
                                   "`vectorized=True` are not supported together. Please "
                                   "either set `strict=False` or `vectorize=False`.")
            jac = _vectorized_jacobian(outputs, inputs, create_graph)
        else:
            jac = tuple(_output_jacobian(i, out, inputs, create_graph, strict)
                        for i, out in enumerate(outputs))
        return _unpack(_postprocess(jac, create_graph), (is_outputs_tuple, is_inputs_tuple))


def _vectorized_jacobian(outputs, inputs, create_graph):
    numels = tuple(o.numel() for o in outputs)
    basis = _standard_basis(outputs, numels)
    flat = tuple(o.reshape(-1) for o in outputs)
    rows = list(_grad(flat, inputs, basis, create_graph=create_graph, is_grads_batched=True))
    for k, row in enumerate(rows):
        if row is None:
            rows[k] = zeros_like(inputs[k]).expand((sum(numels),) + tuple(inputs[k].shape))
    per_input = [[jac.view(tuple(o.shape) + tuple(inp.shape))
                  for jac, o in zip(row.split(numels, dim=0), outputs)]
                 for row, inp in zip(rows, inputs)]
    return tuple(zip(*per_input))


def _output_jacobian(i, out, inputs, create_graph, strict):
    """The Jacobian of output ``i`` with respect to each input, one backward pass per
    element of ``out``."""
    from microtensor.ops.shape import stack
    rows = tuple([] for _ in inputs)
    for j in range(out.nelement()):
        vj = _grad((out.reshape(-1)[j],), inputs, retain_graph=True, create_graph=create_graph)
        for k, (row, g, inp) in enumerate(zip(rows, vj, inputs)):
            if g is None:
                if strict:
                    raise RuntimeError(f"Output {i} of the user-provided function is "
                                       f"independent of input {k}. This is not allowed in "
                                       "strict mode.")
                g = zeros_like(inp)
            elif strict and create_graph and not g.requires_grad:
                raise RuntimeError(f"The jacobian of the user-provided function is independent "
                                   f"of input {i}. This is not allowed in strict mode when "
                                   "create_graph=True.")
            row.append(g)
    return tuple(stack(row, dim=0).view(tuple(out.size()) + tuple(inputs[k].size()))
                 for k, row in enumerate(rows))


def _jacobian_forward(func, inputs, create_graph, strict, vectorize):
    if create_graph:
        raise NotImplementedError("microtensor.autograd.functional.jacobian: `create_graph=True` "
                                  'and `strategy="forward-mode"` are not supported together (yet). '
                                  'Please either set `create_graph=False` or '
                                  '`strategy="reverse-mode"`.')
    if strict:
        raise RuntimeError('microtensor.autograd.functional.jacobian: `strict=True` and '
                           '`strategy="forward-mode"` are not supported together (yet). Please '
                           'either set `strict=False` or `strategy="reverse-mode"`.')
    if not vectorize:
        raise NotImplementedError("Computing Jacobian using forward-AD or forward-over-reverse "
                                  "Hessian isonly implemented for `vectorize=True`.")
    from microtensor.func import jacfwd
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
    shape = {}

    def as_tuple_output(*args):
        is_tuple, outputs = _as_tuple(func(*args), "outputs", None)
        shape["tuple"] = is_tuple
        return outputs
    jac = jacfwd(as_tuple_output, argnums=tuple(range(len(inputs))))(*inputs)
    # lists, not tuples, as PyTorch's forward-mode result
    jac = [[block.detach() for block in row] for row in jac]
    return _unpack(jac, (shape["tuple"], is_inputs_tuple))


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    """The Hessian of a scalar ``func`` at ``inputs``: ``hess[i][j]`` has shape
    ``inputs[i].shape + inputs[j].shape`` (the Jacobian of the gradient)."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or '
                             '"reverse-mode".')

    def single_output(*inp):
        out = func(*inp)
        is_tuple, outputs = _as_tuple(out, "outputs of the user-provided function", "hessian")
        _check_requires_grad(outputs, "outputs", strict)
        _single_output(is_tuple, outputs, "hessian")
        return out.squeeze()

    def jac_func(*inp):
        if outer_jacobian_strategy == "forward-mode":
            inp = tuple(t.requires_grad_(True) for t in inp)
        jac = jacobian(single_output, inp, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict)
        return jac

    res = jacobian(jac_func, inputs, create_graph=create_graph, strict=strict,
                   vectorize=vectorize, strategy=outer_jacobian_strategy)
    return _unpack(res, (is_inputs_tuple, is_inputs_tuple))


def _gradient_of_scalar(func, inputs, v, create_graph, strict, fn_name):
    """Shared start of ``vhp`` and ``hvp``: leaves, checked ``v``, the scalar output and
    its gradient (with graph)."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", fn_name)
    inputs = _preprocess(inputs, create_graph, need_graph=True)
    v = _check_v(v, inputs, is_inputs_tuple, fn_name, create_graph, _INPUT_V)
    is_outputs_tuple, outputs = _outputs(func, inputs, fn_name, strict)
    _single_output(is_outputs_tuple, outputs, fn_name)
    jac = _grad(outputs, inputs, create_graph=True)
    _check_requires_grad(jac, "jacobian", strict)
    return is_inputs_tuple, inputs, v, is_outputs_tuple, outputs, jac


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T H)``: the vector-Hessian product of a scalar function."""
    with enable_grad():
        is_inputs_tuple, inputs, v, is_outputs_tuple, outputs, jac = _gradient_of_scalar(
            func, inputs, v, create_graph, strict, "vhp")
    with set_grad_enabled(create_graph or is_grad_enabled()):
        grads = _grad(jac, inputs, v, create_graph=create_graph)
        result = _fill_in_zeros(grads, inputs, strict, create_graph, "double_back")
    return (_unpack(_postprocess(outputs, create_graph), is_outputs_tuple),
            _unpack(_postprocess(result, create_graph), is_inputs_tuple))


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), H v)``: the Hessian-vector product of a scalar function (by the
    double backward trick, as ``jvp``)."""
    with enable_grad():
        is_inputs_tuple, inputs, v, is_outputs_tuple, outputs, jac = _gradient_of_scalar(
            func, inputs, v, create_graph, strict, "hvp")
        grad_jac = tuple(zeros_like(inp, requires_grad=True) for inp in inputs)
        double_back = _grad(jac, inputs, grad_jac, create_graph=True)
        _check_requires_grad(jac, "hessian", strict)
    with set_grad_enabled(create_graph or is_grad_enabled()):
        grads = _grad(double_back, grad_jac, v, create_graph=create_graph)
        result = _fill_in_zeros(grads, inputs, strict, create_graph, "double_back_trick")
    return (_unpack(_postprocess(outputs, create_graph), is_outputs_tuple),
            _unpack(_postprocess(result, create_graph), is_inputs_tuple))
