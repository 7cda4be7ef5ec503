"""PyTorch's in-place functions and the Tensor methods and attributes added with them.

Each in-place op is checked against PyTorch (values, dtype, the version counter's step,
the result being ``self``), its gradients against a clone-based reference (the same
computation out of place) and against PyTorch, and its refusals: a leaf that requires
grad, a tensor whose elements share memory (expanded).
"""
import numpy as np
import pytest

import microtensor as mt
from microtensor.ops.inplace_functions import TOPLEVEL_INPLACE

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")

rng = np.random.default_rng(0)


def arrays(*shapes, low=0.2, high=0.8):
    return [rng.uniform(low, high, shape) for shape in shapes]


def convert(lib, value):
    """``value`` (NumPy arrays, tuples and lists of them) as ``lib``'s tensors."""
    if isinstance(value, np.ndarray):
        return lib.tensor(value)
    if isinstance(value, (tuple, list)):
        return type(value)(convert(lib, v) for v in value)
    return value


def assert_same(ours, theirs):
    if isinstance(theirs, torch.Tensor):
        assert ours.dtype.name == str(theirs.dtype).split(".")[1]
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12,
                                   equal_nan=True)
    else:
        assert ours == theirs


# --------------------------------------------------------------------------- top level

def _int(*values):
    return np.array(values, dtype=np.int64)


# name: (self, further arguments), as NumPy values; default: one float64 input in (0.2, 0.8)
TOPLEVEL_ARGUMENTS = {
    "acosh_": (arrays((3, 4), low=1.2, high=3)[0], ()),
    "addmv_": (arrays((3,))[0], tuple(arrays((3, 4), (4,)))),
    "clamp_": (arrays((3, 4))[0], (0.3, 0.6)),
    "clip_": (arrays((3, 4))[0], (0.3, 0.6)),
    "clamp_min_": (arrays((3, 4))[0], (0.5,)),
    "clamp_max_": (arrays((3, 4))[0], (0.5,)),
    "gcd_": (_int(12, 18, -4, 0), (_int(8, 27, 6, 5),)),
    "lcm_": (_int(12, 18, -4, 0), (_int(8, 27, 6, 5),)),
    "index_put_": (arrays((3, 4))[0], ((_int(0, 2),), arrays((2, 4))[0])),
    "nan_to_num_": (np.array([np.nan, np.inf, -np.inf, 0.5]), ()),
    "threshold_": (arrays((3, 4))[0], (0.5, -1.0)),
    "xlogy_": (arrays((3, 4))[0], tuple(arrays((4,)))),
}


@needs_torch
@pytest.mark.parametrize("name", TOPLEVEL_INPLACE)
def test_toplevel_inplace_function_is_the_method(name):
    """``microtensor.<name>(t, ...)`` writes into ``t`` as ``t.<name>(...)`` and
    ``torch.<name>`` do: same values, ``t`` returned, the version counter one step on."""
    self, args = TOPLEVEL_ARGUMENTS.get(name, (arrays((3, 4))[0], ()))
    results = []
    calls = [lambda t, a: getattr(mt, name)(t, *a)]
    if hasattr(torch.Tensor, name):          # threshold_ is a function only
        calls.append(lambda t, a: getattr(t, name)(*a))
    for call in calls:
        t = convert(mt, self)
        version = t._version
        out = call(t, convert(mt, args))
        assert out is t
        assert t._version == version + 1
        results.append(t)
    theirs = convert(torch, self)
    assert getattr(torch, name)(theirs, *convert(torch, args)) is theirs
    for result in results:
        assert_same(result, theirs)


def test_toplevel_inplace_names_are_pytorchs():
    if torch is not None:
        assert all(hasattr(torch, name) for name in TOPLEVEL_INPLACE)
    assert all(callable(getattr(mt, name)) for name in TOPLEVEL_INPLACE)
    assert "mul_" not in dir(mt)        # PyTorch has no top-level mul_ either


@pytest.mark.parametrize("name", ["exp_", "relu_", "clamp_min_", "square_", "sigmoid_"])
def test_toplevel_inplace_refuses_leaf_and_expanded(name):
    self, args = TOPLEVEL_ARGUMENTS.get(name, (arrays((3,))[0], ()))
    leaf = convert(mt, self).requires_grad_()
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        getattr(mt, name)(leaf, *convert(mt, args))
    expanded = mt.tensor([0.5]).expand(3)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        getattr(mt, name)(expanded, *convert(mt, args))
    assert expanded._version == 0 and float(expanded[0]) == 0.5


