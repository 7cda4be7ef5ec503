"""Reverse-mode gradients of every op against PyTorch's, on the same call.

gradcheck (tests/test_op_registry.py) proves a gradient matches finite differences; it
cannot tell which of several valid gradients an op gives where the op reads only part of
its input (one triangle of a symmetric matrix) or where it is not differentiable (ties,
zeros, clamp boundaries).  There PyTorch gives one gradient by convention, and ported
programs expect that one.  So every sample of every op, and the points of
non-differentiability listed in ``CONVENTIONS``, run on microtensor and on PyTorch with
the same seeded upstream gradient (complex for complex outputs); each input's gradient
must match PyTorch's: value, dtype, and None where PyTorch gives None.
"""
import numpy as np
import pytest

import microtensor as mt
from microtensor._C.tensor import TensorBase
from microtensor.ops import REGISTRY
from microtensor.testing import differentiable_places, maker, seed_for
from test_forward_ad import _paths, _resolve
from test_op_registry import CASES, _differentiable, _sample, _to_torch, _torch_callable

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the oracle "
                                                      "of every test here)")


def _call_torch(op):
    """PyTorch's function for ``op``, torch.nn.functional's where torch has no other."""
    fn = _torch_callable(op)
    if fn is None:
        fn = getattr(torch.nn.functional, op.name, None)
    return fn


def _torch_arguments(args, kwargs):
    return list(_to_torch(list(args))), {k: _to_torch(v) for k, v in kwargs.items()}


# ------------------------------------------------------------------ what cannot be compared

# Samples where PyTorch's own gradient is wrong (fails its own gradcheck) or its backward
# raises: (op, predicate on the bound arguments, reason).  Our gradient is gradchecked.
PYTORCH_WRONG = [
    ("as_strided_scatter", lambda b: True,
     "PyTorch's gradient for self keeps the scattered positions and zeroes the others "
     "(the reverse of the derivative: torch.autograd.gradcheck fails)"),
    ("block_diag", lambda b: any(t.dim() == 1 and t.numel() == 0 for t in b["tensors"]),
     "PyTorch's forward gives a 1-D empty block a row, its backward does not: the other "
     "blocks' gradients are read one row off (torch.autograd.gradcheck fails)"),
    ("pad", lambda b: b["mode"] == "circular" and min(b["pad"]) < 0,
     "PyTorch's circular padding with a negative pad fails its own gradcheck"),
    ("narrow_copy", lambda b: b["start"] < 0,
     "PyTorch's backward of narrow_copy with a negative start raises"),
    ("dist", lambda b: b["p"] == 0,
     "PyTorch's backward of dist at p=0 raises (an undefined gradient)"),
    ("linalg_cond", lambda b: b["p"] in ("fro", float("inf"), -float("inf"), 1, -1),
     "PyTorch's backward raises (its inverse, saved for backward, is modified in place)"),
    ("vander", lambda b: True,
     "PyTorch's backward of torch.vander raises (a tensor it saved is modified in place)"),
    ("scaled_dot_product_attention", lambda b: b["is_causal"] and b["attn_mask"] is not None,
     "PyTorch refuses an explicit attn_mask with is_causal=True once an input requires grad"),
]

# Where an output's requires_grad differs from PyTorch's, which marks these outputs
# non-differentiable.  Known, not fixed: the registry has no per-output declaration.
NON_DIFFERENTIABLE_OUTPUTS = {
    "linalg_lu": "the permutation P",
    "lu_unpack": "the permutation P",
    "native_batch_norm": "the saved mean and inverse standard deviation",
    "native_layer_norm": "the mean and inverse standard deviation",
}

# Arguments PyTorch refuses to differentiate (an error if they require grad): constants
# here (we differentiate them too; gradchecked)
REFUSED = {"soft_margin_loss": ("target",), "multi_margin_loss": ("weight",)}

