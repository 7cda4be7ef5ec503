"""vmap: every registered op against a Python loop over samples (single and nested, random
in_dims, non-contiguous physical layouts, no silent fallback), the per-sample semantics
of layouts (clone/contiguous/as_strided/new_empty_strided), in-place and randomness rules,
the API's errors, batched gradients, and comparisons with torch.func.vmap."""
import random
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor.ops import REGISTRY, dispatch
from microtensor.testing import noncontiguous, samples_of
from microtensor.vmap import BatchedTensor

try:
    import torch
    from torch.func import vmap as torch_vmap
except ImportError:  # the torch comparisons skip themselves
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the test oracle) is not installed")
FALLBACK = "Batching rule not implemented"


# --------------------------------------------------------------------------- helpers

def to_np(t):
    return np.array(t.detach()._array()) if isinstance(t, mt.Tensor) else np.asarray(t)


def assert_same(actual, expected, what="", values=True):
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), what
        for a, e in zip(actual, expected):
            assert_same(a, e, what, values)
        return
    if expected is None:
        assert actual is None, what
        return
    a, e = to_np(actual), to_np(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    assert a.dtype == e.dtype, f"{what}: dtype {a.dtype} != {e.dtype}"
    if values:
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-8, equal_nan=True, err_msg=what)


def stack_np(results):
    first = results[0]
    if isinstance(first, (tuple, list)):
        return tuple(stack_np([r[i] for r in results]) for i in range(len(first)))
    if first is None:
        return None
    return np.stack([to_np(r) for r in results])


def op_function(op):
    if op.kind == "composite":
        return op.kernel
    return lambda *args, **kwargs: dispatch.call(op, args, kwargs)


def sample_batch(t, size, rng):
    """``size`` per-sample versions of ``t`` (floats scaled so domains are kept) stacked
    physically at a random dim, sometimes in a non-contiguous buffer: (physical, in_dim)."""
    base = to_np(t)
    if t.dtype.is_floating_point:
        rows = [base * (1 - 0.1 * i) for i in range(size)]
    else:
        rows = [base] * size
    physical = mt.from_numpy(np.ascontiguousarray(np.stack(rows)))
    if rng.random() < 0.3:
        physical = noncontiguous(physical)
    d = rng.randrange(0, t.dim() + 1)
    physical = physical.movedim(0, d)
    if rng.random() < 0.5:
        d -= t.dim() + 1
    return physical, d


def tensor_slots(args):
    """Where the tensors of ``args`` are: ``(i, None)`` for a tensor argument, ``(i, j)``
    for element ``j`` of a list or tuple argument (cat's tensors, index's indices).
    Boolean masks among indices are left out: per sample they select data-dependent
    counts (see test_index_with_masks_that_differ_per_sample)."""
    slots = []
    for i, a in enumerate(args):
        if isinstance(a, mt.Tensor):
            slots.append((i, None))
        elif isinstance(a, (list, tuple)):
            slots.extend((i, j) for j, x in enumerate(a)
                         if isinstance(x, mt.Tensor) and x.dtype is not mt.bool)
    return slots


def slot_value(args, slot):
    i, j = slot
    return args[i] if j is None else args[i][j]


def set_slot(values, slot, value):
    """Set ``slot`` of the argument list ``values`` (a list or tuple argument is copied)."""
    i, j = slot
    if j is None:
        values[i] = value
    else:
        items = list(values[i])
        items[j] = value
        values[i] = type(values[i])(items)


def no_dims(args):
    """``in_dims`` batching nothing, in the structure of ``args``: a list or tuple of
    tensors gets a list or tuple of dims, as vmap expects."""
    return [type(a)(None for _ in a) if isinstance(a, (list, tuple)) else None for a in args]


def select(value, dim, i):
    """Sample ``i`` of ``value`` batched at ``dim`` (a list of dims for a list value)."""
    if isinstance(dim, (list, tuple)):
        return type(value)(select(v, d, i) for v, d in zip(value, dim))
    return value if dim is None else value.select(dim, i)


def is_batched(in_dims):
    return any(is_batched(d) if isinstance(d, (list, tuple)) else d is not None
               for d in in_dims)


def loop_reference(fn, args, kwargs, in_dims, size):
    results = []
    for i in range(size):
        results.append(fn(*[select(a, d, i) for a, d in zip(args, in_dims)], **kwargs))
    return stack_np(results)


def clone_arg(a):
    if isinstance(a, mt.Tensor):
        return a.clone()
    if isinstance(a, (list, tuple)):
        return type(a)(clone_arg(x) for x in a)
    return a


def clone_args(args):
    return [clone_arg(a) for a in args]


def assert_compared(name, compared):
    """A sweep that compared no batched result would pass without testing anything."""
    assert compared, f"{name}: no sample gave a batched result to compare"


# Ops whose per-sample result is not defined by a loop over samples: uninitialised memory,
# and as_strided (offsets are read inside each sample: see test_as_strided_*).
VALUES_UNDEFINED = {"empty_like", "new_empty", "new_empty_strided", "empty_strided"}
NOT_A_LOOP = {"as_strided", "as_strided_", "as_strided_copy"}
# Each sample selects a data-dependent number of elements: the loop fallback, on purpose.
FALLBACK_ON_PURPOSE = {"masked_select"}
# The result shape depends on the values: vmap raises torch.func's "dynamic shape" error
# (test_selection2.py checks it), so there is no batched result to compare.
DYNAMIC_SHAPE = {"nonzero", "unique", "argwhere", "unique_consecutive", "bincount"}


def sweep_names():
    return sorted(name for name, op in REGISTRY.items()
                  if op.samples and not op.random and name not in NOT_A_LOOP
                  and name not in DYNAMIC_SHAPE)


def returns_tensors(value):
    """A tensor, or a non-empty tuple or list of them (nested: ``histogramdd``'s edges)."""
    if isinstance(value, mt.Tensor):
        return True
    return isinstance(value, (tuple, list)) and value and all(returns_tensors(v)
                                                             for v in value)


# --------------------------------------------------------------------------- every op