@needs_torch
@pytest.mark.parametrize("name", ["exp_", "tanh_", "clamp_min_", "xlogy_", "logit_"])
def test_toplevel_inplace_gradients(name):
    """Through a non-leaf: the gradient of the clone-based reference and PyTorch's."""
    self, args = TOPLEVEL_ARGUMENTS.get(name, (arrays((3, 4))[0], ()))
    grads = []
    for lib, fn in ((mt, lambda x, a: getattr(mt, name)(x * 1, *a)),
                    (mt, lambda x, a: getattr(x, name[:-1])(*a)),
                    (torch, lambda x, a: getattr(torch, name)(x * 1, *a))):
        leaf = convert(lib, self).requires_grad_()
        (fn(leaf, convert(lib, args)) ** 2).sum().backward()
        grads.append(leaf.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)
    np.testing.assert_allclose(grads[0], grads[2], rtol=1e-12)


# --------------------------------------------------------------------------- dropout

DROPOUTS = ["dropout_", "feature_dropout_", "alpha_dropout_", "feature_alpha_dropout_"]


@pytest.mark.parametrize("name", DROPOUTS)
def test_dropout_inplace_nothing_dropped_leaves_input_alone(name):
    x = mt.randn(2, 3, 4)
    before = x.clone()
    for p, train in ((0.0, True), (0.5, False)):
        assert getattr(mt, name)(x, p, train) is x
    assert x._version == 0 and mt.equal(x, before)
    leaf = mt.randn(2, 3, requires_grad=True)
    assert getattr(mt, name)(leaf, 0.0, True) is leaf   # PyTorch too: no write, no refusal


@needs_torch
@pytest.mark.parametrize("name", DROPOUTS)
def test_dropout_inplace_p_one_and_refusals_as_pytorch(name):
    x = mt.randn(2, 3, 4)
    assert getattr(mt, name)(x, 1.0, True) is x
    theirs = torch.randn(2, 3, 4)
    getattr(torch, name)(theirs, 1.0, True)
    assert x._version == theirs._version == 1
    assert_same(x, theirs)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        getattr(mt, name)(mt.randn(2, 3, requires_grad=True), 0.5, True)
    with pytest.raises(RuntimeError, match="dropout probability has to be between 0 and 1"):
        getattr(mt, name)(mt.randn(2, 3), 1.5, True)


def test_dropout_inplace_draws():
    mt.manual_seed(0)
    x = mt.ones(200, 50)
    mt.dropout_(x, 0.25, True)
    values = set(np.unique(x.numpy()).tolist())
    assert values == {0.0, float(np.float32(1 / 0.75))} and x._version == 1
    assert abs(float((x == 0).float().mean()) - 0.25) < 0.02
    y = mt.ones(50, 40, 3)
    mt.feature_dropout_(y, 0.5, True)
    per_channel = y.numpy().reshape(50, 40, 3)
    assert (per_channel == per_channel[..., :1]).all()      # whole channels kept or dropped
    z = mt.ones(100, 100)
    mt.alpha_dropout_(z, 0.2, True)
    assert len(np.unique(z.numpy())) == 2                   # the kept and the dropped value
    assert mt.dropout(mt.ones(3), 0.5, False).eq(1).all()


@needs_torch
def test_dropout_inplace_gradient_matches_its_mask():
    mt.manual_seed(1)
    leaf = mt.randn(6, 7, requires_grad=True)
    y = mt.dropout_(leaf * 1, 0.3, True)
    y.sum().backward()
    np.testing.assert_allclose(leaf.grad.numpy(), (y.detach() != 0).numpy() / 0.7)


# --------------------------------------------------------------------------- in-place methods

# name: (self, arguments, keyword arguments, differentiable inputs), as NumPy values
METHODS = {
    "cumsum_": (arrays((3, 4))[0], (1,), {}, 1),
    "cumprod_": (arrays((3, 4))[0], (0,), {}, 1),
    "lerp_": (arrays((3, 4))[0], tuple(arrays((3, 4), (4,))), {}, 3),
    "clamp_min_": (arrays((3, 4))[0], (0.5,), {}, 1),
    "clamp_max_": (arrays((3, 4))[0], (0.5,), {}, 1),
    "addmm_": (arrays((2, 4))[0], tuple(arrays((2, 3), (3, 4))), {"beta": 0.5, "alpha": 2},
               3),
    "baddbmm_": (arrays((2, 3, 4))[0], tuple(arrays((2, 3, 5), (2, 5, 4))), {"alpha": 0.5},
                 3),
    "fill_diagonal_": (arrays((4, 4))[0], (0.5,), {}, 1),
    "bitwise_not_": (_int(0, 5, -3), (), {}, 0),
    "bitwise_left_shift_": (_int(1, -8, 3, 5, 7), (_int(0, 1, 63, 64, -1),), {}, 0),
    "bitwise_right_shift_": (_int(1, -8, 3, 5, 7), (_int(0, 1, 63, 64, -1),), {}, 0),
}


