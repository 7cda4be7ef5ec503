"""Output metadata of every op in the registry against PyTorch's on the same call.

tests/test_op_registry.py compares each sample's shapes, dtypes and values; this sweep
compares what a program can see besides them.  The sample's inputs are rebuilt on
PyTorch's side over a copy of the same storage with the same sizes, strides and storage
offsets, and for each output tensor:

* its strides (along dimensions of size > 1, when it has more than one element: PyTorch's
  strides of size-1 dimensions are arbitrary) and its storage offset;
* which inputs it shares storage with (a view, or an in-place op's ``self``), and whether
  it is a view (``_is_view()``);
* with the floating inputs made leaves that require grad: ``requires_grad`` and whether
  ``grad_fn`` is None (a non-differentiable output, such as an index, has neither);
* for pointwise and reduction ops, with the inputs laid out as PyTorch's layouts make them
  (a transposed matrix, a channels-last 4-D tensor, a slice at a storage offset): the
  strides again, and the values (PyTorch's TensorIterator gives an elementwise result the
  layout of a dense permuted input).

Known differences are listed in the dicts below, each with its reason; they are strict
xfails, so a fixed one must leave its list.
"""
import numpy as np
import pytest

import microtensor as mt
from microtensor._C.tensor import TensorBase
from microtensor.ops import REGISTRY
from microtensor.testing import differentiable_places, transposed_layout
from test_forward_ad import _paths, _resolve
from test_op_registry import (CASES, _assert_matches_torch, _is_inplace, _sample, _to_torch,
                              _torch_callable)

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (the "
                                                      "oracle of this sweep)")

# op name (every sample), or a test id (one sample) -> why microtensor's metadata differs

# LAPACK works on column-major matrices, and PyTorch hands its results over as they are
COLUMN_MAJOR = ("PyTorch's linear-algebra results are column-major (Fortran strides, as "
                "LAPACK writes them); microtensor's are row-major")
FFT_LAYOUT = ("PyTorch's FFT results keep the layout of its FFT plan (the transformed dims "
              "innermost); microtensor's are row-major")
TORCH_VIEW_OF_TEMPORARY = ("PyTorch's result is a view of a temporary of its own kernel "
                           "(a 1-d op run as its 2-d one, a matrix product reshaped); "
                           "microtensor's is a tensor of its own, so it allows what a view "
                           "would refuse (detach_())")
TORCH_VIEW_OF_INPUT = ("PyTorch's einsum returns a view of the operand when nothing is "
                       "multiplied or summed (a diagonal, a permutation); microtensor's is a "
                       "copy")
QUANTILE_LAYOUT = ("PyTorch computes the quantiles with the q dim last and moves it to the "
                   "front (a permuted result); microtensor's is row-major")