def samples_returning_tensors(name, salt=""):
    """``(sample, args, kwargs)`` for each sample of op ``name`` that runs unbatched and
    returns tensors (the samples that only check errors are left out)."""
    fn = op_function(REGISTRY[name])
    for sample in samples_of(name, salt=salt):
        args, kwargs = list(sample.args), dict(sample.kwargs)
        try:
            plain = fn(*clone_args(args), **kwargs)
        except Exception:        # samples that only check errors
            continue
        if returns_tensors(plain):
            yield sample, args, kwargs


@pytest.mark.parametrize("name", sweep_names())
def test_op_matches_loop(name):
    op = REGISTRY[name]
    fn = op_function(op)
    rng = random.Random(name)
    size = 3
    compared = 0
    for sample, args, kwargs in samples_returning_tensors(name):
        slots = tensor_slots(args)
        for trial in range(2):
            in_dims = no_dims(args)
            batched = list(args)
            for slot in slots:
                must = op.kind == "inplace" and slot == (0, None)
                if must or (trial == 0 and slot == slots[0]) or rng.random() < 0.6:
                    physical, dim = sample_batch(slot_value(args, slot), size, rng)
                    set_slot(batched, slot, physical)
                    set_slot(in_dims, slot, dim)
            if not is_batched(in_dims):
                continue
            what = f"{name} {sample} in_dims={in_dims}"
            expected_inputs = clone_args(batched)
            expected = loop_reference(fn, expected_inputs, kwargs, in_dims, size)
            actual_inputs = clone_args(batched)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore" if name in FALLBACK_ON_PURPOSE else "error",
                                        message=FALLBACK)
                actual = mt.vmap(lambda *a: fn(*a, **kwargs), in_dims=tuple(in_dims))(
                    *actual_inputs)
            assert_same(actual, expected, what, name not in VALUES_UNDEFINED)
            if op.kind == "inplace":
                assert_same(actual_inputs[0], expected_inputs[0], what + " (mutated self)")
            compared += 1
    assert_compared(name, compared)


@pytest.mark.parametrize("name", sweep_names())
def test_op_nested_vmap_matches_loop(name):
    """The first tensor (of a list argument too) batched over (2, 3) with the inner batch
    dim last; the other tensors batched by the outer vmap only."""
    op = REGISTRY[name]
    fn = op_function(op)
    outer, inner = 2, 3
    compared = 0
    for sample in samples_of(name, salt=":vmap(grad)")[:3]:
        args, kwargs = list(sample.args), dict(sample.kwargs)
        try:
            plain = fn(*clone_args(args), **kwargs)
        except Exception:
            continue
        slots = tensor_slots(args)
        if not returns_tensors(plain) or not slots:
            continue
        batched, outer_dims, inner_dims = list(args), no_dims(args), no_dims(args)
        for slot in slots:
            value = slot_value(args, slot)
            base = to_np(value)
            if slot == slots[0]:
                scale = (1 - 0.1 * np.arange(outer * inner)).reshape(outer, inner,
                                                                      *([1] * base.ndim))
                rows = base * scale if value.dtype.is_floating_point else \
                    np.broadcast_to(base, (outer, inner) + base.shape)
                set_slot(batched, slot, mt.from_numpy(
                    np.ascontiguousarray(rows).astype(base.dtype)).movedim(1, -1))
                set_slot(inner_dims, slot, -1)
            else:
                set_slot(batched, slot, mt.from_numpy(np.ascontiguousarray(
                    np.broadcast_to(base, (outer,) + base.shape))))
            set_slot(outer_dims, slot, 0)

        def per_sample(*a):
            return fn(*a, **kwargs)
        expected = stack_np([
            loop_reference(per_sample, [select(a, d, i) for a, d in
                                        zip(clone_args(batched), outer_dims)],
                           {}, inner_dims, inner)
            for i in range(outer)])
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore" if name in FALLBACK_ON_PURPOSE else "error",
                                    message=FALLBACK)
            inner_vmap = mt.vmap(per_sample, in_dims=tuple(inner_dims))
            actual = mt.vmap(inner_vmap, in_dims=tuple(outer_dims))(*clone_args(batched))
        assert_same(actual, expected, f"{name} nested {sample}", name not in VALUES_UNDEFINED)
        compared += 1
    assert_compared(name, compared)


def list_argument_ops():
    """Ops with a sample whose list (or tuple) argument holds two or more tensors (cat's
    tensors, einsum's operands, index's indices)."""
    def has_list(sample):
        return any(isinstance(a, (list, tuple)) and
                   sum(isinstance(x, mt.Tensor) for x in a) >= 2 for a in sample.args)
    return sorted(name for name in sweep_names()
                  if any(has_list(s) for s in samples_of(name, salt=":lists")))


def list_patterns(count):
    """Which elements of a list of ``count`` tensors are batched, and at which in_dim
    (an int: element j's dim j mod (rank + 1), negative for odd j; or "last")."""
    patterns = [{j: j for j in range(count)}, {0: "last"}, {count - 1: 0}]
    if count >= 3:
        patterns.append({j: "last" for j in range(0, count, 2)})
    return patterns


def test_list_argument_ops_are_found():
    assert {"cat", "stack", "hstack", "vstack", "_cat", "_einsum"} <= set(list_argument_ops())


@pytest.mark.parametrize("name", list_argument_ops())
def test_list_elements_batched_one_by_one_match_loop(name):
    """The tensors inside a list argument batched element by element: all of them at
    different in_dims, only the first, only the last, every other one; the other tensor
    arguments unbatched (but an in-place op's ``self``, which must hold every sample).
    Never the loop fallback."""
    op = REGISTRY[name]
    fn = op_function(op)
    size = 3
    compared = 0
    for sample, args, kwargs in samples_returning_tensors(name, salt=":lists"):
        for position, value in enumerate(args):
            slots = [s for s in tensor_slots(args) if s[0] == position and s[1] is not None]
            if not isinstance(value, (list, tuple)) or len(slots) < 2:
                continue
            for pattern in list_patterns(len(slots)):
                batched, in_dims = list(args), no_dims(args)
                if op.kind == "inplace":
                    batched[0], in_dims[0] = sample_batch(args[0], size, random.Random(0))
                for n, dim in pattern.items():
                    slot = slots[n]
                    element = slot_value(args, slot)
                    physical = mt.from_numpy(np.ascontiguousarray(np.stack(
                        [to_np(element) * (1 if not element.dtype.is_floating_point else
                                           1 - 0.1 * i) for i in range(size)])))
                    rank = element.dim()
                    d = rank if dim == "last" else n % (rank + 1) - (rank + 1) * (n % 2)
                    set_slot(batched, slot, physical.movedim(0, d))
                    set_slot(in_dims, slot, d)
                what = f"{name} {sample} in_dims={in_dims}"
                expected = loop_reference(fn, clone_args(batched), kwargs, in_dims, size)
                with warnings.catch_warnings():
                    warnings.filterwarnings("error", message=FALLBACK)
                    actual = mt.vmap(lambda *a: fn(*a, **kwargs), in_dims=tuple(in_dims))(
                        *clone_args(batched))
                assert_same(actual, expected, what)
                compared += 1
    assert_compared(name, compared)