@needs_torch
@pytest.mark.parametrize("name", sorted(METHODS))
def test_inplace_method_values_and_version(name):
    self, args, kwargs, _ = METHODS[name]
    ours, theirs = convert(mt, self), convert(torch, self)
    assert getattr(ours, name)(*convert(mt, args), **kwargs) is ours
    assert getattr(theirs, name)(*convert(torch, args), **kwargs) is theirs
    assert_same(ours, theirs)
    assert ours._version == theirs._version
    if name.startswith("bitwise"):        # the out-of-place op and top-level function too
        base = name[:-1]
        np.testing.assert_array_equal(
            getattr(mt, base)(convert(mt, self), *convert(mt, args)).numpy(),
            getattr(torch, base)(convert(torch, self), *convert(torch, args)).numpy())


@needs_torch
@pytest.mark.parametrize("name", sorted(n for n in METHODS if METHODS[n][3]))
def test_inplace_method_gradients(name):
    """Gradients of every differentiable input through the in-place method on a non-leaf:
    equal to the clone-based reference's (the op out of place on a clone, or a mask for
    ``fill_diagonal_``) and to PyTorch's."""
    self, args, kwargs, n_inputs = METHODS[name]
    inputs = [self] + list(args[:n_inputs - 1])
    rest = args[n_inputs - 1:]

    def grads(lib, fn):
        leaves = [convert(lib, v).requires_grad_() for v in inputs]
        (fn(lib, leaves) ** 2).sum().backward()
        return [leaf.grad.numpy() for leaf in leaves]

    def inplace(lib, leaves):
        return getattr(leaves[0] * 1, name)(*leaves[1:], *convert(lib, rest), **kwargs)

    def reference(lib, leaves):
        if name == "fill_diagonal_":
            eye = lib.eye(4, dtype=lib.float64)
            return leaves[0].clone() * (1 - eye) + eye * rest[0]
        return getattr(leaves[0].clone(), name[:-1])(*leaves[1:], *convert(lib, rest),
                                                     **kwargs)

    ours, ref, theirs = grads(mt, inplace), grads(mt, reference), grads(torch, inplace)
    for a, b, c in zip(ours, ref, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", sorted(n for n in METHODS if METHODS[n][3]))
def test_inplace_method_refuses_leaf(name):
    self, args, kwargs, _ = METHODS[name]
    leaf = convert(mt, self).requires_grad_()
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        getattr(leaf, name)(*convert(mt, args), **kwargs)
    assert leaf._version == 0


@pytest.mark.parametrize("name", ["cumsum_", "cumprod_", "lerp_", "clamp_min_", "addmm_",
                                  "bitwise_not_", "bitwise_left_shift_"])
def test_inplace_method_refuses_expanded(name):
    self, args, kwargs, _ = METHODS[name]
    base = convert(mt, self)
    expanded = base[:1].expand(base.shape)
    before = base.clone()
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        getattr(expanded, name)(*convert(mt, args), **kwargs)
    assert mt.equal(base, before)


def test_cumulative_inplace_refusals():
    with pytest.raises(RuntimeError, match="input tensor dtype long int and output tensor "
                                           "dtype double should match"):
        mt.tensor([1, 2]).cumsum_(0, dtype=mt.float64)
    with pytest.raises(NotImplementedError, match="\"cumprod_out_cpu\" not implemented for "
                                                  "'Bool'"):
        mt.tensor([True]).cumprod_(0)
    x = mt.tensor([1, 2, 3], dtype=mt.int32)
    assert x.cumsum_(0, dtype=mt.int32).tolist() == [1, 3, 6] and x.dtype == mt.int32


def test_matrix_inplace_refuses_a_broadcast_self():
    with pytest.raises(RuntimeError, match=r"input tensor size \[2, 1\] and output tensor "
                                           r"size \[2, 2\] should match"):
        mt.zeros(2, 1).addmm_(mt.randn(2, 3), mt.randn(3, 2))
    with pytest.raises(RuntimeError, match="should match"):
        mt.zeros(2, 2, 1).baddbmm_(mt.randn(2, 2, 3), mt.randn(2, 3, 2))


@needs_torch
@pytest.mark.parametrize("shape, wrap, transpose", [((7, 3), True, False), ((7, 3), False, False),
                                                    ((6, 4), True, True), ((3, 3, 3), False, False),
                                                    ((2, 5), True, False)])
def test_fill_diagonal_as_pytorch(shape, wrap, transpose):
    results = []
    for lib in (mt, torch):
        t = lib.zeros(*shape, dtype=lib.int64)
        t = t.t() if transpose else t
        version = t._version
        t.fill_diagonal_(2.7, wrap=wrap)      # the value cast as PyTorch does
        results.append((t.numpy().copy(), t._version - version))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    assert results[0][1] == results[1][1]


def test_fill_diagonal_refusals():
    with pytest.raises(RuntimeError, match="dimensions must larger than 1"):
        mt.zeros(3).fill_diagonal_(1)
    with pytest.raises(RuntimeError, match="all dimensions of input must be of equal length"):
        mt.zeros(3, 3, 2).fill_diagonal_(1)


@needs_torch
def test_shift_operators_as_pytorch():
    for lib in (mt, torch):
        x = lib.tensor([1, 2, -8])
        version = x._version
        x <<= 2
        x >>= 1
        assert x.tolist() == [2, 4, -16] and x._version == version + 2
        assert (x << 1).tolist() == [4, 8, -32] and (x >> 1).tolist() == [1, 2, -8]
        assert (3 << lib.tensor([1, 2])).tolist() == [6, 12]
        assert (64 >> lib.tensor([1, 2])).tolist() == [32, 16]
    for dtype in ("int8", "uint8", "int16", "int32"):
        values = np.array([0, 1, 5, 100, 127], dtype=dtype)
        amounts = np.array([0, 3, 7, 8, 9], dtype=dtype)
        for fn in ("bitwise_left_shift", "bitwise_right_shift"):
            ours = getattr(mt, fn)(mt.tensor(values), mt.tensor(amounts))
            theirs = getattr(torch, fn)(torch.tensor(values), torch.tensor(amounts))
            assert_same(ours, theirs)
    with pytest.raises(NotImplementedError, match="\"lshift_cpu\" not implemented for 'Float'"):
        mt.tensor([1.5]) << 2
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):   # checked first, as PyTorch
        mt.tensor([1, 2]).bitwise_right_shift_(1.0)