KNOWN_LAYOUT_DIFFERENCES = {
    "triangular_solve": COLUMN_MAJOR,                    # its copy of the coefficients
    **{f"{name}-{i}": COLUMN_MAJOR for name, indices in {
        "svd": (2, 3)}.items()              # V (the adjoint of Vh), and compute_uv=False
       for i in indices},
    **{f"{name}-2": "PyTorch's solution for a batch of vector right-hand sides is the "
                    "transpose of its column-major one; microtensor's is row-major"
       for name in ("linalg_solve", "linalg_solve_ex")},
    **{name: FFT_LAYOUT for name in ("fft_ihfft", "fft_ihfftn")},
    **{f"{name}-{i}": FFT_LAYOUT for name, indices in {
        "_fft_c2c": (0, 3), "_fft_c2r": (2,), "_fft_r2c": (1,), "fft_fft": (1,),
        "fft_fftn": (2,), "fft_hfft": (1,), "fft_hfftn": (2,), "fft_ifft": (1,),
        "fft_irfft": (1,), "fft_irfftn": (2,), "fft_rfft": (1,), "fft_rfftn": (2,)}.items()
       for i in indices},
    **{name: TORCH_VIEW_OF_TEMPORARY for name in (
        "adaptive_avg_pool1d", "adaptive_max_pool1d", "avg_pool1d", "max_pool1d_with_indices",
        "repeat_interleave", "tensordot")},
    **{f"{name}-{i}": TORCH_VIEW_OF_TEMPORARY for name, indices in {
        "bilinear": (1,), "chain_matmul": (0,), "einsum": (0, 1, 2, 3, 8, 9, 11),
        "inner": (0, 1, 3), "linalg_cond": (0, 1, 2, 9, 10, 11), "linalg_multi_dot": (0,),
        "linear": (1, 2), "nonzero": (1, 3)}.items()
       for i in indices},
    "einsum-4": TORCH_VIEW_OF_INPUT, "einsum-12": TORCH_VIEW_OF_INPUT,
    "nonzero-0": "PyTorch's nonzero result is column-major (the transpose of its kernel's "
                 "(ndim, N) buffer); microtensor's is row-major",
    "unique-5": "PyTorch's unique along a dim returns its kernel's column-major buffer; "
                "microtensor's is row-major",
    "quantile-1": QUANTILE_LAYOUT, "quantile-4": QUANTILE_LAYOUT,
    "nanquantile-1": QUANTILE_LAYOUT, "nanquantile-4": QUANTILE_LAYOUT,
}
TORCH_RECORDS_ANYWAY = ("PyTorch records a node for this op whose backward raises ('derivative "
                        "... is not implemented') or gives zeros, so its floating output "
                        "requires grad; microtensor's op is not differentiable and its output "
                        "does not require grad")
KNOWN_AUTOGRAD_DIFFERENCES = {
    **{name: TORCH_RECORDS_ANYWAY for name in (
        "binomial", "detach_copy", "eq_", "ge_", "gt_", "le_", "lt_", "ne_", "heaviside",
        "heaviside_", "histogram", "linalg_ldl_factor", "linalg_ldl_factor_ex",
        "linalg_ldl_solve", "nextafter", "nextafter_", "unique")},
    **{f"geqrf-{i}": TORCH_RECORDS_ANYWAY for i in range(3)},
    "unique_consecutive-5": TORCH_RECORDS_ANYWAY,
    "geqrf-3": "PyTorch refuses a complex input that requires grad; microtensor's geqrf is "
               "not differentiable and gives outputs that do not require grad",
    "soft_margin_loss": "PyTorch refuses a target that requires grad; microtensor "
                        "differentiates the loss with respect to the target too",
    "multi_margin_loss-2": "PyTorch refuses a weight that requires grad; microtensor "
                           "differentiates the loss with respect to the weight too",
    "as_strided_scatter-1": "PyTorch refuses a non-contiguous input that requires grad (an "
                            "internal assert); microtensor differentiates it",
    "scaled_dot_product_attention-5": "PyTorch's path for inputs that require grad refuses "
                                      "attn_mask with is_causal=True (its other path "
                                      "accepts it); microtensor accepts it on both",
}

# References that are not PyTorch's op of that name but a function of its autograd (see
# test_op_registry._torch_callable): their outputs' requires_grad says nothing
AUTOGRAD_BUILT_REFERENCES = {"nll_loss_backward"}
CONTIGUOUS_IN_TORCH = ("PyTorch's kernel allocates a contiguous output whatever the input's "
                       "layout; microtensor's follows the input's layout, as its other "
                       "elementwise results and PyTorch's TensorIterator do")
KNOWN_LAYOUT_DIFFERENCES.update({"angle-1": CONTIGUOUS_IN_TORCH,      # a real input
                                 "log_sigmoid-3": CONTIGUOUS_IN_TORCH})
KNOWN_NONCONTIGUOUS_DIFFERENCES = {
    f"{case}-{layout}": CONTIGUOUS_IN_TORCH
    for case in ("angle-0", "angle-1", "log_sigmoid-0", "log_sigmoid-3")   # real inputs
    for layout in ("transposed", "channels_last")}


def _params(cases, known, suffix=""):
    """``cases`` as pytest parameters, those ``known`` (by op name or by test id) marked as
    strict xfails with their reasons."""
    params = []
    for case in cases:
        test_id = case.id + suffix
        reason = known.get(test_id, known.get(case.values[0]))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(*case.values, id=test_id, marks=marks))
    return params


