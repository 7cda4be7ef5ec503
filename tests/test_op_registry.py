"""Every op in the registry that declares ``samples``, run through the same checks.

For each (op, sample): the forward against PyTorch (values, shape, dtype) and against an
obvious NumPy equivalent; gradcheck and gradgradcheck in float64 for differentiable ops;
for in-place ops, the op applied to a view of a non-leaf against a clone-based reference
written out of place.  Ops added to the registry with samples are picked up
automatically; ``test_every_op_has_samples`` keeps new ops from skipping all this.
"""
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor.testing import differentiable_places
from microtensor._C.tensor import TensorBase
from microtensor.autograd import gradcheck, gradgradcheck
from microtensor.ops import REGISTRY
from microtensor.testing import samples_of

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")

# Non-composite ops that have no samples yet.  Adding an op without samples fails
# test_every_op_has_samples; give it samples instead of growing this list.
OPS_WITHOUT_SAMPLES = {"_max_dim", "_min_dim", "_norm2", "_std", "_var"}

# Decompositions whose vectors are defined up to sign or phase (LAPACK builds may pick
# either): shapes and dtypes compared here, values through invariants in
# tests/test_linalg_ops.py and tests/test_complex_linalg.py.
GAUGE_DEPENDENT = {"linalg_eigh", "linalg_qr", "linalg_svd", "svd", "linalg_eig"}


# ------------------------------------------------------------------ collecting samples

_samples = samples_of   # the same values every time they are asked for


def _cases():
    cases = []
    for name in sorted(REGISTRY):
        if REGISTRY[name].samples is not None:
            cases.extend(pytest.param(name, i, id=f"{name}-{i}")
                         for i in range(len(_samples(name))))
    return cases


CASES = _cases()


def _sample(name, index):
    s = _samples(name)[index]
    return list(s.args), dict(s.kwargs)


def _is_inplace(op):
    return op.kind == "inplace"


def _differentiable(op):
    # composites are differentiable through the ops they are written with
    return op.differentiable and (op.kind == "composite" or op.derivative is not None or (
        op.inplace_of is not None and op.inplace_of.derivative is not None))


# ------------------------------------------------------------------ PyTorch side

def _to_torch(x):
    if isinstance(x, TensorBase):
        return torch.from_numpy(np.array(x.detach()._array()))
    if isinstance(x, mt.dtype):
        return getattr(torch, x.name)
    if isinstance(x, mt.device):
        return torch.device(str(x))
    if isinstance(x, mt.memory_format):
        return {mt.contiguous_format: torch.contiguous_format,
                mt.preserve_format: torch.preserve_format,
                mt.channels_last: torch.channels_last,
                mt.channels_last_3d: torch.channels_last_3d}[x]
    if isinstance(x, (list, tuple)):
        return type(x)(_to_torch(v) for v in x)
    if isinstance(x, dict):   # keyword arguments
        return {k: _to_torch(v) for k, v in x.items()}
    return x


def _nll_loss_backward(grad, self_shape, target, weight=None, reduction="mean",
                       ignore_index=-100):
    """PyTorch's nll_loss gradient, through its autograd (aten's op takes other arguments)."""
    x = torch.zeros(self_shape, dtype=grad.dtype, requires_grad=True)
    loss = torch.nn.functional.nll_loss(x, target, weight, reduction=reduction,
                                        ignore_index=ignore_index)
    return torch.autograd.grad(loss, x, grad)[0]


# Ops compared with torch.nn.functional's function of the same name: torch's own ops of
# these names read ``reduction`` as an int enum (torch.hinge_embedding_loss reduces
# nothing by default), or torch has none
NN_FUNCTIONAL = {"softshrink", "soft_margin_loss", "multilabel_soft_margin_loss",
                 "hinge_embedding_loss", "multi_margin_loss", "multilabel_margin_loss",
                 "triplet_margin_with_distance_loss"}