# --------------------------------------------------------------------------- view copies, splits

COPIES = [("view_copy", ((6, 4),), {}), ("permute_copy", ((2, 0, 1),), {}),
          ("transpose_copy", (0, 2), {}), ("expand_copy", ((2, 2, 3, 4),), {}),
          ("diagonal_copy", (), {}), ("select_copy", (1, 0), {}),
          ("slice_copy", (2, 0, 3, 2), {}), ("unfold_copy", (2, 2, 1), {}),
          ("alias_copy", (), {}), ("detach_copy", (), {}), ("squeeze_copy", (), {}),
          ("unsqueeze_copy", (1,), {}), ("as_strided_copy", ((2, 2), (1, 2)), {}),
          ("split_copy", (1,), {}), ("unbind_copy", (), {}),
          ("split_with_sizes_copy", ((1, 1),), {}), ("narrow_copy", (2, 1, 2), {})]


@needs_torch
@pytest.mark.parametrize("name, args, kwargs", COPIES)
def test_view_copies_as_pytorch(name, args, kwargs):
    """Values and (contiguous) strides of PyTorch's, in memory of their own."""
    data = rng.standard_normal((2, 3, 4))
    ours = getattr(mt, name)(mt.tensor(data).transpose(0, 1).transpose(0, 1), *args, **kwargs)
    theirs = getattr(torch, name)(torch.tensor(data), *args, **kwargs)
    pieces = ours if isinstance(ours, tuple) else (ours,)
    expected = theirs if isinstance(theirs, tuple) else (theirs,)
    assert isinstance(ours, tuple) == isinstance(theirs, tuple)
    for a, b in zip(pieces, expected, strict=True):
        assert_same(a, b)
        assert a.stride() == b.stride() and a._base is None


def test_view_copies_own_their_memory_and_differentiate():
    x = mt.randn(3, 4, requires_grad=True)
    y = mt.transpose_copy(x, 0, 1)
    assert y.data_ptr() != x.data_ptr()
    (y * mt.arange(12.).view(4, 3)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.arange(12.).reshape(4, 3).T)
    t = mt.t_copy(mt.ones(2, 3))
    t.add_(1)                                  # not a view: writing is allowed
    assert t.tolist() == [[2.0, 2.0]] * 3 and mt.narrow_copy(mt.arange(5), 0, 1, 2).tolist() == \
        [1, 2]


@needs_torch
@pytest.mark.parametrize("name, args", [("unsafe_split", (2,)), ("unsafe_split", (2, 1)),
                                        ("unsafe_chunk", (2,)), ("unsafe_chunk", (3, 1)),
                                        ("unsafe_split_with_sizes", ([1, 3],))])
def test_unsafe_splits_as_pytorch(name, args):
    """The pieces of ``split``, not views: writing into one is allowed, and the gradient is
    PyTorch's."""
    data = rng.standard_normal((4, 3))
    grads, values = [], []
    for lib in (mt, torch):
        leaf = lib.tensor(data).requires_grad_()
        pieces = getattr(lib, name)(leaf * 1, *args)
        assert isinstance(pieces, tuple) and pieces[0]._base is None
        pieces[0].mul_(3)
        sum(((i + 1) * p).sum() for i, p in enumerate(pieces)).backward()
        grads.append(leaf.grad.numpy())
        values.append([p.detach().numpy() for p in pieces])
    np.testing.assert_allclose(grads[0], grads[1])
    for a, b in zip(*values, strict=True):
        np.testing.assert_allclose(a, b)
    with pytest.raises(TypeError, match="argument 'split_size' .* must be int"):
        mt.unsafe_split(mt.zeros(4), [2, 2])