def to_torch(value):
    if isinstance(value, mt.Tensor):
        return torch.from_numpy(to_np(value).copy())
    if isinstance(value, (list, tuple)):
        return type(value)(to_torch(v) for v in value)
    if isinstance(value, dict):
        return {k: to_torch(v) for k, v in value.items()}
    if isinstance(value, mt.dtype):
        return getattr(torch, value.name)
    return value


# Ops compared with torch.nn.functional's function of the same name: torch's own ops of
# these names read ``reduction`` as an int enum (torch.hinge_embedding_loss reduces
# nothing by default), or torch has none
NN_FUNCTIONAL = {"softshrink", "soft_margin_loss", "multilabel_soft_margin_loss",
                 "hinge_embedding_loss", "multi_margin_loss", "multilabel_margin_loss",
                 "triplet_margin_with_distance_loss"}


def torch_callable(name):
    if name in NN_FUNCTIONAL:
        return getattr(torch.nn.functional, name)
    if hasattr(torch, name):
        return getattr(torch, name)
    if hasattr(torch.Tensor, name):
        return getattr(torch.Tensor, name)
    return None


# Not comparable: private ops and ops whose samples pass index tuples/lists torch reads
# differently; and two where torch.func.vmap disagrees with plain torch on one sample
# (argmax/argmin(keepdim=True) without dim: (1,) instead of (1, 1, 1), aminmax's the same;
# index_select with a batched 0-d index: the whole row instead of one element), where
# microtensor follows the per-sample result; column_stack, as_strided_scatter and
# chain_matmul, which torch.func.vmap refuses on every sample; svd, whose singular vectors
# are defined up to sign.  torch.func.vmap's grid_sampler puts the batch dim second when
# input and grid are batched at different dims (the per-sample loop puts it first, as
# here); PyTorch's CPU ctc_loss reads non-contiguous concatenated targets as if contiguous.
TORCH_DIFFERS = {"index", "index_put", "index_put_", "_cat", "split", "split_with_sizes",
                 "argmax", "argmin", "index_select", "aminmax", "column_stack",
                 "as_strided_scatter", "chain_matmul", "svd", "grid_sampler", "ctc_loss"}
TORCH_DIFFERS |= {"split_copy", "split_with_sizes_copy", "unsafe_split_with_sizes"}
# torch.func.vmap refuses every call of these ("we do not yet support aten::rrelu",
# "Batching rule not implemented for aten::histogramdd", "... aten::split_copy.Tensor"):
# nothing to compare (test_op_matches_loop checks them against the loop)
TORCH_VMAP_REFUSES = {"rrelu", "histogramdd", "split_copy"}


@needs_torch
@pytest.mark.parametrize("name", sorted(n for n in sweep_names() if not n.startswith("_")
                                        and n not in TORCH_DIFFERS | VALUES_UNDEFINED
                                        | TORCH_VMAP_REFUSES))
def test_op_matches_torch_vmap(name):
    """Where torch.func.vmap computes the op, the values agree; where it refuses, the
    refusal is recorded (microtensor may define the call per sample)."""
    op = REGISTRY[name]
    fn, torch_fn = op_function(op), torch_callable(name)
    if torch_fn is None:
        pytest.skip(f"torch has no {name}")
    rng = random.Random(name)
    compared = 0
    for sample in samples_of(name):
        args, kwargs = list(sample.args), dict(sample.kwargs)
        try:
            plain = fn(*clone_args(args), **kwargs)
        except Exception:
            continue
        if not returns_tensors(plain):
            continue
        in_dims = no_dims(args)
        batched = list(args)
        for n, slot in enumerate(tensor_slots(args)):
            if n == 0 or rng.random() < 0.5:
                physical, dim = sample_batch(slot_value(args, slot), 3, rng)
                set_slot(batched, slot, physical)
                set_slot(in_dims, slot, dim)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected = torch_vmap(lambda *a: torch_fn(*a, **to_torch(kwargs)),
                                      in_dims=tuple(in_dims))(*to_torch(clone_args(batched)))
        except Exception:
            continue             # torch refuses this call under vmap
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=FALLBACK)
            actual = mt.vmap(lambda *a: fn(*a, **kwargs), in_dims=tuple(in_dims))(
                *clone_args(batched))
        if isinstance(expected, torch.Tensor):
            expected = expected.resolve_conj().numpy()
        else:
            expected = tuple(e.resolve_conj().numpy() for e in expected)
        a, e = actual, expected
        shapes_a = [tuple(x.shape) for x in (a if isinstance(a, (tuple, list)) else (a,))]
        shapes_e = [tuple(x.shape) for x in (e if isinstance(e, tuple) else (e,))]
        assert shapes_a == shapes_e, f"{name} {sample}"
        for x, y in zip(a if isinstance(a, (tuple, list)) else (a,),
                        e if isinstance(e, tuple) else (e,)):
            exact = np.result_type(y.dtype, np.float64)    # complex128 for complex values
            np.testing.assert_allclose(to_np(x).astype(exact), y.astype(exact),
                                       rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=name)
        compared += 1
    assert_compared(name, compared)


def test_every_registered_op_has_a_rule():
    """Every op vmap batches resolves to the rule declared with it (its base op's for an
    in-place variant), in the module of its kernel, or to its family's rule; only the ops
    marked as taking the loop on purpose resolve to the fallback."""
    from microtensor.vmap.fallback import fallback
    from microtensor.vmap.rules import FAMILY_RULES, rule_for
    missing, misplaced = [], []
    for name, op in REGISTRY.items():
        if op.kind == "composite" or op.random:
            continue
        base = op.inplace_of or op
        declared = op.batch_rule or base.batch_rule
        if name in FALLBACK_ON_PURPOSE:
            assert declared is fallback and rule_for(op) is fallback, name
            continue
        expected = declared or FAMILY_RULES.get(op.family)
        if expected is None or rule_for(op) is not expected:
            missing.append(name)
        elif declared and declared.__module__ != base.kernel.__module__:
            misplaced.append(name)
    assert missing == [] and misplaced == []