# ------------------------------------------------------------------ the same inputs in torch

def _torch_dtype(dtype):
    return getattr(torch, dtype.name)


def _mirror(x, storages):
    """``x`` with each tensor rebuilt in torch over a copy of its storage, with its sizes,
    strides and storage offset (tensors sharing a storage share the copy)."""
    if isinstance(x, TensorBase):
        storage = x.untyped_storage()
        if id(storage) not in storages:    # (the storage kept alive: its id stays its own)
            storages[id(storage)] = (storage, torch.from_numpy(np.array(storage._bytes())))
        data = storages[id(storage)][1]
        usable = data.numel() - data.numel() % x.element_size()
        if usable == 0:
            data = torch.empty(0, dtype=_torch_dtype(x.dtype))
        else:
            data = data[:usable].view(_torch_dtype(x.dtype))
        mirrored = data.as_strided(tuple(x.shape), x.stride(), x.storage_offset())
        return mirrored if x._is_view() else mirrored.detach()
    if isinstance(x, (list, tuple)):
        return type(x)(_mirror(v, storages) for v in x)
    if isinstance(x, dict):
        return {k: _mirror(v, storages) for k, v in x.items()}
    return _to_torch(x)


def _tensors(x):
    """The tensors in ``x`` (nested lists, tuples and dicts), in order."""
    if isinstance(x, (TensorBase, torch.Tensor)):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _run_both(name, args, kwargs, requires_grad=False):
    """(microtensor's result, torch's result, microtensor's inputs, torch's inputs), or a
    skip when torch has no such op or takes other arguments, or None when both refuse."""
    op = REGISTRY[name]
    fn = _torch_callable(op)
    if fn is None:
        pytest.skip(f"PyTorch has no {name}")
    storages = {}
    torch_args, torch_kwargs = list(_mirror(args, storages)), _mirror(kwargs, storages)
    if requires_grad and not _with_leaves(op, args, kwargs, torch_args, torch_kwargs):
        pytest.skip("no floating input that the op differentiates")
    try:
        expected = fn(*torch_args, **torch_kwargs)
    except (TypeError, AttributeError, NotImplementedError) as e:
        pytest.skip(f"PyTorch's {name} takes other arguments: {e}")
    except RuntimeError as e:
        if "schema" in str(e):
            pytest.skip(f"PyTorch's {name} takes other arguments: {e}")
        with pytest.raises(RuntimeError):
            op(*args, **kwargs)
        return None
    result = op(*args, **kwargs)
    return result, expected, _tensors([args, kwargs]), _tensors([torch_args, torch_kwargs])


def _with_leaves(op, args, kwargs, torch_args, torch_kwargs):
    """Every floating input the op differentiates made a leaf that requires grad, on both
    sides (but an in-place op's ``self``, which such a leaf could not be)."""
    places = [place for place in differentiable_places(op, args, kwargs, every_floating=True)
              if not (_is_inplace(op) and place == (args, 0))]
    for (container, key), path in zip(places, _paths(args, kwargs, places)):
        container[key] = container[key].detach().requires_grad_()
        container, key = _resolve(torch_args, torch_kwargs, path)
        container[key] = container[key].detach().requires_grad_()
    return places


# ------------------------------------------------------------------ comparisons

def _pairs(ours, theirs, where="output"):
    """(microtensor tensor, torch tensor, where) for each output tensor."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, TensorBase), f"{where}: expected a tensor, got {ours!r}"
        return [(ours, theirs, where)]
    if isinstance(theirs, (tuple, list)):
        assert len(ours) == len(theirs), f"{where}: number of outputs"
        return [p for i, (a, b) in enumerate(zip(ours, theirs))
                for p in _pairs(a, b, f"{where}[{i}]")]
    return []


def _significant_strides(t):
    """The strides along dimensions of size > 1 (None for at most one element)."""
    if t.numel() <= 1:
        return None
    return tuple(s if n > 1 else None for n, s in zip(t.shape, t.stride()))


def _shares_storage(t, inputs):
    """The positions of the inputs whose storage ``t``'s is."""
    if t.untyped_storage().nbytes() == 0:
        return ()
    ptr = t.untyped_storage().data_ptr()
    return tuple(i for i, x in enumerate(inputs)
                 if x.untyped_storage().nbytes() and x.untyped_storage().data_ptr() == ptr)