@needs_torch
def test_msort_adjoint_and_conjugate_transposes():
    data = rng.standard_normal((4, 3))
    assert_same(mt.msort(mt.tensor(data)), torch.msort(torch.tensor(data)))
    assert_same(mt.tensor(data).msort(), torch.tensor(data).msort())
    x = mt.tensor(rng.standard_normal((2, 3, 4)))
    for attribute in ("mH", "adjoint"):
        value = getattr(x, attribute)
        value = value() if callable(value) else value
        assert value.shape == (2, 4, 3) and value._base is x and value.stride() == (12, 1, 4)
    assert mt.adjoint(x).shape == (2, 4, 3)
    m = mt.ones(2, 3)
    assert m.H.shape == (3, 2) and m.H._base is m
    with pytest.raises(RuntimeError, match=r"tensor.H is only supported on matrices \(2-D "
                                           r"tensors\). Got 3-D tensor. For batches"):
        x.H
    with pytest.raises(RuntimeError, match="tensor.mH is only supported on matrices or batches "
                                           "of matrices. Got 1-D tensor."):
        mt.ones(3).mH
    with pytest.raises(RuntimeError, match="tensor.adjoint.. is only supported"):
        mt.adjoint(mt.ones(3))
    with pytest.warns(UserWarning, match="Tensor.H is deprecated on 0-D tensors"):
        scalar = mt.tensor(1.0)
        assert scalar.H is scalar


def test_real_tensors_are_their_own_conjugates():
    x = mt.randn(3)
    for name in ("conj", "conj_physical", "resolve_conj", "resolve_neg"):
        assert getattr(x, name)() is x and getattr(mt, name)(x) is x
    assert not x.is_conj() and not x.is_neg() and not mt.is_conj(x)
    assert mt.conj_physical_(x) is x and x._version == 1
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        mt.randn(3, requires_grad=True).conj_physical_()
    leaf = mt.randn(3, requires_grad=True)
    y = leaf * 2
    y.conj_physical_()
    y.sum().backward()
    assert leaf.grad.tolist() == [2.0] * 3


# --------------------------------------------------------------------------- flags and layout

@needs_torch
def test_flags_of_a_dense_strided_tensor_are_pytorchs():
    from microtensor._tensor_extras import FALSE_FLAGS
    x, t = mt.zeros(2), torch.zeros(2)
    for flag in FALSE_FLAGS:
        assert getattr(x, flag) is False and getattr(t, flag) is False, flag
    assert x.is_distributed() is t.is_distributed() is False
    assert x.is_pinned() is t.is_pinned() is False
    assert x.is_inference() is False and mt.is_inference(x) is False
    assert x.layout is mt.strided and repr(mt.strided) == "microtensor.strided"
    assert isinstance(mt.strided, mt.layout)
    import pickle
    assert pickle.loads(pickle.dumps(mt.strided)) is mt.strided


def test_pin_memory_needs_an_accelerator():
    if mt.cuda.is_available():
        pytest.skip("an accelerator is available")
    with pytest.raises(RuntimeError, match="Cannot access accelerator device when none is "
                                           "available."):
        mt.zeros(2).pin_memory()


@needs_torch
@pytest.mark.parametrize("make", [
    lambda lib: lib.zeros(2, 3, 5, 7), lambda lib: lib.zeros(2, 3, 5, 7).transpose(1, 2),
    lambda lib: lib.zeros(2, 3, 5, 7).permute(0, 2, 3, 1),
    lambda lib: lib.zeros(2, 3, 5, 7).permute(3, 1, 0, 2), lambda lib: lib.zeros(1, 2, 3, 4),
    lambda lib: lib.zeros(4, 1, 3).transpose(0, 2), lambda lib: lib.zeros(3, 1).expand(3, 4),
    lambda lib: lib.zeros(5), lambda lib: lib.zeros(()),
    lambda lib: lib.zeros(6, 4)[::2].t(), lambda lib: lib.zeros(2, 2, 2).permute(2, 0, 1)])
def test_dim_order_as_pytorch(make):
    ours, theirs = make(mt), make(torch)
    assert ours.dim_order() == theirs.dim_order()
    for check in (True, [mt.contiguous_format, mt.channels_last]):
        torch_check = check if check is True else [torch.contiguous_format,
                                                   torch.channels_last]
        try:
            expected = theirs.dim_order(ambiguity_check=torch_check)
        except RuntimeError:
            with pytest.raises(RuntimeError, match="does not have unique dim order"):
                ours.dim_order(ambiguity_check=check)
        else:
            assert ours.dim_order(ambiguity_check=check) == expected
    with pytest.raises(TypeError, match="must be a bool or a list of memory formats"):
        ours.dim_order(ambiguity_check="yes")