def test_the_rule_helpers_import_no_op_module():
    """Ops modules import ``vmap.helpers`` (and the family rules) while ``microtensor.ops``
    is being imported, so those modules may import from ``ops`` only what loads no ops
    module with batching rules: the registry, the dispatcher (and ``factory``, for the
    random-op rule, which declares no rule importing them back)."""
    import ast
    import os
    folder = os.path.join(os.path.dirname(mt.__file__), "vmap")
    allowed = {"microtensor.ops.dispatch", "microtensor.ops.registry", "microtensor.ops.factory"}
    for name in ("batched.py", "helpers.py", "fallback.py", "rules.py"):
        with open(os.path.join(folder, name)) as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module.startswith("microtensor.ops"):
                modules = {node.module} if node.module != "microtensor.ops" else \
                    {f"microtensor.ops.{a.name}" for a in node.names}
                assert modules <= allowed, (name, modules)


def test_a_rule_declared_with_the_op_comes_first():
    from microtensor.ops.registry import Op
    from microtensor.vmap import rules

    def kernel(self):
        return self + 1

    def batch_rule(op, level, args, kwargs):
        seen.append(op.name)
        return rules.FAMILY_RULES["pointwise"](op, level, args, kwargs)
    seen = []
    declared = Op("test_declared_rule", kernel, family="reduction", batch_rule=batch_rule)
    decorated = Op("test_decorated_rule", kernel, family="reduction")
    assert decorated.def_batch_rule(batch_rule) is decorated
    x = mt.arange(6.0).reshape(3, 2)
    try:
        for op in (declared, decorated):
            result = mt.vmap(lambda t: dispatch.call(op, (t,), None))(x)
            assert_same(result, to_np(x) + 1)
            assert rules.rule_for(op) is batch_rule
    finally:
        rules._resolved.pop(declared, None)
        rules._resolved.pop(decorated, None)
    assert seen == ["test_declared_rule", "test_decorated_rule"]


def test_sweeps_batch_the_tensors_inside_lists():
    a, b, c, mask = mt.ones(2), mt.ones(3), mt.ones(1), mt.ones(2, dtype=mt.bool)
    args = [[a, b], 3, c, (None, c, mask)]
    assert tensor_slots(args) == [(0, 0), (0, 1), (2, None), (3, 1)]
    in_dims = no_dims(args)
    set_slot(in_dims, (0, 1), 0)
    assert in_dims == [[None, 0], None, None, (None, None, None)] and is_batched(in_dims)
    with pytest.raises(AssertionError, match="no sample gave a batched result"):
        assert_compared("cat", 0)


def index_put(s, indices, values, accumulate=False):
    """``index_put`` with None entries (full slices): microtensor's op, or ATen's for torch
    (whose ``Tensor.index_put`` takes tensors only)."""
    if isinstance(s, mt.Tensor):
        return s.index_put(indices, values, accumulate)
    return torch.ops.aten.index_put(s, list(indices), values, accumulate)


INDEXING_PER_SAMPLE = {   # per sample: s (4, 5, 4), i (2,), v (2, 4)
    "leading index": lambda s, i, v: s[i],
    "index after a slice": lambda s, i, v: s[:, i],
    "non-adjacent indices": lambda s, i, v: s[i, :, i],
    "beside a fixed mask": lambda s, i, v: s[:, i, s.new_tensor([1, 0, 0, 1]).bool()],
    "index_put after a slice": lambda s, i, v: index_put(s, (None, i), v),
    "index_put accumulating": lambda s, i, v: index_put(s, (i,), v[:, None], True),
    "index_put non-adjacent": lambda s, i, v: index_put(s, (i, None, i), v[:, :1]),
}


@needs_torch
@pytest.mark.parametrize("name", list(INDEXING_PER_SAMPLE))
@pytest.mark.parametrize("in_dims", [(0, 0, 0), (None, 1, None), (2, 0, None)])
def test_index_tensors_that_differ_per_sample_match_torch_vmap(name, in_dims):
    fn = INDEXING_PER_SAMPLE[name]
    rng = np.random.default_rng(0)
    arrays = (rng.standard_normal((3, 4, 5, 4)), np.array([[0, 3], [2, 2], [1, 0]]),
              rng.standard_normal((3, 2, 4)))
    arrays = [np.moveaxis(x, 0, d) if d is not None else x[0] for x, d in zip(arrays, in_dims)]
    results = []
    for lib, vmap in ((mt, mt.vmap), (torch, torch_vmap)):
        args = [lib.from_numpy(np.ascontiguousarray(x)) for x in arrays]
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=FALLBACK)
            results.append(np.asarray(vmap(fn, in_dims=in_dims)(*args)))
    np.testing.assert_array_equal(results[0], results[1])


def test_index_with_masks_that_differ_per_sample():
    """Each sample's mask may select a different number of elements: ``index`` runs the
    loop (warning) and is right when the counts agree; ``index_put`` refuses."""
    x = mt.randn(3, 4)
    masks = mt.tensor([[True, False, True, False], [False, True, True, False],
                       [True, True, False, False]])
    with pytest.warns(UserWarning, match=FALLBACK):
        picked = mt.vmap(lambda s, m: s[m])(x, masks)
    assert_same(picked, stack_np([x[b][masks[b]] for b in range(3)]))
    with pytest.raises(RuntimeError, match="boolean masks that differ per sample"):
        mt.vmap(lambda s, m: s.index_put((m,), mt.tensor(0.0)))(x, masks)


# --------------------------------------------------------------------------- the fallback

def test_fallback_warns_and_is_correct():
    from microtensor.ops.registry import Op
    from microtensor.vmap import rules

    def kernel(self):
        return mt.from_numpy(np.cumsum(self._array(), axis=-1))
    op = Op("test_cumsum_without_rule", kernel)
    x = mt.randn(4, 5)
    with pytest.warns(UserWarning, match="falling back to slow"):
        result = mt.vmap(lambda t: dispatch.call(op, (t,), None), in_dims=1)(x)
    assert_same(result, np.cumsum(to_np(x).T, axis=-1))
    rules._resolved.pop(op, None)