# nll_loss_backward is compared through a helper that differentiates nll_loss in PyTorch
# (aten's op takes other arguments): its result is no function of the inputs there
NO_TORCH_GRAPH = {"nll_loss_backward"}


def _pytorch_wrong(name, args, kwargs):
    bound = None
    for op_name, applies, reason in PYTORCH_WRONG:
        if op_name == name:
            bound = bound or REGISTRY[name].bind(args, kwargs)
            if applies(bound):
                return reason
    return None


# ------------------------------------------------------------------ decompositions

def _weighted(left, weights, right):
    """``left[..., :k] diag(weights) right[..., :k, :]`` for the k weights."""
    k = weights.shape[-1]
    return (left[..., :k] * weights.unsqueeze(-2)) @ right[..., :k, :]


# Their vectors are defined up to a sign (a phase); each other output and these products
# are not, and carry the upstream gradient instead of the vectors themselves
GAUGE_FREE = {
    "linalg_eigh": lambda out: [out[0], _weighted(out[1], out[0].sin(), out[1].mH)],
    # each eigenvector of a general matrix is defined up to a complex factor
    "linalg_eig": lambda out: [out[0], _weighted(out[1], out[0].sin(), out[1].inverse())],
    "linalg_svd": lambda out: [out[1], _weighted(out[0], out[1].sin(), out[2])],
    "svd": lambda out: [out[1]] if out[0].numel() == 0 else [
        out[1], _weighted(out[0], out[1].sin(), out[2].mH)],
    "linalg_qr": lambda out: [out[1]] if out[0].numel() == 0 else [
        _weighted(out[0], out[1].diagonal(0, -2, -1).abs().cos(), out[1])],
}


# ------------------------------------------------------------------ the comparison

def _tensors(result, tensor_type):
    items = result if isinstance(result, (tuple, list)) else [result]
    return [r for r in items if isinstance(r, tensor_type)]


def _outputs(name, result, tensor_type):
    """The outputs whose gradients are compared, and every output's requires_grad."""
    flags = [o.requires_grad for o in _tensors(result, tensor_type)]
    if name in GAUGE_FREE:
        result = GAUGE_FREE[name](result)
    return _tensors(result, tensor_type), flags


# PyTorch's det backward without create_graph gives zeros at a singular matrix (its LU
# path); det's derivative there (a polynomial's) is the cofactor matrix, which PyTorch's
# formula in grad mode gives: the reference here
CREATE_GRAPH = {"det-rank-1", "det-rank-1-of-3", "det-singular", "det-batch-one-singular"}


def _torch_grads(outputs, upstream, leaves, create_graph=False):
    """PyTorch's gradients and the inputs it has no formula for (their gradient None: nothing
    to compare), found input by input when its backward says "not implemented"."""
    try:
        return torch.autograd.grad(outputs, leaves, upstream, allow_unused=True,
                                   create_graph=create_graph), set()
    except (NotImplementedError, RuntimeError) as error:
        if "not implemented" not in str(error):
            raise
    grads, missing = [], set()
    for i, leaf in enumerate(leaves):
        try:
            grads.append(torch.autograd.grad(outputs, leaf, upstream, allow_unused=True,
                                             retain_graph=True)[0])
        except (NotImplementedError, RuntimeError) as error:
            if "not implemented" not in str(error):
                raise
            grads.append(None)
            missing.add(i)
    return grads, missing


TOLERANCES = {"float64": (1e-7, 1e-9), "complex128": (1e-7, 1e-9), "float32": (1e-4, 1e-5),
              "complex64": (1e-4, 1e-5), "float16": (1e-2, 1e-3), "bfloat16": (5e-2, 1e-2)}