def _assert_same_layout(ours, theirs, where):
    assert tuple(ours.shape) == tuple(theirs.shape), f"{where}: shape"
    assert _significant_strides(ours) == _significant_strides(theirs), \
        f"{where}: strides {ours.stride()} where PyTorch's are {theirs.stride()}"
    if ours.numel():
        assert ours.storage_offset() == theirs.storage_offset(), \
            f"{where}: storage offset {ours.storage_offset()} where PyTorch's is " \
            f"{theirs.storage_offset()}"


# ------------------------------------------------------------------ the sweeps

@pytest.mark.parametrize("name, index", _params(CASES, KNOWN_LAYOUT_DIFFERENCES))
def test_output_layout_and_views_match_torch(name, index):
    ran = _run_both(name, *_sample(name, index))
    if ran is None:
        return
    result, expected, inputs, torch_inputs = ran

    for ours, theirs, where in _pairs(result, expected):
        _assert_same_layout(ours, theirs, where)
        assert _shares_storage(ours, inputs) == _shares_storage(theirs, torch_inputs), \
            f"{where}: shares storage with inputs {_shares_storage(ours, inputs)} " \
            f"where PyTorch's does with {_shares_storage(theirs, torch_inputs)}"
        assert ours._is_view() == theirs._is_view(), f"{where}: _is_view() is {ours._is_view()}"


@pytest.mark.parametrize("name, index", _params(CASES, KNOWN_AUTOGRAD_DIFFERENCES))
def test_output_requires_grad_matches_torch(name, index):
    if name in AUTOGRAD_BUILT_REFERENCES:
        pytest.skip("the PyTorch reference is built with autograd.grad")
    ran = _run_both(name, *_sample(name, index), requires_grad=True)
    if ran is None:
        return
    result, expected = ran[:2]
    for ours, theirs, where in _pairs(result, expected):
        assert ours.requires_grad == theirs.requires_grad, \
            f"{where}: requires_grad is {ours.requires_grad}"
        assert (ours.grad_fn is None) == (theirs.grad_fn is None), \
            f"{where}: grad_fn is {ours.grad_fn}, PyTorch's {theirs.grad_fn}"


# ------------------------------------------------------------------ non-contiguous inputs

def _channels_last(t):
    """``t`` stored with dim 1 innermost: channels_last for a 4-D tensor, its analogue for
    3-D and 5-D ones (a dense permuted layout that TensorIterator keeps)."""
    if t.dim() < 3:
        return None
    order = (0,) + tuple(range(2, t.dim())) + (1,)
    inverse = tuple(order.index(d) for d in range(t.dim()))
    return t.permute(order).contiguous().permute(inverse)


def _at_offset(t):
    """The values of ``t`` in a slice starting one row into a larger buffer."""
    if t.dim() == 0:
        return None
    buffer = mt.zeros((t.shape[0] + 1,) + tuple(t.shape[1:]), dtype=t.dtype)
    buffer[1:] = t
    return buffer[1:]


def _transposed(t):
    return transposed_layout(t) if t.dim() == 2 else None