def test_share_memory_is_seen_by_a_forked_child():
    import os
    x = mt.arange(6.)
    view = x[2:]
    assert not x.is_shared()
    assert x.share_memory_() is x and x.is_shared() and view.is_shared()
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and x._version == 0
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    pid = os.fork()
    if pid == 0:
        view.fill_(7.0)
        os._exit(0)
    os.waitpid(pid, 0)
    assert x.tolist() == [0.0, 1.0, 7.0, 7.0, 7.0, 7.0]


@needs_torch
def test_new_is_the_legacy_constructor_with_the_tensors_dtype():
    for lib in (mt, torch):
        x = lib.zeros(2, dtype=lib.int32)
        assert x.new().shape == (0,) and x.new().dtype == lib.int32
        assert x.new(2, 3).shape == (2, 3) and x.new((2, 3)).tolist() == [2, 3]
        assert x.new([1.7, 2]).tolist() == [1, 2] and x.new(lib.Size([4])).shape == (4,)
        y = lib.ones(3)
        assert y.new(y).data_ptr() == y.data_ptr()
        with pytest.raises(TypeError):
            x.new(lib.ones(3))
        with pytest.raises(TypeError, match="data must be a sequence"):
            x.new(2.5)


# --------------------------------------------------------------------------- storage changes

@needs_torch
@pytest.mark.parametrize("sizes, kwargs", [((2, 5), {}), ((2, 2), {}), ((6,), {}),
                                           ((2, 3, 4, 5), {"memory_format": "channels_last"}),
                                           ((0, 3), {})])
def test_resize_as_pytorch(sizes, kwargs):
    """The kept values, the strides, the storage growth that views see, the version."""
    results = []
    for lib in (mt, torch):
        options = {k: getattr(lib, v) for k, v in kwargs.items()}
        x = lib.arange(6.)
        view = x[1:3]
        assert x.resize_(*sizes, **options) is x
        keep = min(6, x.numel())
        results.append((tuple(x.shape), x.stride(), x._version,
                        x.reshape(-1)[:keep].tolist() if x.is_contiguous() else None))
        if x.numel() > 6 and x.is_contiguous():
            x.view(-1)[2] = 42.0
            assert view.tolist() == [1.0, 42.0]           # the same storage, grown
    assert results[0] == results[1]


@needs_torch
def test_resize_same_shape_and_resize_as():
    for lib in (mt, torch):
        x = lib.zeros(3, 2).t()
        x.resize_(2, 3)                                   # the same shape: left as it is
        assert x.stride() == (1, 2) and x._version == 0
        x.resize_(2, 3, memory_format=lib.contiguous_format)     # restrided, no version step
        assert x.stride() == (3, 1) and x._version == 0
        with pytest.raises(RuntimeError, match="Unsupported memory format"):
            x.resize_(2, memory_format=lib.preserve_format)
        y = lib.zeros(3)
        assert y.resize_as_(lib.zeros(2, 2).t()) is y and y.stride() == (2, 1)
        template = lib.zeros(2, 2, 3, 3).contiguous(memory_format=lib.channels_last)
        y.resize_as_(template, memory_format=lib.preserve_format)
        assert y.stride() == (18, 1, 6, 2)
        assert lib.resize_as_(y, lib.zeros(4)).shape == (4,)


@pytest.mark.parametrize("call", [lambda t: t.resize_(2), lambda t: t.resize_as_(mt.zeros(3))])
def test_resize_refuses_tensors_that_require_grad(call):
    for t in (mt.zeros(3, requires_grad=True), mt.zeros(3, requires_grad=True) * 1):
        with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
            call(t)
        assert t.shape == (3,)
    with mt.no_grad():
        with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
            mt.zeros(3, requires_grad=True).resize_(2)
    with pytest.raises(RuntimeError, match="numel: integer multiplication overflow"):
        mt.zeros(3).resize_(2, -1)
    with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last"):
        mt.zeros(3).resize_(2, memory_format=mt.channels_last)


@needs_torch
def test_set_as_pytorch():
    for lib in (mt, torch):
        y = lib.arange(4.)
        z = lib.zeros(1)
        version = z._version
        assert z.set_(y) is z and z.data_ptr() == y.data_ptr() and z.shape == (4,)
        assert z._version == version + 1
        z.set_(y, 1, (2,), (1,))
        assert z.tolist() == [1.0, 2.0] and z.storage_offset() == 1
        z.set_(y, 0, (2, 2), (2, 1))
        z[1, 1] = 9.0
        assert y[3].item() == 9.0
        z.set_(y, 3, (2,), (1,))                         # past the end: the storage grows
        assert z.shape == (2,) and z[0].item() == 9.0
        z.set_()
        assert z.shape == (0,) and z.numel() == 0
        with pytest.raises(RuntimeError, match="Could not set tensor of type long int to a "
                                               "tensor of type float"):
            lib.zeros(1).set_(lib.arange(4))
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            lib.zeros(1, requires_grad=True).set_(y)
    z = mt.zeros(1)
    z.set_(mt.arange(4.)._storage, 1, (3,))               # from a storage, contiguous
    assert z.tolist() == [1.0, 2.0, 3.0]