def _compare_grads(got, expected):
    assert len(got) == len(expected)
    for i, (ours, theirs) in enumerate(zip(got, expected)):
        if theirs is None:
            assert ours is None, f"input {i}: PyTorch gives no gradient (None), we give a tensor"
            continue
        assert ours is not None, f"input {i}: PyTorch gives a gradient, we give None"
        dtype = str(theirs.dtype).split(".")[-1]
        assert ours.dtype.name == dtype, f"input {i}: dtype {ours.dtype.name} != {dtype}"
        assert tuple(ours.shape) == tuple(theirs.shape), f"input {i}: shape"
        rtol, atol = TOLERANCES[dtype]
        if theirs._is_zerotensor():     # (PyTorch's zero gradient of sign, round ...)
            theirs = torch.zeros(theirs.shape, dtype=theirs.dtype)
        np.testing.assert_allclose(np.asarray(ours.detach()._array()),
                                   theirs.detach().resolve_conj().numpy(), rtol=rtol,
                                   atol=atol, equal_nan=True, err_msg=f"input {i}")


def _check(name, ours, theirs, seed, inplace=False):
    """``ours = (fn, args, kwargs, leaves)`` and PyTorch's the same: run both, backpropagate
    one random upstream gradient, compare the inputs' gradients.  Returns the inputs PyTorch
    has no formula for (the gradients are compared only when there are none)."""
    results = []
    for fn, args, kwargs, _ in (ours, theirs):
        call_args = list(args)
        if inplace:     # on a clone, so that a leaf stays a leaf
            call_args[0] = call_args[0].clone()
        results.append(fn(*call_args, **kwargs))
    (outputs, flags), (t_outputs, t_flags) = (_outputs(name, results[0], TensorBase),
                                             _outputs(name, results[1], torch.Tensor))
    assert flags == t_flags or name in NON_DIFFERENTIABLE_OUTPUTS, \
        "outputs' requires_grad differ from PyTorch's"
    assert len(outputs) == len(t_outputs)
    pairs = [(o, t) for o, t in zip(outputs, t_outputs) if t.requires_grad]
    if not pairs:
        pytest.skip("no output PyTorch differentiates")
    make = maker(seed)
    upstream = [make(*o.shape, dtype=o.dtype) for o, _ in pairs]
    expected, missing = _torch_grads([t for _, t in pairs],
                                     [_to_torch(u) for u in upstream], theirs[3],
                                     name in CREATE_GRAPH)
    if len(missing) == len(expected):
        pytest.skip("PyTorch has no gradient formula for any input")
    if not missing:
        got = mt.autograd.grad([o for o, _ in pairs], ours[3], upstream, allow_unused=True)
        _compare_grads(list(got), list(expected))
    return missing


# ------------------------------------------------------------------ every op's samples

def _argument(op, path):
    top = path[0]
    if isinstance(top, str):
        return top
    return op.params[top] if top < len(op.params) else op.varargs


def _with_leaves(op, args, kwargs, constants=()):
    """The sample's floating inputs replaced by fresh leaves (but for the ``constants``-th
    and those PyTorch refuses to differentiate), and where they are."""
    places = differentiable_places(op, args, kwargs, every_floating=True)
    kept = [(place, path) for i, (place, path) in
            enumerate(zip(places, _paths(args, kwargs, places)))
            if i not in constants and _argument(op, path) not in REFUSED.get(op.name, ())]
    leaves = []
    for container, key in (place for place, _ in kept):
        container[key] = container[key].detach().clone().requires_grad_()
        leaves.append(container[key])
    return leaves, [path for _, path in kept]


def _torch_with_leaves(args, kwargs, paths):
    targs, tkwargs = _torch_arguments(args, kwargs)
    leaves = []
    for path in paths:
        container, key = _resolve(targs, tkwargs, path)
        container[key] = container[key].detach().clone().requires_grad_()
        leaves.append(container[key])
    return targs, tkwargs, leaves