def _as_4d(name, args, kwargs):
    """The sample of an elementwise op with its tensors of one shape and fewer than 3 dims
    reshaped to (1, p, n / p, 1) (p the smallest prime factor of their n elements), so
    that a channels-last layout permutes two dims of size > 1; else the sample as it is."""
    op = REGISTRY[name].inplace_of or REGISTRY[name]
    tensors = [t for t in _tensors([args, kwargs]) if t.numel() > 1]
    if op.family != "pointwise" or not tensors or \
            len({tuple(t.shape) for t in tensors}) != 1 or tensors[0].dim() >= 3:
        return args, kwargs
    n = tensors[0].numel()
    p = next(p for p in range(2, n + 1) if n % p == 0)
    if p == n:
        return args, kwargs

    def reshaped(x):
        if isinstance(x, TensorBase) and x.numel() > 1:
            return x.reshape(1, p, n // p, 1)
        if isinstance(x, (list, tuple)):
            return type(x)(reshaped(v) for v in x)
        return x
    return list(reshaped(args)), {k: reshaped(v) for k, v in kwargs.items()}


LAYOUTS = {"transposed": _transposed, "channels_last": _channels_last, "offset": _at_offset}


def _layout_cases():
    """Each pointwise or reduction op's first three samples (an in-place variant's first:
    its base op has the others), in each layout: the layout rule is one per family."""
    cases = [case for case in CASES
             if (REGISTRY[case.values[0]].inplace_of or REGISTRY[case.values[0]]).family
             in ("pointwise", "reduction")
             and case.values[1] < (1 if _is_inplace(REGISTRY[case.values[0]]) else 3)]
    return [param for layout in LAYOUTS
            for param in _params([pytest.param(*case.values, layout, id=case.id)
                                  for case in cases],
                                 KNOWN_NONCONTIGUOUS_DIFFERENCES, f"-{layout}")]


@pytest.mark.parametrize("name, index, layout", _layout_cases())
def test_noncontiguous_inputs_layout_matches_torch(name, index, layout):
    args, kwargs = _sample(name, index)
    if layout == "channels_last":
        args, kwargs = _as_4d(name, args, kwargs)
    relayout = LAYOUTS[layout]
    changed = False

    def rebuild(x):
        nonlocal changed
        if isinstance(x, TensorBase) and x.numel() > 1:
            new = relayout(x)
            if new is not None:
                changed = True
                return new
        if isinstance(x, (list, tuple)):
            return type(x)(rebuild(v) for v in x)
        return x
    args, kwargs = list(rebuild(args)), {k: rebuild(v) for k, v in kwargs.items()}
    if not changed:
        pytest.skip(f"no input takes the {layout} layout")
    ran = _run_both(name, args, kwargs)
    if ran is None:
        return
    result, expected = ran[:2]
    op = REGISTRY[name]
    _assert_matches_torch(result, expected, not op.random)
    for ours, theirs, where in _pairs(result, expected):
        _assert_same_layout(ours, theirs, where)


# ------------------------------------------------------------------ what users see of it

def test_result_computed_as_a_view_of_a_temporary_is_not_a_view():
    """A result that is a view of the op's own temporary (kron's reshaped product, stack's
    split cat) is a tensor of its own: detach_() and an in-place change in grad mode after
    a call in no_grad mode are allowed, as in PyTorch."""
    a, b = mt.randn(2, 2), mt.randn(2, 2)
    with mt.no_grad():
        product = mt.kron(a, b)
    x = mt.randn(4, 4, requires_grad=True)
    product.add_(x)
    product.sum().backward()
    assert mt.equal(x.grad, mt.ones(4, 4))
    stacked = mt.stack([a, b], 1)
    assert stacked._base is None
    stacked.detach_()
    for t in (mt.rot90(a), mt.quantile(a, 0.5), mt.histc(a, 4)):
        assert t._base is None


def test_channel_shuffle_never_shares_the_input_memory():
    x = mt.randn(1, 4, 2, 3)
    for groups in (1, 2, 4):
        shuffled = mt.nn.functional.channel_shuffle(x, groups)
        assert shuffled.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        expected = torch.nn.functional.channel_shuffle(torch.from_numpy(np.array(x._array())),
                                                       groups)
        np.testing.assert_array_equal(np.array(shuffled._array()), expected.numpy())


def test_saved_statistics_and_permutations_do_not_require_grad():
    x = mt.randn(3, 4, dtype=mt.float64, requires_grad=True)
    out, mean, rstd = mt.native_layer_norm(x, (4,), None, None, 1e-5)
    assert out.requires_grad and not mean.requires_grad and not rstd.requires_grad
    out, mean, invstd = mt.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5)
    assert out.requires_grad and not mean.requires_grad and not invstd.requires_grad
    P, L, U = mt.linalg.lu(x)
    assert not P.requires_grad and P.grad_fn is None and L.requires_grad and U.requires_grad