def _torch_callable(op):
    name = op.name
    if name in NN_FUNCTIONAL:
        return getattr(torch.nn.functional, name)
    if name == "nll_loss":
        return torch.nn.functional.nll_loss
    if name == "linear":
        return torch.nn.functional.linear
    if name == "_log_softmax_backward_data":
        return lambda grad, output, dim: torch._log_softmax_backward_data(grad, output, dim,
                                                                          grad.dtype)
    if name == "nll_loss_backward":
        return _nll_loss_backward
    if not op.function or _is_inplace(op):
        method = getattr(torch.Tensor, name, None)
    else:
        method = getattr(torch, name, None) or getattr(torch.Tensor, name, None)
    if method is None:
        method = getattr(torch.ops.aten, name, None)
    return method


def _dtype_name(t):
    return str(t.dtype).split(".")[-1] if torch is not None and isinstance(t, torch.Tensor) \
        else t.dtype.name


def _assert_matches_torch(ours, theirs, compare_values, where="output", rtol=1e-6, atol=1e-7):
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, TensorBase), f"{where}: expected a tensor, got {ours!r}"
        assert tuple(ours.shape) == tuple(theirs.shape), f"{where}: shape"
        assert _dtype_name(ours) == _dtype_name(theirs), f"{where}: dtype"
        if compare_values:
            np.testing.assert_allclose(np.asarray(ours.detach()._array()),
                                       theirs.detach().resolve_conj().numpy(), rtol=rtol,
                                       atol=atol,
                                       equal_nan=True, err_msg=where)
    elif isinstance(theirs, (tuple, list)):
        assert len(ours) == len(theirs), f"{where}: number of outputs"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _assert_matches_torch(a, b, compare_values, f"{where}[{i}]", rtol, atol)
    elif compare_values:
        assert ours == theirs, where


@needs_torch
@pytest.mark.parametrize("name, index", CASES)
def test_forward_matches_torch(name, index):
    op = REGISTRY[name]
    fn = _torch_callable(op)
    if fn is None:
        pytest.skip(f"PyTorch has no {name}")
    args, kwargs = _sample(name, index)
    torch_args, torch_kwargs = _to_torch(args), _to_torch(kwargs)
    try:
        expected = fn(*torch_args, **torch_kwargs)
    except (TypeError, AttributeError, NotImplementedError) as e:
        pytest.skip(f"PyTorch's {name} takes other arguments: {e}")
    except RuntimeError as e:
        if "schema" in str(e):      # a torch.ops.aten overload with another signature
            pytest.skip(f"PyTorch's {name} takes other arguments: {e}")
        with pytest.raises(RuntimeError):
            op(*args, **kwargs)
        return
    result = op(*args, **kwargs)
    compare_values = not op.random and "empty" not in name and name not in GAUGE_DEPENDENT
    _assert_matches_torch(result, expected, compare_values)
    if _is_inplace(op):
        assert result is args[0], "an in-place op returns self"
        _assert_matches_torch(args[0], torch_args[0], compare_values, "modified self")


# ------------------------------------------------------------------ NumPy side

NUMPY_EQUIVALENTS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "remainder": np.remainder, "fmod": np.fmod, "pow": np.power, "neg": np.negative,
    "exp": np.exp, "log": np.log, "log1p": np.log1p, "expm1": np.expm1, "log2": np.log2,
    "log10": np.log10, "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh,
    "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sqrt": np.sqrt, "abs": np.abs, "sign": np.sign, "floor": np.floor,
    "ceil": np.ceil, "round": np.round, "trunc": np.trunc,
    "reciprocal": lambda a: np.divide(1.0, a),
    "maximum": np.maximum, "minimum": np.minimum, "eq": np.equal, "ne": np.not_equal,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor, "logical_not": np.logical_not,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor, "bitwise_not": np.invert, "isnan": np.isnan,
    "isinf": np.isinf, "isfinite": np.isfinite, "where": np.where,
    "transpose": np.swapaxes, "diagonal": np.diagonal, "clone": np.copy,
    "relu": lambda a: np.maximum(a, 0), "sigmoid": lambda a: 1 / (1 + np.exp(-a)),
}