def test_function_fallback_loops_over_samples():
    from microtensor.vmap.fallback import function_fallback

    def reads_memory(t):           # like a custom Function whose forward uses NumPy
        return mt.from_numpy(np.sort(t.numpy()))
    x = mt.randn(3, 5)

    def f(t):
        assert function_fallback(reads_memory, (x[0],)) is None   # nothing batched
        return function_fallback(reads_memory, (t,))
    with pytest.warns(UserWarning, match="falling back to slow"):
        result = mt.vmap(f)(x)
    assert_same(result, np.sort(to_np(x), axis=-1))


def test_fallback_refuses_views_and_inplace():
    from microtensor.ops.registry import Op

    def kernel(self):
        return self
    view_op = Op("test_view_without_rule", kernel, kind="view")
    with pytest.raises(RuntimeError, match="the fallback path doesn't work on out= or view ops"):
        mt.vmap(lambda t: dispatch.call(view_op, (t,), None))(mt.randn(3, 2))


# --------------------------------------------------------------------------- per-sample layout

def test_stride_and_contiguity_are_per_sample():
    seen = {}

    def record(x):
        seen["stride"] = x.stride()
        seen["contiguous"] = x.is_contiguous()
        return x
    mt.vmap(record)(mt.randn(3, 2, 5, 7))
    assert seen == {"stride": (35, 7, 1), "contiguous": True}
    mt.vmap(record)(mt.randn(2, 3, 5, 7).movedim(1, 0))
    assert seen == {"stride": (105, 7, 1), "contiguous": False}
    mt.vmap(record, in_dims=2)(mt.randn(2, 7, 3))
    assert seen["contiguous"] is False


def test_clone_contiguous_format_makes_each_sample_contiguous():
    f = lambda x: x.clone(memory_format=mt.contiguous_format)  # noqa: E731
    x = mt.randn(2, 3, 7)
    y = mt.vmap(f, in_dims=1, out_dims=1)(x)
    assert y.shape == (2, 3, 7) and y.stride() == (7, 14, 1)
    assert y[:, 0].is_contiguous() and y.movedim(1, 0).is_contiguous()
    assert_same(y, x)
    preserved = mt.vmap(lambda x: x.clone(), in_dims=1, out_dims=1)(x)
    assert preserved.stride() == (21, 7, 1) and not preserved[:, 0].is_contiguous()
    nested = mt.vmap(mt.vmap(f, in_dims=2), in_dims=1)(mt.randn(2, 3, 7, 5))
    assert nested.shape == (3, 5, 2, 7) and nested.is_contiguous()
    assert nested[0][0].is_contiguous()


def test_contiguous_returns_input_when_each_sample_is_contiguous():
    x = mt.randn(3, 2, 5, 7).movedim(0, 2)
    assert mt.vmap(lambda t: t.contiguous(), in_dims=2, out_dims=2)(x) is x
    y = mt.vmap(lambda t: t.contiguous(), in_dims=1, out_dims=1)(mt.randn(2, 3, 7))
    assert y[:, 0].is_contiguous()


def test_channels_last_acts_on_each_sample():
    x = mt.randn(2, 3, 4, 5, 6)
    y = mt.vmap(lambda t: t.contiguous(memory_format=mt.channels_last))(x)
    assert all(y[i].is_contiguous(memory_format=mt.channels_last) for i in range(2))
    assert y.stride()[0] == 3 * 4 * 5 * 6
    assert_same(y, x)
    flags = mt.vmap(lambda t: mt.tensor(0.0) + t.is_contiguous(mt.channels_last))
    assert_same(flags(y), np.ones(2, dtype=np.float32))
    z = mt.vmap(lambda t: t.clone(memory_format=mt.channels_last), in_dims=4)(x)
    assert z[0].is_contiguous(memory_format=mt.channels_last)
    with pytest.raises(RuntimeError, match="rank 4"):
        mt.vmap(lambda t: t.clone(memory_format=mt.channels_last))(mt.randn(2, 3))


@pytest.mark.parametrize("size,stride,extent", [
    ((2, 3, 5), (15, 5, 1), 30), ((2, 3, 5), (0, 5, 1), 15), ((2, 3, 4), (12, 4, 1), 24),
    ((2, 3, 4), (2, 4, 6), 29), ((2, 3, 4), (0, 0, 0), 1), ((0, 2, 0), (12, 4, 1), 0)])
def test_new_empty_strided(size, stride, extent):
    f = lambda x: x.new_empty_strided(size, stride)  # noqa: E731
    single = mt.vmap(f)(mt.randn(7))
    assert single.shape == (7,) + size and single.stride() == (extent,) + stride
    double = mt.vmap(mt.vmap(f))(mt.randn(7, 11))
    assert double.shape == (7, 11) + size
    assert double.stride() == (11 * extent, extent) + stride
    permuted = mt.vmap(mt.vmap(f), in_dims=1)(mt.randn(11, 7))
    assert permuted.stride() == (11 * extent, extent) + stride
    with pytest.raises(RuntimeError, match="must match dimensionality of strides"):
        mt.vmap(lambda x: x.new_empty_strided((2, 3), (1,)))(mt.randn(7))


def as_strided_inputs():
    b0 = 5
    return [mt.randn(b0, 2, 3), mt.randn(b0, 3, 2).transpose(1, 2), mt.randn(2, b0, 2, 3)[1],
            mt.randn(b0, 2, 4, 3, 7)[:, :, 0, :, 0], mt.randn(b0, 2, 4, 3, 7)[:, :, 2, :, 1]]