@pytest.mark.parametrize("name, index", CASES)
def test_gradient_matches_torch(name, index):
    op = REGISTRY[name]
    if not _differentiable(op) or op.random:
        pytest.skip(f"{name} is not differentiable" if not op.random else
                    "random: the gradient depends on the draw")
    fn = _call_torch(op)
    if fn is None:
        pytest.skip(f"PyTorch has no {name}")
    if name in NO_TORCH_GRAPH:
        pytest.skip("the PyTorch side is a helper without a graph")
    args, kwargs = _sample(name, index)
    reason = _pytorch_wrong(name, args, kwargs)
    if reason:
        pytest.skip(reason)
    if not differentiable_places(op, args, kwargs, every_floating=True):
        pytest.skip("no floating input to differentiate")
    try:
        fn(*_torch_arguments(args, kwargs)[0], **_torch_arguments(args, kwargs)[1])
    except (TypeError, AttributeError, NotImplementedError) as e:
        pytest.skip(f"PyTorch's {name} takes other arguments: {e}")
    except RuntimeError as e:
        pytest.skip(f"PyTorch refuses this sample (tests/test_op_registry.py checks we do "
                    f"too): {e}")
    constants = ()
    while True:     # again without the inputs PyTorch has no formula for, once
        args, kwargs = _sample(name, index)
        leaves, paths = _with_leaves(op, args, kwargs, constants)
        theirs = (fn,) + _torch_with_leaves(*_sample(name, index), paths)
        missing = _check(name, (op, args, kwargs, leaves), theirs,
                         seed_for(f"{name}-{index}-upstream"), inplace=op.kind == "inplace")
        if not missing:
            break
        assert not constants
        constants = missing


# ------------------------------------------------------------------ non-differentiable points

TIES = [[1.0, 3.0, 3.0, -2.0], [2.0, 2.0, 2.0, 0.5], [-1.0, 0.0, -1.0, 0.0]]
ZEROS = [0.0, -1.5, 0.0, 2.0]
NAN = float("nan")
MATRIX = [[1.0, 2.0], [3.0, 4.0]]
MATRIX_I = [[1.0, 0.0], [0.0, 1.0]]