# --------------------------------------------------------------------------- Python callables

@needs_torch
def test_apply_map_map2_as_pytorch():
    results = []
    for lib in (mt, torch):
        a = lib.arange(4.).view(2, 2).t()
        b = lib.ones(2, 2) * 2
        c = lib.ones(1) * 3
        a.apply_(lambda v: v * 10)
        a.map_(b, lambda p, q: p + q)
        a.map2_(b, c, lambda p, q, r: p * q + r)
        i = lib.arange(4)
        i.apply_(lambda v: v * 1.5)                        # truncated into an int tensor
        flags = lib.ones(2, dtype=lib.bool)
        flags.apply_(lambda v: 0)
        results.append((a.tolist(), a._version, i.tolist(), flags.tolist()))
    assert results[0] == results[1]


@pytest.mark.parametrize("call, message", [
    (lambda: mt.ones(3, requires_grad=True).apply_(lambda v: v),
     r"Can't call apply_\(\) on Variable that requires grad"),
    (lambda: mt.ones(3).map_(mt.ones(3, requires_grad=True), lambda p, q: p),
     r"Can't call map_\(\) on Variable that requires grad"),
    (lambda: mt.ones(3).map_(mt.ones(2, 3), lambda p, q: p), "expand"),
    (lambda: mt.ones(3).apply_(lambda v: "a"), "must be real number, not str"),
    (lambda: mt.arange(3).map_(mt.ones(3), lambda p, q: p),
     "map_: expected microtensor.LongTensor for 'other' .got microtensor.FloatTensor."),
    (lambda: mt.ones(3).map2_(mt.ones(3), mt.ones(3, dtype=mt.float64), lambda p, q, r: p),
     "map2_: expected microtensor.FloatTensor for argument 'y'")])
def test_python_callables_refusals(call, message):
    with pytest.raises((RuntimeError, TypeError), match=message):
        call()


# --------------------------------------------------------------------------- random fills

def test_random_fills_ranges_and_statistics():
    mt.manual_seed(0)
    n = 20000
    x = mt.zeros(n, dtype=mt.float64)
    assert x.exponential_(2.0) is x and x._version == 1
    assert float(x.min()) > 0 and abs(float(x.mean()) - 0.5) < 0.02
    x.log_normal_(0.0, 0.5)
    assert float(x.min()) > 0 and abs(float(x.log().std()) - 0.5) < 0.02
    x.cauchy_(1.0, 2.0)
    assert abs(float(x.median()) - 1.0) < 0.1
    assert abs(float(((x - 1).abs() < 2).double().mean()) - 0.5) < 0.02   # quartiles ±sigma
    x.geometric_(0.25)
    assert float(x.min()) >= 1 and (x == x.round()).all() and abs(float(x.mean()) - 4) < 0.15
    ints = mt.zeros(n, dtype=mt.int64).geometric_(0.5)
    assert int(ints.min()) >= 1 and ints.dtype == mt.int64
    x.random_(3, 7)
    assert set(x.unique().tolist()) == {3.0, 4.0, 5.0, 6.0}
    x.random_(2)
    assert set(x.unique().tolist()) == {0.0, 1.0}
    x.random_(**{"from": -2, "to": 0})
    assert set(x.unique().tolist()) == {-2.0, -1.0}
    small = mt.zeros(n, dtype=mt.int8).random_()
    assert int(small.min()) >= 0 and int(small.max()) == 127
    assert set(mt.zeros(100, dtype=mt.bool).random_().tolist()) == {False, True}
    assert float(mt.zeros(1000).random_().max()) <= 2 ** 24


def test_random_fills_follow_the_generator():
    for fill, args in (("random_", (0, 100)), ("exponential_", ()), ("cauchy_", ()),
                       ("log_normal_", ()), ("geometric_", (0.3,))):
        draws = []
        for _ in range(2):
            g = mt.Generator().manual_seed(5)
            draws.append(getattr(mt.zeros(8), fill)(*args, generator=g).tolist())
        assert draws[0] == draws[1], fill


@needs_torch
@pytest.mark.parametrize("fill, args", [
    ("random_", (5, 5)), ("random_", (0,)), ("random_", (-1,)), ("cauchy_", (0, 0)),
    ("cauchy_", (0, -1)), ("exponential_", (0,)), ("exponential_", (-1,)),
    ("geometric_", (0,)), ("geometric_", (1,)), ("geometric_", (1.5,)),
    ("log_normal_", (0, 0)), ("log_normal_", (0, -1))])