@pytest.mark.parametrize("index", range(5))
def test_as_strided_reads_inside_each_sample(index):
    x = as_strided_inputs()[index]
    s0, s1 = x.stride()[1:]
    offset = x.storage_offset()
    cases = [(([5, 5, 2, 3], [0, 0, s0, s1], offset), lambda t: t.expand(5, 5, 2, 3)),
             (([3, 2], [s1, s0], offset), lambda t: t.transpose(0, 1)),
             (([2], [s0], offset + s1), lambda t: t[:, 1])]
    for (size, stride, off), expected in cases:
        result = mt.vmap(lambda t: t.as_strided(size, stride, off))(x)
        reference = mt.vmap(expected)(x)
        assert result._base is reference._base
        assert_same(result, reference)
    nested = mt.randn(7, 5, 2, 3)
    s0, s1 = nested.stride()[2:]
    result = mt.vmap(mt.vmap(lambda t: t.as_strided([5, 5, 2, 3], [0, 0, s0, s1])),
                     in_dims=1)(nested)
    assert_same(result, mt.vmap(mt.vmap(lambda t: t.expand(5, 5, 2, 3)), in_dims=1)(nested))


def test_as_strided_errors():
    with pytest.raises(RuntimeError, match="size and stride must have the same length"):
        mt.vmap(lambda x: x.as_strided([1, 1, 1], [1, 1]))(mt.randn(5, 2, 3).transpose(0, 1))
    escapes = [(mt.randn(5, 3), lambda x: x.as_strided([3], [1], 1)),
               (mt.randn(5, 3, 5), lambda x: x.as_strided([4, 4], [4, 1], 0)),
               (mt.randn(2, 5, 3)[1], lambda x: x.as_strided([3], [1], 5 * 3 - 1)),
               (mt.randn(5, 0, 3), lambda x: x.as_strided([3], [1]))]
    for x, f in escapes:
        with pytest.raises(RuntimeError, match="This is not supported inside of vmap"):
            mt.vmap(f)(x)
    with pytest.raises(RuntimeError, match="This is not supported inside of vmap"):
        mt.vmap(mt.vmap(lambda x: x.as_strided([4, 4], [4, 1], 0)))(mt.randn(5, 7, 3, 5))


@needs_torch
@pytest.mark.parametrize("in_dim", [0, 1, 2])
def test_as_strided_matches_torch_on_any_layout(in_dim):
    data = np.random.default_rng(in_dim).standard_normal((4, 3, 5))
    calls = [lambda t: t.as_strided((2, 2), (1, 2)), lambda t: t.as_strided((3,), (2,), 1)]
    for call in calls:
        x = mt.from_numpy(data).movedim(0, in_dim)
        y = torch.from_numpy(data).movedim(0, in_dim)
        try:
            expected = torch_vmap(call, in_dims=in_dim)(y).numpy()
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match="not supported inside of vmap"):
                mt.vmap(call, in_dims=in_dim)(x)
            assert "not supported inside of vmap" in str(e)
            continue
        assert_same(mt.vmap(call, in_dims=in_dim)(x), expected)


# --------------------------------------------------------------------------- in-place

def test_inplace_into_unbatched_raises_and_changes_nothing():
    x, y = mt.randn(3), mt.randn(2, 3)
    before = to_np(x).copy()
    for f in (lambda a, b: a.add_(b), lambda a, b: a.copy_(b), lambda a, b: a.mul_(b),
              lambda a, b: a.__iadd__(b)):
        with pytest.raises(RuntimeError, match="is not possible because there exists a Tensor"):
            mt.vmap(f, in_dims=(None, 0))(x, y)
    with pytest.raises(RuntimeError, match="fill_.*is not possible"):
        mt.vmap(lambda a, v: a.fill_(v), in_dims=(None, 0))(mt.randn(2, 3), mt.randn(2))
    assert_same(x, before)


def test_inplace_into_batched_writes_through():
    x, y = mt.randn(3, 2), mt.randn(3)
    expected = to_np(x) + to_np(y)[:, None]
    result = mt.vmap(lambda a, b: a.add_(b), in_dims=(1, None), out_dims=1)(x, y)
    assert result is x
    assert_same(x, expected)
    z = mt.randn(4, 5)
    mt.vmap(lambda a: a.mul_(2.0).sin_())(z)
    setter = mt.randn(4, 5)
    def set_middle(row, value):
        row[1:3] = value
        return row
    mt.vmap(set_middle, in_dims=(0, None))(setter, 1.5)
    assert (to_np(setter)[:, 1:3] == 1.5).all()


def test_new_zeros_is_the_fix_for_inplace_into_a_fresh_buffer():
    def embed(vec):
        out = vec.new_zeros(3, 3)
        out.diagonal().copy_(vec)
        return out
    v = mt.randn(4, 3)
    result = mt.vmap(embed)(v)
    assert_same(result, np.stack([np.diag(r) for r in to_np(v)]))

    def broken(vec):
        out = mt.zeros(3, 3)
        out.diagonal().copy_(vec)
        return out
    with pytest.raises(RuntimeError, match="is not possible because there exists a Tensor"):
        mt.vmap(broken)(v)


# --------------------------------------------------------------------------- randomness

def test_randomness():
    x = mt.randn(4, 3)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        mt.vmap(lambda t: t + mt.rand(3))(x)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        mt.vmap(lambda t: mt.rand_like(t))(x)
    different = mt.vmap(lambda t: t * 0 + mt.rand(3), randomness="different")(x)
    rows = to_np(different)
    assert not np.allclose(rows[0], rows[1])
    same = mt.vmap(lambda t: t * 0 + mt.randn(3), randomness="same")(x)
    assert np.allclose(to_np(same), to_np(same)[0])
    like = mt.vmap(lambda t: mt.randn_like(t), randomness="different")(x)
    assert like.shape == (4, 3) and not np.allclose(to_np(like)[0], to_np(like)[1])
    ints = mt.vmap(lambda t: mt.randint(0, 10, (5,)), randomness="different")(x)
    assert ints.shape == (4, 5) and ints.dtype == mt.int64
    perms = mt.vmap(lambda t: mt.randperm(6), randomness="different")(x)
    assert all(sorted(r) == list(range(6)) for r in to_np(perms).tolist())
    chunked = mt.vmap(lambda t: t * 0 + mt.rand(3), randomness="same", chunk_size=2)(x)
    assert np.allclose(to_np(chunked), to_np(chunked)[0])
    with pytest.raises(RuntimeError, match="Only allowed values for randomness"):
        mt.vmap(lambda t: t, randomness="sometimes")


# --------------------------------------------------------------------------- the API