# Points where the op is not differentiable and PyTorch's gradient is a convention (ties
# share or go to the selected index, sign(0) = 0, a clamp boundary passes the gradient ...):
# id -> (f(lib, *inputs), inputs)
CONVENTIONS = {
    # reductions with ties
    "max-all": (lambda lib, x: x.max(), [TIES]),
    "min-all": (lambda lib, x: x.min(), [TIES]),
    "max-dim": (lambda lib, x: x.max(1), [TIES]),
    "min-dim": (lambda lib, x: x.min(0, keepdim=True), [TIES]),
    "amax": (lambda lib, x: x.amax(1), [TIES]),
    "amin": (lambda lib, x: x.amin((0, 1)), [TIES]),
    "amax-all": (lambda lib, x: lib.amax(x), [TIES]),
    "aminmax": (lambda lib, x: lib.aminmax(x, dim=1), [TIES]),
    "max-nan": (lambda lib, x: x.max(), [[1.0, NAN, 3.0, NAN]]),
    "min-nan": (lambda lib, x: x.min(), [[1.0, NAN, 3.0]]),
    "amax-nan": (lambda lib, x: x.amax(0), [[1.0, NAN, 3.0]]),
    "median-nan": (lambda lib, x: x.median(), [[NAN, 0.0, 1.0]]),
    "nanmedian-nan": (lambda lib, x: x.nanmedian(), [[NAN, 0.0, 1.0, 1.0]]),
    "max-dim-nan": (lambda lib, x: x.max(0), [[1.0, NAN, 3.0]]),
    "median-all": (lambda lib, x: x.median(), [TIES]),
    "median-dim": (lambda lib, x: x.median(1), [TIES]),
    "nanmedian-all": (lambda lib, x: x.nanmedian(), [TIES]),
    "nanmedian-dim": (lambda lib, x: x.nanmedian(0), [TIES]),
    "kthvalue": (lambda lib, x: x.kthvalue(2, 1), [TIES]),
    "mode": (lambda lib, x: x.mode(1), [TIES]),
    "sort": (lambda lib, x: x.sort(1), [TIES]),
    "sort-stable-descending": (lambda lib, x: x.sort(dim=1, descending=True, stable=True), [TIES]),
    "topk": (lambda lib, x: x.topk(2, 1), [TIES]),
    "topk-dim-0": (lambda lib, x: x.topk(2, 0), [TIES]),
    "topk-smallest": (lambda lib, x: x.topk(3, 0, largest=False), [TIES]),
    "msort": (lambda lib, x: lib.msort(x), [TIES]),
    "cummax": (lambda lib, x: x.cummax(1), [TIES]),
    "cummin": (lambda lib, x: x.cummin(1), [TIES]),
    "logcumsumexp": (lambda lib, x: x.logcumsumexp(1), [TIES]),
    "max-pool": (lambda lib, x: lib.nn.functional.max_pool1d(x.unsqueeze(0), 2, 1), [TIES]),
    "adaptive-max-pool": (lambda lib, x: lib.nn.functional.adaptive_max_pool1d(
        x.unsqueeze(0), 2), [TIES]),
    # binary ties
    "maximum": (lambda lib, x, y: lib.maximum(x, y), [TIES[0], [1.0, 3.0, 0.0, -2.0]]),
    "minimum": (lambda lib, x, y: lib.minimum(x, y), [TIES[0], [1.0, 3.0, 0.0, -2.0]]),
    "max-binary": (lambda lib, x, y: lib.max(x, y), [TIES[0], [1.0, 3.0, 0.0, -2.0]]),
    "fmax": (lambda lib, x, y: lib.fmax(x, y), [TIES[0], [1.0, 3.0, 0.0, -2.0]]),
    "fmin": (lambda lib, x, y: lib.fmin(x, y), [TIES[0], [1.0, 3.0, 0.0, -2.0]]),
    "where-equal": (lambda lib, x, y: lib.where(x > 0, x, y), [ZEROS, ZEROS]),
    # zero
    "abs": (lambda lib, x: x.abs(), [ZEROS]),
    "sign": (lambda lib, x: x.sign(), [ZEROS]),
    "sgn": (lambda lib, x: x.sgn(), [ZEROS]),
    "sqrt": (lambda lib, x: x.abs().sqrt(), [ZEROS]),
    "rsqrt": (lambda lib, x: x.abs().rsqrt(), [ZEROS]),
    "pow-base-0": (lambda lib, x: x.pow(2.0), [ZEROS]),
    "pow-base-0-exponent-0": (lambda lib, x: x.pow(0.0), [ZEROS]),
    "pow-base-0-small-exponent": (lambda lib, x: x.pow(0.5), [ZEROS]),
    "pow-tensors": (lambda lib, x, y: x.pow(y), [ZEROS, [0.0, 2.0, 1.5, -1.0]]),
    "pow-scalar-base": (lambda lib, y: lib.pow(0.0, y), [[0.0, 2.0, 1.5, -1.0]]),
    "prod-one-zero": (lambda lib, x: x.prod(), [[2.0, 0.0, 3.0, -1.0]]),
    "prod-two-zeros": (lambda lib, x: x.prod(), [ZEROS]),
    "prod-dim": (lambda lib, x: x.prod(1), [[[2.0, 0.0, 3.0], [0.0, 0.0, 1.0], [1.0, 2.0, 3.0]]]),
    "cumprod": (lambda lib, x: x.cumprod(1), [[[2.0, 0.0, 3.0], [0.0, 0.0, 1.0], [1.0, 2.0, 3.0]]]),
    "norm-0": (lambda lib, x: x.norm(), [[0.0, 0.0, 0.0]]),
    "norm-1": (lambda lib, x: x.norm(1), [ZEROS]),
    "norm-inf": (lambda lib, x: x.norm(float("inf")), [[3.0, -3.0, 1.0]]),
    "vector-norm-0": (lambda lib, x: lib.linalg.vector_norm(x, dim=1), [[[0.0, 0.0], [3.0, 4.0]]]),
    "vector-norm-3": (lambda lib, x: lib.linalg.vector_norm(x, 3), [[0.0, 0.0]]),
    "vector-norm-3-dim": (lambda lib, x: lib.linalg.vector_norm(x, 3, dim=1),
                          [[[0.0, 0.0], [0.0, 2.0]]]),
    "vector-norm-half": (lambda lib, x: lib.linalg.vector_norm(x, 0.5, dim=1),
                         [[[0.0, 0.0], [0.0, 2.0]]]),
    "vector-norm-1.5": (lambda lib, x: lib.linalg.vector_norm(x, 1.5, dim=1),
                        [[[0.0, 0.0], [0.0, 2.0]]]),
    "norm-3": (lambda lib, x: x.norm(3), [[0.0, 0.0]]),
    "vector-norm-inf": (lambda lib, x: lib.linalg.vector_norm(x, float("inf")),
                        [[3.0, -3.0, 1.0]]),
    "vector-norm--inf": (lambda lib, x: lib.linalg.vector_norm(x, -float("inf")),
                         [[1.0, -3.0, -1.0]]),
    "vector-norm-order-0": (lambda lib, x: lib.linalg.vector_norm(x, 0), [ZEROS]),
    "matrix-norm-0": (lambda lib, x: lib.linalg.matrix_norm(x), [[[0.0, 0.0], [0.0, 0.0]]]),
    "dist-0": (lambda lib, x, y: lib.dist(x, y), [ZEROS, ZEROS]),
    "cdist-0": (lambda lib, x, y: lib.cdist(x, y), [[[0.0, 1.0]], [[0.0, 1.0], [1.0, 1.0]]]),
    "cdist-inf-ties": (lambda lib, x, y: lib.cdist(x, y, p=float("inf")),
                       [[[0.0, 1.0], [2.0, 2.0]], [[1.0, 2.0], [1.0, 1.0]]]),
    "pdist-inf-ties": (lambda lib, x: lib.nn.functional.pdist(x, p=float("inf")),
                       [[[0.0, 1.0], [1.0, 2.0], [1.0, 1.0]]]),
    "pdist-0": (lambda lib, x: lib.nn.functional.pdist(x), [[[0.0, 1.0], [0.0, 1.0], [1.0, 1.0]]]),
    "std-constant": (lambda lib, x: x.std(), [[2.0, 2.0, 2.0]]),
    "hypot-0": (lambda lib, x, y: lib.hypot(x, y), [ZEROS, ZEROS]),
    "atan2-0": (lambda lib, x, y: lib.atan2(x, y), [ZEROS, ZEROS]),
    "xlogy-0": (lambda lib, x, y: lib.xlogy(x, y), [ZEROS, [0.0, 1.0, 2.0, 0.0]]),
    "sinc-0": (lambda lib, x: lib.sinc(x), [ZEROS]),
    "complex-abs-0": (lambda lib, x: lib.complex(x, x).abs(), [ZEROS]),
    "complex-sgn-0": (lambda lib, x: lib.complex(x, x).sgn(), [ZEROS]),
    "angle-0": (lambda lib, x: x.angle(), [ZEROS]),
    "normalize-0": (lambda lib, x: lib.nn.functional.normalize(x, dim=1), [[[0.0, 0.0], [3.0, 4.0]]]),
    "cosine-similarity-0": (lambda lib, x, y: lib.nn.functional.cosine_similarity(x, y),
                            [[[0.0, 0.0]], [[1.0, 2.0]]]),
    "kl-div-target-0": (lambda lib, x, t: lib.nn.functional.kl_div(x, t, reduction="sum"),
                        [[-1.0, -2.0, -0.5], [0.0, 0.5, 0.5]]),
    "kl-div-log-target": (lambda lib, x, t: lib.nn.functional.kl_div(x, t, log_target=True),
                          [[-1.0, -2.0], [-float("inf"), -0.5]]),
    "l1-loss-0": (lambda lib, x, y: lib.nn.functional.l1_loss(x, y), [ZEROS, ZEROS]),
    "smooth-l1-0": (lambda lib, x, y: lib.nn.functional.smooth_l1_loss(x, y, beta=0.0),
                    [ZEROS, ZEROS]),
    "huber-boundary": (lambda lib, x, y: lib.nn.functional.huber_loss(x, y, delta=1.5),
                       [ZEROS, [1.5, 0.0, 1.5, 0.5]]),
    "addmm-beta-0-nan": (lambda lib, x, a, b: lib.addmm(x, a, b, beta=0),
                         [[[float("nan"), 1.0], [1.0, 1.0]], MATRIX, MATRIX]),
    "pinv-identity": (lambda lib, x: lib.linalg.pinv(x), [MATRIX_I]),
    "pinv-hermitian-identity": (lambda lib, x: lib.linalg.pinv(x, hermitian=True),
                                [MATRIX_I]),
    "pinv-rank-1": (lambda lib, x: lib.linalg.pinv(x), [[[1.0, 2.0], [2.0, 4.0]]]),
    "pinv-hermitian": (lambda lib, x: lib.linalg.pinv(x, hermitian=True),
                       [[[2.0, 1.0], [1.0, 3.0]]]),
    "pinverse-orthogonal": (lambda lib, x: lib.pinverse(x), [[[0.0, 1.0], [1.0, 0.0]]]),
    "det-singular": (lambda lib, x: lib.linalg.det(x), [[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0],
                                                        [1.0, 0.0, 1.0]]]),
    "det-rank-1": (lambda lib, x: lib.linalg.det(x), [[[1.0, 2.0], [2.0, 4.0]]]),
    "det-rank-1-of-3": (lambda lib, x: lib.linalg.det(x), [[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0],
                                                            [1.0, 2.0, 3.0]]]),
    "det-batch-one-singular": (lambda lib, x: lib.linalg.det(x), [[MATRIX, [[1.0, 2.0],
                                                                            [2.0, 4.0]]]]),
    "det-double-backward-singular": (lambda lib, x: lib.autograd.grad(
        lib.linalg.det(x), x, create_graph=True)[0], [[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0],
                                                      [1.0, 0.0, 1.0]]]),
    "trace": (lambda lib, x: x.trace(), [MATRIX]),
    # boundaries
    "clamp": (lambda lib, x: x.clamp(-1.5, 0.0), [ZEROS]),
    "clamp-min": (lambda lib, x: x.clamp(min=0.0), [ZEROS]),
    "clamp-max": (lambda lib, x: x.clamp_max(0.0), [ZEROS]),
    "clamp-tensors": (lambda lib, x, lo, hi: x.clamp(lo, hi),
                      [ZEROS, [0.0, -1.5, -1.0, 2.0], [0.0, 0.0, 0.0, 2.0]]),
    "clamp-min-above-max": (lambda lib, x: x.clamp(1.0, 0.0), [ZEROS]),
    "hardtanh": (lambda lib, x: lib.nn.functional.hardtanh(x, -1.5, 2.0), [ZEROS]),
    "relu": (lambda lib, x: x.relu(), [ZEROS]),
    "relu-nan": (lambda lib, x: x.relu(), [[NAN, 0.5, -2.0, 0.0]]),
    "relu-nan-float32": (lambda lib, x: x.float().relu(), [[NAN, 0.5, -2.0, 0.0]]),
    "relu-nan-strided": (lambda lib, x: x.t().relu(), [[[NAN, 0.5], [-2.0, 0.0]]]),
    "relu6": (lambda lib, x: lib.nn.functional.relu6(x * 3.0), [[0.0, 2.0, -1.0, 1.0]]),
    "leaky-relu": (lambda lib, x: lib.nn.functional.leaky_relu(x, 0.1), [ZEROS]),
    "elu": (lambda lib, x: lib.nn.functional.elu(x, 2.0), [ZEROS]),
    "celu": (lambda lib, x: lib.nn.functional.celu(x, 2.0), [ZEROS]),
    "selu": (lambda lib, x: lib.nn.functional.selu(x), [ZEROS]),
    "prelu": (lambda lib, x, w: lib.nn.functional.prelu(x, w), [ZEROS, [0.25]]),
    "rrelu-eval": (lambda lib, x: lib.nn.functional.rrelu(x), [ZEROS]),
    "threshold": (lambda lib, x: lib.nn.functional.threshold(x, 0.0, 5.0), [ZEROS]),
    "hardshrink": (lambda lib, x: lib.nn.functional.hardshrink(x, 1.5), [ZEROS]),
    "softshrink": (lambda lib, x: lib.nn.functional.softshrink(x, 1.5), [ZEROS]),
    "hardsigmoid": (lambda lib, x: lib.nn.functional.hardsigmoid(x), [[-3.0, 3.0, 0.0]]),
    "hardswish": (lambda lib, x: lib.nn.functional.hardswish(x), [[-3.0, 3.0, 0.0]]),
    "softplus-threshold": (lambda lib, x: lib.nn.functional.softplus(x, 1.0, 2.0),
                           [[2.0, 0.0, 3.0]]),
    "heaviside-free": (lambda lib, x: x.round() + x.floor() + x.ceil() + x.trunc() + x.frac(),
                       [[0.5, -1.5, 2.0]]),
}