def _numpy_cases():
    return [case for case in CASES if case.values[0] in NUMPY_EQUIVALENTS]


@pytest.mark.parametrize("name, index", _numpy_cases())
def test_forward_matches_numpy(name, index):
    args, kwargs = _sample(name, index)
    if kwargs:
        pytest.skip("keyword arguments have no NumPy spelling")
    expected = NUMPY_EQUIVALENTS[name](*[np.array(a.detach()._array())
                                         if isinstance(a, TensorBase) else a for a in args])
    result = REGISTRY[name](*args)
    assert tuple(result.shape) == np.shape(expected)
    np.testing.assert_allclose(np.asarray(result._array(), dtype=np.float64),
                               np.asarray(expected, dtype=np.float64), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------ gradients

# Ops that read one triangle of an input: their gradient is PyTorch's (Hermitian for a
# Hermitian input, the whole factor's for a triangular one), the derivative along the
# inputs they are meant for, so gradcheck gives them such a function of its input, as
# PyTorch's OpInfos do (tests/test_grad_vs_torch.py compares the gradient with PyTorch's):
# op -> (argument position, the function)
def _hermitian(t):
    return 0.5 * (t + t.mH)


READS_ONE_TRIANGLE = {"cholesky": (0, _hermitian), "linalg_cholesky": (0, _hermitian),
                      "linalg_cholesky_ex": (0, _hermitian), "linalg_eigh": (0, _hermitian),
                      "linalg_pinv": (0, _hermitian),    # with hermitian=True
                      "cholesky_solve": (1, "triangular"), "cholesky_inverse": (0, "triangular")}


def _input_function(op, args, kwargs, place):
    """The function of gradcheck's input that ``place`` of ``op`` gets (None: the input)."""
    position, function = READS_ONE_TRIANGLE.get(op.name, (None, None))
    container, key = place
    if container is not args or key != position:
        return None
    bound = op.bind(args, kwargs)
    if function == "triangular":
        return REGISTRY["triu"] if bound["upper"] else REGISTRY["tril"]
    return function if bound.get("hermitian", True) else None


def _as_function(op, args, kwargs, places):
    """``f(*tensors)``: the op with the tensors at ``places`` substituted (through
    ``_input_function``); an in-place op runs on a clone so that its input stays a leaf."""
    functions = [_input_function(op, args, kwargs, place) for place in places]

    def f(*tensors):
        for (container, key), function, t in zip(places, functions, tensors):
            container[key] = t if function is None else function(t)
        call_args = list(args)
        if _is_inplace(op):
            call_args[0] = call_args[0].clone()
        return op(*call_args, **kwargs)
    return f


def _gradcheck_setup(name, index):
    op = REGISTRY[name]
    if not _differentiable(op):
        pytest.skip(f"{name} is not differentiable")
    args, kwargs = _sample(name, index)
    places = differentiable_places(op, args, kwargs)
    if not places:
        pytest.skip("no float64 input to differentiate")
    # a clone: expanded (overlapping) samples become dense, as gradcheck requires
    inputs = tuple(container[key].detach().clone().requires_grad_()
                   for container, key in places)
    f = _as_function(op, args, kwargs, places)
    if name in PHASE_INVARIANT_OUTPUTS:
        return (lambda *tensors: PHASE_INVARIANT_OUTPUTS[name](*f(*tensors))), inputs
    return f, inputs


# Complex eigenvectors and singular vectors are defined up to a phase, and a loss that
# depends on it has no gradient (PyTorch's error): checked through their absolute values,
# as PyTorch's OpInfo does
def _phase_free(*outputs, vectors):
    return tuple(o.abs() if i in vectors and o.is_complex() else o
                 for i, o in enumerate(outputs))


PHASE_INVARIANT_OUTPUTS = {
    "linalg_eig": lambda *out: _phase_free(*out, vectors=(1,)),
    "linalg_eigh": lambda *out: _phase_free(*out, vectors=(1,)),
    "linalg_svd": lambda *out: _phase_free(*out, vectors=(0, 2)),
    "svd": lambda *out: _phase_free(*out, vectors=(0, 2))}


# PyTorch's CTC gradient adds exp(log_probs) to the derivative (log_probs are taken to come
# from log_softmax): tests/test_grid_ctc.py compares it with PyTorch's and checks it through
# log_softmax, where it is the derivative; poisson's zero gradient is PyTorch's convention
# (tests/test_sampling.py checks it)
CONVENTIONAL_GRADIENTS = {"_ctc_nll", "ctc_loss", "poisson"}


def _gradient_by_convention(name, index):
    """PyTorch's embedding gives the padding row no gradient and divides by frequencies:
    conventions, not derivatives (tests/test_embedding.py compares them with PyTorch)."""
    if name in CONVENTIONAL_GRADIENTS:
        return True
    if name != "embedding":
        return False
    bound = REGISTRY[name].bind(*_sample(name, index))
    return bound["padding_idx"] >= 0 or bound["scale_grad_by_freq"]


@pytest.mark.parametrize("name, index", CASES)
def test_gradcheck(name, index):
    if _gradient_by_convention(name, index):
        pytest.skip("the gradient is a convention here, not the derivative")
    f, inputs = _gradcheck_setup(name, index)
    assert gradcheck(f, inputs)


@pytest.mark.parametrize("name, index", CASES)
def test_gradgradcheck(name, index):
    f, inputs = _gradcheck_setup(name, index)
    assert gradgradcheck(f, inputs)


def _several_input_cases():
    return [case for case in CASES if _differentiable(REGISTRY[case.values[0]])
            and REGISTRY[case.values[0]].kind != "composite"
            and len(differentiable_places(REGISTRY[case.values[0]],
                                          *_sample(*case.values))) > 1]


@pytest.mark.parametrize("name, index", _several_input_cases())
def test_gradcheck_each_input_alone(name, index):
    """Only one input requires grad: only its formula runs and only what that formula
    reads is saved (the others' values are not), and its gradient is still right."""
    op = REGISTRY[name]
    for i in range(len(differentiable_places(op, *_sample(name, index)))):
        args, kwargs = _sample(name, index)     # fresh: the function writes into them
        place = differentiable_places(op, args, kwargs)[i]
        container, key = place
        alone = (container[key].detach().clone().requires_grad_(),)
        assert gradcheck(_as_function(op, args, kwargs, [place]), alone), i


# ------------------------------------------------------------------ in-place on views

def _writes_data(op):
    # a metadata change (transpose_, as_strided_ ...) leaves its base as it was: no
    # CopySlices to compare (tests/test_shape_indexing_more.py checks those on views)
    return op.inplace_of is None or op.inplace_of.kind != "view"


def _inplace_cases():
    return [case for case in CASES if _is_inplace(REGISTRY[case.values[0]])
            and _differentiable(REGISTRY[case.values[0]])
            and _writes_data(REGISTRY[case.values[0]])]


@pytest.mark.parametrize("name, index", _inplace_cases())
def test_inplace_on_view_matches_clone_reference(name, index):
    """``op_`` on a row of a non-leaf (CopySlices) and on a transposed non-leaf: values and
    gradients equal those of the same function written out of place."""
    op = REGISTRY[name]
    args, kwargs = _sample(name, index)
    target = args[0]
    if target.dtype is not mt.float64:
        pytest.skip("needs a float64 tensor to modify")
    others = []
    for container, key in differentiable_places(op, args, kwargs)[1:]:
        container[key] = container[key].detach().requires_grad_()
        others.append(container[key])
    rest = args[1:]
    rng = np.random.default_rng(0)
    rows = np.stack([rng.standard_normal(target.shape), np.array(target._array()),
                     rng.standard_normal(target.shape)])
    leaf = mt.tensor(rows, requires_grad=True)
    weight = mt.tensor(rng.standard_normal(rows.shape))
    row_mask = mt.tensor([0.0, 1.0, 0.0], dtype=mt.float64).view((3,) + (1,) * target.dim())

    x = leaf * 1.0
    assert op(x.select(0, 1), *rest, **kwargs) is not None
    assert x.grad_fn.name() == "CopySlices"
    got = mt.autograd.grad((x * weight).sum(), [leaf] + others, allow_unused=True)

    x_ref = leaf * 1.0
    new_row = op(x_ref.select(0, 1).clone(), *rest, **kwargs)
    reference = x_ref * (1 - row_mask) + row_mask * new_row.unsqueeze(0)
    expected = mt.autograd.grad((reference * weight).sum(), [leaf] + others, allow_unused=True)
    np.testing.assert_allclose(x.detach()._array(), reference.detach()._array(), rtol=1e-12)
    for g, e in zip(got, expected):
        if e is None:
            assert g is None or not g.detach()._array().any()
        else:
            np.testing.assert_allclose(g._array(), e._array(), rtol=1e-10, atol=1e-12)

    if target.dim() == 2:
        leaf_t = target.t().detach().clone().requires_grad_()
        y = leaf_t * 1.0
        op(y.t(), *rest, **kwargs)
        got = mt.autograd.grad((y * weight[0].t()).sum(), [leaf_t] + others, allow_unused=True)
        y_ref = op((leaf_t * 1.0).t().clone(), *rest, **kwargs).t()
        expected = mt.autograd.grad((y_ref * weight[0].t()).sum(), [leaf_t] + others,
                                    allow_unused=True)
        for g, e in zip(got, expected):
            if e is not None:
                np.testing.assert_allclose(g._array(), e._array(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name, index", _inplace_cases())
def test_inplace_on_view_double_backward(name, index):
    """gradgradcheck (fast mode) through the CopySlices node of ``op_`` on a view."""
    op = REGISTRY[name]
    args, kwargs = _sample(name, index)
    places = differentiable_places(op, args, kwargs)
    if not places or places[0] != (args, 0):
        pytest.skip("needs a float64 tensor to modify")
    inputs = tuple(container[key].detach().requires_grad_() for container, key in places)

    def f(target, *others):
        for (container, key), t in zip(places[1:], others):
            container[key] = t
        x = target.unsqueeze(0).expand((2,) + tuple(target.shape)) * 1.0
        op(x.select(0, 1), *args[1:], **kwargs)
        return x
    assert gradgradcheck(f, inputs, fast_mode=True)


# ------------------------------------------------------------------ coverage

def test_every_op_has_samples():
    missing = {name for name, op in REGISTRY.items()
               if op.kind != "composite" and op.samples is None}
    assert missing - OPS_WITHOUT_SAMPLES == set(), \
        "declare samples= for these ops (see ops/registry.py)"


def test_exceptions_list_is_current():
    have_samples = {name for name, op in REGISTRY.items() if op.samples is not None}
    assert OPS_WITHOUT_SAMPLES & have_samples == set(), \
        "these ops have samples now: remove them from OPS_WITHOUT_SAMPLES"


def test_gradcheck_warns_on_float32_and_rejects_overlap():
    x = mt.ones(3, dtype=mt.float32, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gradcheck(lambda a: a * 2, (x,), eps=1e-2, atol=1e-2, rtol=1e-2)
    assert any("double precision" in str(w.message) for w in caught)
    overlapping = mt.ones(1, dtype=mt.float64).expand(3).detach().requires_grad_()
    with pytest.raises(RuntimeError, match="stride 0"):
        gradcheck(lambda a: a * 2, (overlapping,))


def test_declared_inputs_are_parameters_of_differentiable_ops():
    """The sweeps find what to differentiate by the declared ``inputs``: a name that is
    not one of the kernel's parameters would leave the op unchecked without a word."""
    import inspect
    unknown = {name: [i for i in op.inputs
                      if i not in inspect.signature(op.kernel).parameters]
               for name, op in REGISTRY.items() if op.differentiable}
    assert {name: names for name, names in unknown.items() if names} == {}