def test_outputs_and_dims():
    x = mt.randn(2, 3)
    identity = mt.vmap(lambda t: t, in_dims=1, out_dims=0)(x)
    assert identity._base is x and identity.shape == (3, 2)
    assert mt.vmap(lambda t: t)(x) is x
    y = mt.randn(2, 3, 5, 7)
    assert mt.vmap(lambda t: t, out_dims=-1)(y).shape == (3, 5, 7, 2)
    constant = mt.vmap(lambda t: mt.tensor(3.14))(mt.ones(3))
    assert constant.shape == (3,) and constant.stride() == (0,)
    inner = mt.randn(5)
    noop = mt.vmap(lambda a: mt.vmap(lambda b: a)(inner))(mt.randn(3))
    assert noop.shape == (3, 5) and noop.stride() == (1, 0)
    pair = mt.vmap(lambda t: (t, t * 2), out_dims=(0, 1))(x)
    assert pair[0].shape == (2, 3) and pair[1].shape == (3, 2)
    tree = mt.vmap(lambda d: {"a": d["x"] + d["y"][0]}, in_dims=({"x": 0, "y": [1]},))(
        {"x": x, "y": [x.t()]})
    assert_same(tree["a"], 2 * to_np(x))
    nested = mt.vmap(lambda a: mt.vmap(lambda b: a * b)(mt.ones(5, 3)))(mt.randn(2, 3))
    assert nested.shape == (2, 5, 3)
    chunked = mt.vmap(lambda t: t.sum(), chunk_size=2)(mt.arange(10.0).view(5, 2))
    assert_same(chunked, np.arange(10.0).reshape(5, 2).sum(1).astype(np.float32))


def test_side_effects_run_once():
    calls = []
    mt.vmap(lambda t: calls.append(1) or t * 2)(mt.randn(5, 2))
    assert calls == [1]


@pytest.mark.parametrize("call,error,match", [
    (lambda: mt.vmap(lambda x: 3.14)(mt.ones(3)), ValueError, "must only return Tensors"),
    (lambda: mt.vmap(lambda x: [x, 3])(mt.ones(3)), ValueError, "must only return Tensors"),
    (lambda: mt.vmap(mt.mul)(mt.ones(2), mt.ones(3)), ValueError,
     "Expected all tensors to have the same size in the mapped dimension"),
    (lambda: mt.vmap(lambda: 1)(), ValueError, "got no inputs"),
    (lambda: mt.vmap(lambda x: x, out_dims="lol")(mt.ones(3)), ValueError,
     "`out_dims` must be an int"),
    (lambda: mt.vmap(lambda x: (x, x), out_dims=(0, 0, 0))(mt.ones(3)), ValueError,
     "out_dims is not compatible with the structure of `outputs`"),
    (lambda: mt.vmap(lambda x: x, out_dims=2)(mt.ones(2, 3)), IndexError, "Dimension out of range"),
    (lambda: mt.vmap(lambda x: x, in_dims=[0])(mt.ones(3)), ValueError,
     "expected `in_dims` to be int or a \\(potentially nested\\) tuple"),
    (lambda: mt.vmap(mt.mul, in_dims=(0,))(mt.ones(3), mt.ones(3)), ValueError,
     "in_dims is not compatible with the structure of `inputs`"),
    (lambda: mt.vmap(lambda x, n: x, in_dims=(0, 0))(mt.ones(3), 2), ValueError,
     "Got in_dim=0 for an input but the input is of type"),
    (lambda: mt.vmap(lambda x: x, in_dims=2)(mt.ones(2, 3)), ValueError,
     "for some input, but that input is a Tensor of dimensionality 2"),
    (lambda: mt.vmap(lambda x: x, in_dims=(None,))(mt.ones(3)), ValueError, "at least one Tensor"),
    (lambda: mt.vmap(lambda x: x.item())(mt.ones(3)), RuntimeError, "calling .item\\(\\)"),
    (lambda: mt.vmap(lambda x: x if x > 0 else -x)(mt.ones(3)), RuntimeError,
     "data-dependent control flow"),
    (lambda: mt.vmap(lambda x: x.tolist())(mt.ones(3)), RuntimeError, "cannot read the values"),
    (lambda: mt.vmap(lambda x: x, chunk_size=0), ValueError, "chunk_size should be None"),
])
def test_api_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


@needs_torch
def test_api_errors_match_torch():
    cases = [(lambda x: 3.14, (0,), 0), (lambda x, y: x * y, (0, 0), 0),
             (lambda x: x, 5, 0), (lambda x: (x, x), (0,), (0, 0, 0)), (lambda x: x, (0,), "a")]
    for f, in_dims, out_dims in cases:
        n = len(in_dims) if isinstance(in_dims, tuple) else 1
        args_t = [torch.ones(2), torch.ones(3)][:n]
        args_m = [mt.ones(2), mt.ones(3)][:n]
        with pytest.raises(Exception) as torch_error:
            torch_vmap(f, in_dims=in_dims, out_dims=out_dims)(*args_t)
        with pytest.raises(type(torch_error.value)) as mt_error:
            mt.vmap(f, in_dims=in_dims, out_dims=out_dims)(*args_m)
        head = str(torch_error.value).split(":")[-1].split(".")[0].strip()[:30]
        assert head in str(mt_error.value)


# --------------------------------------------------------------------------- gradients

def test_backward_and_grad_of_batched_tensors_refused():
    x = mt.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"backward\(\) called inside vmap"):
        mt.vmap(lambda t: (t * x).sum().backward())(mt.randn(2, 3))
    with pytest.raises(RuntimeError, match=r"autograd.grad.* called inside vmap"):
        mt.vmap(lambda t: mt.autograd.grad((t * x).sum(), x))(mt.randn(2, 3))


def test_vmap_of_vjp_gives_batched_gradients():
    x = mt.randn(3, requires_grad=True)
    y = mt.randn(3)
    out = x * y
    result = mt.vmap(lambda v: mt.autograd.grad(out, x, v, retain_graph=True)[0])(mt.eye(3))
    assert_same(result, np.diag(to_np(y)))


def test_grad_of_vmap():
    w = mt.randn(3, requires_grad=True)
    xs = mt.randn(4, 3)
    loss = mt.vmap(lambda x: (x * w).sin().sum())(xs).sum()
    (g,) = mt.autograd.grad(loss, w)
    assert_same(g, (np.cos(to_np(xs) * to_np(w)) * to_np(xs)).sum(0))