def test_random_fills_refuse_bad_parameters_as_pytorch(fill, args):
    with pytest.raises(RuntimeError) as theirs:
        getattr(torch.zeros(3), fill)(*args)
    x = mt.zeros(3)
    with pytest.raises(RuntimeError) as ours:
        getattr(x, fill)(*args)
    assert str(ours.value) == str(theirs.value)
    assert x._version == 0


@needs_torch
@pytest.mark.parametrize("dtype, fill, args", [
    ("int64", "cauchy_", ()), ("int64", "exponential_", ()), ("int64", "log_normal_", ()),
    ("bool", "geometric_", (0.5,)), ("uint8", "random_", (300,)), ("int8", "random_", (-200, 5))])
def test_random_fills_refuse_dtypes_as_pytorch(dtype, fill, args):
    with pytest.raises((RuntimeError, NotImplementedError)) as theirs:
        getattr(torch.zeros(3, dtype=getattr(torch, dtype)), fill)(*args)
    with pytest.raises(theirs.type) as ours:
        getattr(mt.zeros(3, dtype=getattr(mt, dtype)), fill)(*args)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("fill, args", [("random_", (5,)), ("exponential_", ()),
                                        ("cauchy_", ()), ("log_normal_", ()),
                                        ("geometric_", (0.5,))])
def test_random_fills_in_place_rules_and_vmap(fill, args):
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        getattr(mt.zeros(3, requires_grad=True), fill)(*args)
    leaf = mt.ones(3, requires_grad=True)
    y = leaf * 2
    getattr(y, fill)(*args)
    (y * 1).sum().backward()
    assert leaf.grad.tolist() == [0.0, 0.0, 0.0]        # the old values no longer count

    def draw(t):
        return getattr(t * 1, fill)(*args)
    with pytest.raises(RuntimeError, match="called random operation while in randomness "
                                           "error mode"):
        mt.vmap(draw)(mt.zeros(4, 50))
    different = mt.vmap(draw, randomness="different")(mt.zeros(4, 50))
    assert different.shape == (4, 50) and not mt.equal(different[0], different[1])
    same = mt.vmap(draw, randomness="same")(mt.zeros(4, 50))
    assert all(mt.equal(same[0], same[i]) for i in range(4))


def test_detach_inplace_at_top_level():
    x = mt.randn(3, requires_grad=True) * 2
    assert mt.detach_(x) is x and x.grad_fn is None and not x.requires_grad


@needs_torch
def test_is_set_to_and_const_data_ptr_as_pytorch():
    for lib in (mt, torch):
        x = lib.arange(4.)
        assert x.is_set_to(x) and x.is_set_to(x[:]) and not x.is_set_to(x.view(2, 2))
        assert not x.is_set_to(x.clone()) and x.const_data_ptr() == x.data_ptr()


@pytest.mark.parametrize("name, args", [
    ("clip_", (-1.0, 1.0)), ("square_", ()), ("clamp_min_", (0.5,)), ("clamp_max_", (0.5,)),
    ("addmv_", (mt.ones(3, 2), mt.ones(2)))])
def test_toplevel_composites_run_as_the_methods(name, args):
    """A composite in-place op's function and method run its one body alike: the same
    values written into the same tensor, its version bumped once."""
    as_function, as_method = mt.tensor([-2.0, 0.25, 2.0]), mt.tensor([-2.0, 0.25, 2.0])
    assert getattr(mt, name)(as_function, *args) is as_function
    assert getattr(as_method, name)(*args) is as_method
    assert as_function.tolist() == as_method.tolist()
    assert as_function._version == as_method._version == 1


@pytest.mark.parametrize("name", ["cumsum_", "cumprod_", "lerp_", "clamp_min_", "addmm_",
                                  "baddbmm_", "fill_diagonal_"])
def test_inplace_methods_under_vmap_match_the_loop(name):
    """Written into a batched tensor (a clone inside the function), sample by sample as a
    loop, without the loop fallback."""
    import warnings
    self, args, kwargs, _ = METHODS[name]
    batch = mt.tensor(np.stack([self + i for i in range(3)]))
    mt_args = convert(mt, args)

    def fn(x):
        return getattr(x.clone(), name)(*mt_args, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # the loop fallback warns
        batched = mt.vmap(fn)(batch)
    expected = mt.stack([fn(batch[i]) for i in range(3)])
    np.testing.assert_allclose(batched.numpy(), expected.numpy(), rtol=1e-12)


def test_as_subclass_is_an_attached_alias():
    class Sub(mt.Tensor):
        pass
    x = mt.randn(3, requires_grad=True)
    y = (x * 2).as_subclass(Sub)
    assert type(y) is Sub and y._base is not None and y.grad_fn is not None
    (y * 3).sum().backward()
    assert x.grad.tolist() == [6.0] * 3
    z = x.as_subclass(Sub)
    assert z.data_ptr() == x.data_ptr() and z._base is x and z.requires_grad
    with pytest.raises(TypeError, match="does not inherit from Tensor"):
        x.as_subclass(int)