# Which of tied values PyTorch's topk and kthvalue return is its selection algorithm's
# (introselect, quickselect), documented as unspecified; the gradient goes to the index
# returned (test_gradient_follows_the_returned_index)
UNSPECIFIED_TIES = {
    "kthvalue": "PyTorch's kthvalue picks among ties by its quickselect (unspecified)",
    "topk": "PyTorch's topk picks among ties by its introselect (unspecified)",
}

# Known and kept: amax/amin and max()/min() share one formula here, which sends the
# gradient to the NaNs of a slice whose result is NaN (PyTorch's max()); PyTorch's amax
# divides by the count of elements equal to the result, 0, and gives the slice NaN
KEPT = {"amax-nan": "PyTorch's amax gives a slice holding a NaN a NaN gradient (0 / 0)"}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=KEPT[name]))
    if name in KEPT else name for name in sorted(CONVENTIONS)])
def test_gradient_at_non_differentiable_points_matches_torch(name):
    if name in UNSPECIFIED_TIES:
        pytest.skip(UNSPECIFIED_TIES[name])
    f, values = CONVENTIONS[name]
    leaves = [mt.tensor(np.asarray(v, dtype=np.float64), requires_grad=True) for v in values]
    t_leaves = [torch.tensor(np.asarray(v, dtype=np.float64), requires_grad=True)
                for v in values]
    _check(name, (lambda *xs: f(mt, *xs), leaves, {}, leaves),
           (lambda *xs: f(torch, *xs), t_leaves, {}, t_leaves), seed_for(f"{name}-upstream"))


@pytest.mark.parametrize("name", sorted(UNSPECIFIED_TIES))
def test_gradient_follows_the_returned_index(name):
    """Among ties, the gradient goes to the index returned, as PyTorch's does."""
    f, values = CONVENTIONS[name]
    x = mt.tensor(values[0], dtype=mt.float64, requires_grad=True)
    result = f(mt, x)
    upstream = maker(seed_for(name))(*result.values.shape)
    grad, = mt.autograd.grad(result.values, x, upstream)
    dim = 1    # both select along dim 1
    indices = result.indices if result.indices.dim() == x.dim() else \
        result.indices.unsqueeze(dim)
    expected = mt.zeros_like(x).scatter(dim, indices, upstream.reshape(tuple(indices.shape)))
    np.testing.assert_array_equal(grad._array(), expected._array())
    assert (x.gather(dim, indices) == result.values.reshape(tuple(indices.shape))).all()