@pytest.mark.parametrize("build", ["select", "manyview", "narrow"])
def test_is_grads_batched_through_copyslices(build):
    shape = (4, 4, 5) if build == "manyview" else (4, 5)
    leaf = mt.randn(*shape, requires_grad=True)

    def forward():
        base = leaf * leaf
        if build == "select":
            view = base[0]
        elif build == "manyview":
            view = base.transpose(0, 2)[1].diagonal()[::2]
        else:
            view = base.narrow(1, 1, 3)
        view.cos_()
        return base, view
    base, view = forward()
    assert type(base.grad_fn).__name__ == "CopySlices"
    for out in (view, base):
        vs = mt.randn(3, *out.shape)
        batched = mt.autograd.grad(out, leaf, vs, retain_graph=True, is_grads_batched=True)[0]
        rows = [mt.autograd.grad(out, leaf, vs[i], retain_graph=True)[0] for i in range(3)]
        assert_same(batched, np.stack([to_np(r) for r in rows]))


def test_is_grads_batched_shapes_and_errors():
    x = mt.randn(2, 2, requires_grad=True)
    out = x.clone()
    bg = mt.arange(3.0).view(3, 1, 1).expand(3, 2, 2)
    (g,) = mt.autograd.grad(out, (x,), (bg,), is_grads_batched=True)
    assert_same(g, to_np(bg))
    (g,) = mt.autograd.grad(x.sum(), (x,), (mt.arange(3.0),), is_grads_batched=True)
    assert g.shape == (3, 2, 2) and (to_np(g)[2] == 2).all()
    with pytest.raises(RuntimeError, match="If `is_grads_batched=True`, we interpret the first"):
        mt.autograd.grad(out, (x,), (mt.ones(2, 2),), is_grads_batched=True)


# --------------------------------------------------------------------------- fast paths

def test_operators_on_batched_tensors_reach_the_dispatcher():
    seen = []
    from microtensor.vmap import rules

    def spy(op, level, args, kwargs):
        if any(type(a) is BatchedTensor for a in args):
            seen.append(op.name)
        return rules.handle(op, level, args, kwargs)

    def f(x, y):
        assert dispatch.batching() is rules.handle
        dispatch.set_batching(spy, BatchedTensor)
        try:
            r = x + y
            r = r * 2.0
            r -= y
            r = r / y
            r = r[0]
            return r
        finally:
            dispatch.set_batching(rules.handle, BatchedTensor)
    out = mt.vmap(f)(mt.randn(3, 2, 4), mt.rand(3, 2, 4) + 1)
    assert out.shape == (3, 4)
    assert seen[:5] == ["add", "mul", "sub_", "div", "select"]
    assert dispatch.batching() is None


def test_common_batched_binary_calls_are_served_by_the_dispatcher(monkeypatch):
    # a batched in front times a number, an unbatched tensor or a like-batched tensor
    # runs in the dispatcher; other calls (b batched with a lower rank) reach the rule
    from microtensor.vmap import rules
    mul = REGISTRY["mul"]
    rule = rules.rule_for(mul)
    calls = []

    def counted(op, level, args, kwargs):
        calls.append(op.name)
        return rule(op, level, args, kwargs)
    monkeypatch.setitem(rules._resolved, mul, counted)
    x, y, w = mt.randn(3, 2, 4), mt.randn(3, 2, 4), mt.randn(4)

    def f(a, b):
        return a * 2.0, a * w, a * b, a * b.sum()
    got = mt.vmap(f)(x, y)
    for i, r in enumerate(got):
        expected = [f(x[k], y[k])[i] for k in range(3)]
        assert mt.allclose(r, mt.stack(expected))
    assert calls == ["mul"]


def test_batched_tensor_is_a_tensor_with_per_sample_metadata():
    def check(t):
        assert isinstance(t, mt.Tensor) and type(t) is BatchedTensor
        assert t.shape == (2, 5) and t.dim() == 2 and t.numel() == 10
        assert "BatchedTensor(lvl=1, bdim=1" in repr(t)
        return t
    mt.vmap(check, in_dims=1)(mt.randn(2, 3, 5))


def test_custom_function_runs_per_sample_with_its_gradient():
    class Cube(mt.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 3 * x * x

    x = mt.randn(4, 3, requires_grad=True)
    with pytest.warns(UserWarning, match="falling back to slow"):
        y = mt.vmap(Cube.apply)(x)
    np.testing.assert_allclose(y.detach().numpy(), x.detach().numpy() ** 3, rtol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * x.detach().numpy() ** 2, rtol=1e-6)


def test_resolved_rules_are_called_by_the_dispatcher_and_a_new_handler_sees_every_call(
        monkeypatch):
    # once the handler has resolved an op's rule, the dispatcher calls that rule itself
    # (no handler frame); a handler installed in its place (a spy) still sees every call,
    # and random ops always go to the handler (their randomness is the handler's)
    from microtensor.vmap import rules
    tanh = REGISTRY["tanh"]
    rule = rules.rule_for(tanh)
    calls, seen = [], []

    def counted(op, level, args, kwargs):
        calls.append(op.name)
        return rule(op, level, args, kwargs)
    monkeypatch.setitem(rules._resolved, tanh, counted)
    x = mt.randn(3, 4)
    direct = mt.vmap(lambda a: a.tanh().sum(0))(x)
    assert calls == ["tanh"]
    assert mt.allclose(direct, x.tanh().sum(1))

    def spy(op, level, args, kwargs):
        seen.append(op.name)
        return rules.handle(op, level, args, kwargs)

    def through_spy(a):
        dispatch.set_batching(spy, BatchedTensor)
        try:
            return a.tanh().sum(0)
        finally:
            dispatch.set_batching(rules.handle, BatchedTensor)
    assert mt.equal(mt.vmap(through_spy)(x), direct)
    assert seen == ["tanh", "sum"] and calls == ["tanh", "tanh"]

    rand_like = REGISTRY["rand_like"]
    monkeypatch.setitem(rules._resolved, rand_like, counted)
    samples = mt.vmap(lambda a: mt.rand_like(a), randomness="different")(x)
    assert samples.shape == (3, 4) and not mt.equal(samples[0], samples[1])
    assert calls == ["tanh", "tanh"]
