"""PyTorch's further shape, indexing and matrix names (ops/shape.py, ops/view.py,
ops/indexing.py, ops/linalg.py blocks "PyTorch's other ... names").

The registry sweeps run every sample of these ops forward against PyTorch, through
gradcheck/gradgradcheck and under vmap; here: what the sweeps do not see: views and
their strides and storage offsets against PyTorch's, errors (type and message) against
PyTorch's, the plain functions that are not ops (``broadcast_shapes``, ``tril_indices``),
arguments the sweeps cannot batch (tensor_split's index tensor), Tensor methods.
"""
import numpy as np
import pytest

import microtensor as mt

try:
    import torch
except ImportError:
    torch = None

pytestmark = [pytest.mark.skipif(torch is None, reason="PyTorch (the oracle these tests "
                                                       "compare with) is not installed"),
              # PyTorch's own notices when it runs the oracle calls
              pytest.mark.filterwarnings("ignore:index_reduce\\(\\) is in beta"),
              pytest.mark.filterwarnings("ignore:torch.chain_matmul is deprecated")]


def mt_of(t):
    return mt.from_numpy(np.array(t.numpy()))


def same(ours, theirs, geometry=True):
    """Values, dtype and shape equal; with ``geometry``, strides and storage offset too."""
    if isinstance(theirs, (tuple, list)):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            same(a, b, geometry)
        return
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert ours.dtype.name == str(theirs.dtype).split(".")[-1]
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-6,
                               atol=1e-12)
    if geometry:
        assert ours.stride() == theirs.stride()
        assert ours.storage_offset() == theirs.storage_offset()


def raises_like(fn_mt, fn_torch):
    """Both raise the same exception type; PyTorch's message is ours (up to torch's
    'torch.' and C++ type names)."""
    with pytest.raises(Exception) as theirs:
        fn_torch()
    with pytest.raises(type(theirs.value)) as ours:
        fn_mt()
    first = lambda e: str(e).split("\n")[0]     # noqa: E731
    assert first(ours.value).replace("microtensor.", "torch.") == first(theirs.value)


def pair(*shape, dtype=torch.float64 if torch else None):
    t = torch.randn(*shape, dtype=dtype)
    return mt_of(t), t


# --------------------------------------------------------------------------- aliases and
# compositions of shape ops

def _transposed():
    t = torch.randn(4, 3, dtype=torch.float64).t()
    return mt_of(t.t().contiguous()).t(), t


VIEW_CALLS = {
    "moveaxis": lambda m, x: m.moveaxis(x, 0, -1),
    "swapdims": lambda m, x: m.swapdims(x, 0, 1),
    "ravel": lambda m, x: m.ravel(x),
    "fliplr": lambda m, x: m.fliplr(x),
    "flipud": lambda m, x: m.flipud(x),
    "rot90": lambda m, x: m.rot90(x),
    "rot90 k=2": lambda m, x: m.rot90(x, 2),
    "rot90 k=-1": lambda m, x: m.rot90(x, -1, [1, 0]),
    "rot90 k=4": lambda m, x: m.rot90(x, 4),
    "tensor_split": lambda m, x: m.tensor_split(x, 2, 1),
    "tensor_split indices": lambda m, x: m.tensor_split(x, [1, -1, 7], 0),
    "hsplit": lambda m, x: m.hsplit(x, [1]),
    "vsplit": lambda m, x: m.vsplit(x, 3),
    "diagflat": lambda m, x: m.diagflat(x, -1),
    "diff": lambda m, x: m.diff(x, 2, 0),
    "atleast_3d": lambda m, x: m.atleast_3d(x),
    "take_along_dim": lambda m, x: m.take_along_dim(x, m.tensor([[2, 0, 1, 1]]), 0),
}


@pytest.mark.parametrize("name", VIEW_CALLS)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_results_have_pytorchs_geometry(name, layout):
    """Values, strides and storage offset as PyTorch's, for a contiguous and a transposed
    input; views share the input's storage exactly where PyTorch's do."""
    if layout == "contiguous":
        ours, theirs = pair(3, 4)
    else:
        ours, theirs = _transposed()
    call = VIEW_CALLS[name]
    got, want = call(mt, ours), call(torch, theirs)
    same(got, want)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        assert np.shares_memory(g.numpy(), ours.numpy()) == \
            np.shares_memory(w.numpy(), theirs.numpy()), "a view where PyTorch's is"


def test_methods_and_inplace_swaps_exist_as_in_pytorch():
    for name in ["moveaxis", "swapdims", "ravel", "fliplr", "flipud", "rot90", "hsplit",
                 "vsplit", "dsplit", "tensor_split", "argwhere", "take_along_dim", "diagflat",
                 "diff"]:
        assert hasattr(mt.Tensor, name), name
    for name in ["concat", "concatenate", "atleast_1d", "column_stack", "dstack",
                 "block_diag", "cartesian_prod", "combinations", "vander", "unravel_index"]:
        assert not hasattr(torch.Tensor, name) and not hasattr(mt.Tensor, name), name


def test_atleast_returns_its_argument_or_a_tuple():
    x = mt.ones(3)
    assert mt.atleast_1d(x) is x
    assert isinstance(mt.atleast_2d(x, x), tuple)
    assert isinstance(mt.atleast_2d([x]), tuple) and len(mt.atleast_2d([x])) == 1
    same(mt.atleast_2d(mt.tensor(2.0)), torch.atleast_2d(torch.tensor(2.0)))


def test_tensor_split_with_an_index_tensor():
    ours, theirs = pair(7, 2)
    same(mt.tensor_split(ours, mt.tensor([1, 5])),
         torch.tensor_split(theirs, torch.tensor([1, 5])))
    same(mt.tensor_split(ours, mt.tensor(3)), torch.tensor_split(theirs, torch.tensor(3)))
    # an unbatched index tensor under vmap (which torch.func.vmap refuses): each sample cut
    # as alone
    batch = ours.t().contiguous()
    pieces = mt.vmap(lambda x: mt.tensor_split(x, mt.tensor([1, 5])))(batch)
    for i in range(2):
        same([p[i] for p in pieces], torch.tensor_split(theirs[:, i], torch.tensor([1, 5])),
             geometry=False)


def test_plain_functions_match_pytorch():
    for shapes in [((2, 1), (3,)), (4, (1, 4), ()), ((0, 1), (3,))]:
        assert mt.broadcast_shapes(*shapes) == torch.broadcast_shapes(*shapes)
    assert isinstance(mt.broadcast_shapes((2, 1)), mt.Size)
    for args in [(3, 3), (4, 3, 1), (3, 5, -2), (0, 3), (3, 4, 9)]:
        for name in ["tril_indices", "triu_indices"]:
            same(getattr(mt, name)(*args), getattr(torch, name)(*args))
    same(mt.tril_indices(3, 2, dtype=mt.int32), torch.tril_indices(3, 2, dtype=torch.int32))


def test_unravel_index_and_vander_dtypes():
    idx = torch.tensor([[0, 5], [7, -1]], dtype=torch.int32)
    same(mt.unravel_index(mt_of(idx), (2, 3)), torch.unravel_index(idx, (2, 3)))
    same(mt.unravel_index(mt.tensor(4), ()), torch.unravel_index(torch.tensor(4), ()))
    for x in [torch.tensor([True, False]), torch.tensor([2, 3], dtype=torch.int8)]:
        same(mt.vander(mt_of(x), 3), torch.vander(x, 3))


def test_block_diag_promotes_and_places_empty_pieces():
    a, b = torch.ones(2, dtype=torch.int32), torch.randn(2, 2)
    same(mt.block_diag(mt_of(a), mt_of(b), mt.empty(0)),
         torch.block_diag(a, b, torch.empty(0)))
    same(mt.block_diag(), torch.block_diag())


def test_diff_of_bool_and_orders_past_the_length():
    x = torch.tensor([True, False, False, True])
    same(mt.diff(mt_of(x)), torch.diff(x))
    y = torch.randn(2, 3)
    same(mt.diff(mt_of(y), 5), torch.diff(y, 5))
    same(mt.diff(mt_of(y), 0), torch.diff(y, 0))


ERRORS = {
    "rot90 1-d": lambda m: m.rot90(m.ones(3)),
    "rot90 three dims": lambda m: m.rot90(m.ones(2, 2), 1, (0, 1, 1)),
    "rot90 same dims": lambda m: m.rot90(m.ones(2, 2), 1, (0, 0)),
    "rot90 dim range": lambda m: m.rot90(m.ones(2, 2), 1, (0, 2)),
    "fliplr": lambda m: m.fliplr(m.ones(3)),
    "flipud": lambda m: m.flipud(m.tensor(1.0)),
    "hsplit 0-d": lambda m: m.hsplit(m.tensor(1.0), 2),
    "hsplit not divisible": lambda m: m.hsplit(m.ones(3, 5), 2),
    "vsplit 1-d": lambda m: m.vsplit(m.ones(4), 2),
    "dsplit not divisible": lambda m: m.dsplit(m.ones(2, 2, 3), 2),
    "tensor_split 0-d": lambda m: m.tensor_split(m.tensor(1.0), 2),
    "tensor_split 0 sections": lambda m: m.tensor_split(m.ones(3), 0),
    "tensor_split float index": lambda m: m.tensor_split(m.ones(3), m.tensor([1.0])),
    "tensor_split 2-d index": lambda m: m.tensor_split(m.ones(3), m.tensor([[1]])),
    "column_stack empty": lambda m: m.column_stack([]),
    "dstack empty": lambda m: m.dstack([]),
    "broadcast_shapes": lambda m: m.broadcast_shapes((2, 3), (4, 3)),
    "broadcast_shapes negative": lambda m: m.broadcast_shapes((-1, 3)),
    "take_along_dim dtype": lambda m: m.take_along_dim(m.ones(2, 3), m.tensor([[0.0]]), 1),
    "take_along_dim dims": lambda m: m.take_along_dim(m.ones(2, 3), m.tensor([0]), 1),
    "diff order": lambda m: m.diff(m.ones(3), -1),
    "diff 0-d": lambda m: m.diff(m.tensor(1.0)),
    "diff prepend dims": lambda m: m.diff(m.ones(2, 3), prepend=m.ones(3)),
    "diff prepend shape": lambda m: m.diff(m.ones(3, 4), dim=0, prepend=m.ones(2, 2)),
    "tril_indices negative": lambda m: m.tril_indices(-1, 3),
    "triu_indices float": lambda m: m.triu_indices(3, 3, dtype=m.float32),
    "block_diag 3-d": lambda m: m.block_diag(m.ones(2, 2, 2)),
    "cartesian_prod 2-d": lambda m: m.cartesian_prod(m.ones(2, 2), m.ones(2)),
    "combinations 2-d": lambda m: m.combinations(m.ones(2, 2)),
    "combinations negative": lambda m: m.combinations(m.ones(3), -1),
    "vander 2-d": lambda m: m.vander(m.ones(2, 2)),
    "vander N": lambda m: m.vander(m.ones(3), -1),
    "unravel_index float": lambda m: m.unravel_index(m.tensor([1.0]), (2, 3)),
    "unravel_index shape": lambda m: m.unravel_index(m.tensor([1]), (-2, 3)),
}


@pytest.mark.parametrize("name", ERRORS)
def test_errors_match_pytorch(name):
    raises_like(lambda: ERRORS[name](mt), lambda: ERRORS[name](torch))


# --------------------------------------------------------------------------- in-place
# metadata changes

METADATA_CALLS = {
    "t_": lambda x: x.t_(),
    "transpose_": lambda x: x.transpose_(0, -1),
    "swapdims_": lambda x: x.swapdims_(1, 0),
    "swapaxes_": lambda x: x.swapaxes_(0, 1),
    "unsqueeze_": lambda x: x.unsqueeze_(1),
    "squeeze_": lambda x: x.unsqueeze_(0).squeeze_(0),
    "squeeze_ dims": lambda x: x.unsqueeze_(-1).squeeze_((0, 2)),
    "as_strided_": lambda x: x.as_strided_((2, 2), (1, 3), 1),
}


def _nonleaf_pair():
    leaf = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    ours = mt_of(leaf.detach()).requires_grad_()
    return ours, leaf


@pytest.mark.parametrize("name", METADATA_CALLS)
def test_metadata_change_in_place_matches_pytorch(name):
    """The tensor itself (same object, same storage) takes the view's geometry, its
    version is bumped, and gradients flow through the recorded view as PyTorch's."""
    call = METADATA_CALLS[name]
    ours_leaf, theirs_leaf = _nonleaf_pair()
    ours, theirs = ours_leaf * 2, theirs_leaf * 2
    before = ours._version
    assert call(ours) is ours and call(theirs) is theirs
    same(ours, theirs)
    assert ours._version > before
    weight = torch.randn(theirs.shape, dtype=torch.float64)
    (theirs * weight).sum().backward()
    (ours * mt_of(weight)).sum().backward()
    same(ours_leaf.grad, theirs_leaf.grad, geometry=False)


@pytest.mark.parametrize("name", METADATA_CALLS)
def test_metadata_change_of_a_view_keeps_it_a_view(name):
    """On a view of a non-leaf: the base keeps its shape, values and history (no
    CopySlices); the view keeps its base; gradients as PyTorch's."""
    call = METADATA_CALLS[name]
    ours_leaf, theirs_leaf = _nonleaf_pair()
    results = []
    for lib, leaf in ((mt, ours_leaf), (torch, theirs_leaf)):
        base = leaf * 3
        view = base.t()
        node = type(base.grad_fn).__name__
        call(view)
        assert view._base is base and type(base.grad_fn).__name__ == node
        assert tuple(base.shape) == (2, 3)
        weight = lib.ones(view.shape, dtype=lib.float64).cumsum(0)
        (view * weight).sum().backward()
        results.append((view, leaf.grad))
    same(results[0][0].detach(), results[1][0].detach())
    same(results[0][1], results[1][1], geometry=False)


def test_metadata_changes_refuse_what_pytorch_refuses():
    def cases(lib):
        leaf = lib.ones(2, 3, requires_grad=True)
        with lib.no_grad():
            detached_view = leaf[0]
        return [lambda: leaf.t_(), lambda: leaf[0].unsqueeze_(0),
                lambda: detached_view.unsqueeze_(0), lambda: (leaf * 1).split(1)[0].squeeze_(),
                lambda: lib.ones(2, 2, 2).t_(), lambda: lib.ones(2, 3).transpose_(0, 2),
                lambda: lib.ones(2, 3).as_strided_((30, 2), (1, 3))]
    for ours, theirs in zip(cases(mt), cases(torch)):
        with pytest.raises(Exception) as expected:
            theirs()
        with pytest.raises(type(expected.value)) as got:
            ours()
        # PyTorch names the node of split "Split", ours "SplitBackward0"
        assert str(got.value).replace("SplitBackward0", "Split") == str(expected.value)
    with mt.no_grad():              # without grad mode a leaf may change its geometry
        leaf = mt.ones(2, 3, requires_grad=True)
        assert leaf.t_().shape == (3, 2)


def test_a_saved_tensor_changed_in_geometry_is_refused_at_backward():
    for lib in (mt, torch):
        leaf = lib.ones(2, 3, dtype=lib.float64, requires_grad=True)
        out = leaf.exp()
        out.t_()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


@pytest.mark.parametrize("name", ["t_", "transpose_", "unsqueeze_", "squeeze_ dims"])
def test_metadata_changes_under_vmap_and_grad(name):
    """Under vmap each sample changes as alone (the tensor passed to vmap keeps its
    geometry); vmap(grad) as the loop of grads."""
    call = METADATA_CALLS[name]
    x = mt.randn(4, 2, 3, dtype=mt.float64)
    got = mt.vmap(lambda t: call(t * 1))(x)
    same(got, torch.stack([torch.from_numpy(call(mt.from_numpy(x[i].numpy().copy())).numpy())
                           for i in range(4)]), geometry=False)
    assert x.shape == (4, 2, 3)
    inplace_on_input = mt.vmap(call)(x.clone())
    same(inplace_on_input, got, geometry=False)

    def f(t):
        return (call(t * 1) * mt.arange(6.0, dtype=mt.float64).reshape(call(
            mt.ones(2, 3)).shape)).sum()
    grads = mt.vmap(mt.func.grad(f))(x)
    loop = [mt.func.grad(f)(x[i]) for i in range(4)]
    same(grads, torch.stack([torch.from_numpy(g.numpy()) for g in loop]), geometry=False)


def test_composite_swaps_in_place_pass_gradcheck():
    x = mt.randn(2, 3, dtype=mt.float64, requires_grad=True)
    for call in (METADATA_CALLS["t_"], METADATA_CALLS["swapdims_"],
                 METADATA_CALLS["swapaxes_"]):
        assert mt.autograd.gradcheck(lambda t: call(t * 1), (x,))
        assert mt.autograd.gradgradcheck(lambda t: call(t * 1), (x,))


# --------------------------------------------------------------------------- scatter-style
# and indexing

def _idx(values, lib):
    return lib.tensor(values)


SCATTER_CALLS = {
    "select_scatter": lambda m, x: m.select_scatter(x, m.ones(3, dtype=x.dtype), 0, 1),
    "slice_scatter": lambda m, x: m.slice_scatter(x, m.ones(4, 2, dtype=x.dtype), 1, 0, 3, 2),
    "diagonal_scatter": lambda m, x: m.diagonal_scatter(x, m.ones(2, dtype=x.dtype), 1),
    "as_strided_scatter": lambda m, x: m.as_strided_scatter(x, m.ones(2, 2, dtype=x.dtype),
                                                            (2, 2), (1, 3), 1),
    "index_copy": lambda m, x: x.index_copy(1, _idx([2, 0], m), m.ones(4, 2, dtype=x.dtype)),
    "index_reduce": lambda m, x: x.index_reduce(0, _idx([3, 3, 0], m),
                                                m.full((3, 3), 2.0, dtype=x.dtype), "prod"),
    "masked_scatter": lambda m, x: x.masked_scatter(x > 0, m.arange(12.0, dtype=x.dtype)),
    "put": lambda m, x: x.put(_idx([1, -1, 4], m), m.ones(3, dtype=x.dtype)),
    "put accumulate": lambda m, x: x.put(_idx([1, 1, 4], m), m.ones(3, dtype=x.dtype), True),
}


@pytest.mark.parametrize("name", SCATTER_CALLS)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_scatters_match_pytorch_with_its_layout(name, layout):
    if layout == "contiguous":
        ours, theirs = pair(4, 3)
    else:
        t = torch.randn(3, 4, dtype=torch.float64)
        ours, theirs = mt_of(t).t(), t.t()
    call = SCATTER_CALLS[name]
    same(call(mt, ours), call(torch, theirs))


INPLACE_SCATTERS = {
    "index_copy_": lambda x, lib: x.index_copy_(0, lib.tensor([2, 0]), x.new_ones(2, 3)),
    "index_reduce_": lambda x, lib: x.index_reduce_(1, lib.tensor([1, 1]), x.new_full((4, 2), 3.0),
                                                    "amax", include_self=False),
    "index_reduce_ mean": lambda x, lib: x.index_reduce_(0, lib.tensor([0, 0, 3]),
                                                         x.new_ones(3, 3), "mean"),
    "masked_scatter_": lambda x, lib: x.masked_scatter_(lib.tensor([True, False, True]),
                                                        x.new_zeros(8) - 1),
    "put_": lambda x, lib: x.put_(lib.tensor([0, 5, 5]), x.new_ones(3), accumulate=True),
}


@pytest.mark.parametrize("name", INPLACE_SCATTERS)
def test_inplace_scatters_match_pytorch_with_gradients(name):
    """On a row of a non-leaf (a view, so CopySlices): values, the base, and the leaf's
    gradient as PyTorch's."""
    call = INPLACE_SCATTERS[name]
    values = torch.randn(2, 4, 3, dtype=torch.float64)
    results = []
    for lib, start in ((mt, mt_of(values)), (torch, values.clone())):
        leaf = start.requires_grad_()
        base = leaf * 2
        target = base[1]
        assert call(target, lib) is target
        (base * lib.arange(24.0, dtype=lib.float64).view(2, 4, 3)).sum().backward()
        results.append((base.detach(), leaf.grad))
    same(results[0][0], results[1][0], geometry=False)
    same(results[0][1], results[1][1], geometry=False)


@pytest.mark.parametrize("name", INPLACE_SCATTERS)
def test_inplace_scatters_under_vmap_match_the_loop(name):
    call = INPLACE_SCATTERS[name]
    x = mt.randn(3, 4, 3, dtype=mt.float64)
    got = mt.vmap(lambda t: call(t.clone(), mt))(x)
    loop = [call(x[i].clone(), mt) for i in range(3)]
    same(got, torch.stack([torch.from_numpy(r.numpy()) for r in loop]), geometry=False)


def test_index_reduce_of_integers_and_include_self():
    t = torch.tensor([1, 2, 3])
    for reduce in ("prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            expected = t.index_reduce(0, torch.tensor([0, 0, 2]), torch.tensor([4, 5, -6]),
                                      reduce, include_self=include_self)
            got = mt_of(t).index_reduce(0, mt.tensor([0, 0, 2]), mt.tensor([4, 5, -6]), reduce,
                                        include_self=include_self)
            same(got, expected)


def test_unique_consecutive_of_floats_with_dim():
    x = torch.tensor([[1.0, 1.0, 2.0], [1.0, 1.0, 2.0], [0.5, 1.0, 2.0]])
    for kwargs in [{}, {"dim": 0}, {"dim": -1}]:
        got = mt.unique_consecutive(mt_of(x), True, True, **kwargs)
        same(got, torch.unique_consecutive(x, True, True, **kwargs))
    with pytest.raises(RuntimeError, match="dynamic shape"):
        mt.vmap(mt.unique_consecutive)(mt_of(x))


SCATTER_ERRORS = {
    "select_scatter src": lambda m: m.select_scatter(m.ones(3, 4), m.ones(3), 0, 0),
    "select_scatter index": lambda m: m.select_scatter(m.ones(3, 4), m.ones(4), 0, 5),
    "slice_scatter src": lambda m: m.slice_scatter(m.ones(3, 4), m.ones(2, 4), 0, 0, 3),
    "diagonal_scatter src": lambda m: m.diagonal_scatter(m.ones(3, 4), m.ones(4)),
    "as_strided_scatter src": lambda m: m.as_strided_scatter(m.ones(3, 4), m.ones(4), (2, 2),
                                                             (1, 2)),
    "as_strided_scatter bounds": lambda m: m.as_strided_scatter(m.ones(3, 4), m.ones(20, 2),
                                                                (20, 2), (1, 2)),
    "index_copy index dims": lambda m: m.ones(3, 4).index_copy(0, m.tensor([[0]]),
                                                               m.ones(1, 4)),
    "index_copy dtype": lambda m: m.ones(3, 4).index_copy(0, m.tensor([0]),
                                                          m.ones(1, 4, dtype=m.float64)),
    "index_copy index dtype": lambda m: m.ones(3, 4).index_copy(
        0, m.tensor([0], dtype=m.int32), m.ones(1, 4)),
    "index_copy count": lambda m: m.ones(3, 4).index_copy(0, m.tensor([0, 1, 2]), m.ones(2, 4)),
    "index_copy source dims": lambda m: m.ones(3, 4).index_copy(0, m.tensor([0]), m.ones(4)),
    "index_copy slice": lambda m: m.ones(3, 4).index_copy(0, m.tensor([0]), m.ones(1, 3)),
    "index_copy bounds": lambda m: m.ones(3, 4).index_copy(0, m.tensor([5]), m.ones(1, 4)),
    "index_copy negative": lambda m: m.ones(3, 4).index_copy(0, m.tensor([-1]), m.ones(1, 4)),
    "index_reduce reduce": lambda m: m.ones(3, 4).index_reduce(0, m.tensor([0]), m.ones(1, 4),
                                                               "sum"),
    "index_reduce index dtype": lambda m: m.ones(3, 4).index_reduce(
        0, m.tensor([0.0]), m.ones(1, 4), "prod"),
    "index_reduce bounds": lambda m: m.ones(3, 4).index_reduce(0, m.tensor([7]), m.ones(1, 4),
                                                               "prod"),
    "index_reduce dtype": lambda m: m.ones(3, 4).index_reduce(
        0, m.tensor([0]), m.ones(1, 4, dtype=m.float64), "prod"),
    "index_reduce count": lambda m: m.ones(3, 4).index_reduce(0, m.tensor([0, 1]),
                                                              m.ones(1, 4), "prod"),
    "index_reduce index dims": lambda m: m.ones(3, 4).index_reduce(
        0, m.tensor([[0]]), m.ones(1, 4), "prod"),
    "masked_scatter mask dtype": lambda m: m.ones(3, 4).masked_scatter(
        m.ones(3, 4, dtype=m.uint8), m.ones(12)),
    "masked_scatter source dtype": lambda m: m.ones(3, 4).masked_scatter(
        m.ones(3, 4, dtype=m.bool), m.ones(12, dtype=m.float64)),
    "masked_scatter too few": lambda m: m.ones(3, 4).masked_scatter(
        m.ones(3, 4, dtype=m.bool), m.ones(5)),
    "put count": lambda m: m.ones(3, 4).put(m.tensor([0, 1]), m.ones(3)),
    "put bounds": lambda m: m.ones(3, 4).put(m.tensor([12]), m.ones(1)),
    "put dtype": lambda m: m.ones(3, 4).put(m.tensor([1]), m.ones(1, dtype=m.float64)),
    "put index dtype": lambda m: m.ones(3, 4).put(m.tensor([1], dtype=m.int32), m.ones(1)),
    "put empty": lambda m: m.ones(0).put(m.tensor([0]), m.ones(1)),
    "unique_consecutive dim": lambda m: m.unique_consecutive(m.tensor([1]), dim=1),
}


@pytest.mark.filterwarnings("ignore:masked_scatter_ received a mask with dtype torch.uint8")
@pytest.mark.parametrize("name", SCATTER_ERRORS)
def test_scatter_errors_match_pytorch(name):
    raises_like(lambda: SCATTER_ERRORS[name](mt), lambda: SCATTER_ERRORS[name](torch))


# --------------------------------------------------------------------------- matrix names

def test_cov_with_weights_matches_pytorch():
    x = torch.randn(3, 5, dtype=torch.float64)
    fw = torch.tensor([1, 0, 2, 3, 1])
    aw = torch.tensor([0.5, 1.0, 2.0, 0.1, 1.5], dtype=torch.float64)
    for kwargs in [{}, {"correction": 0}, {"fweights": fw}, {"aweights": aw},
                   {"fweights": fw, "aweights": aw, "correction": 2},
                   {"aweights": aw, "correction": 0}]:
        ours = {k: mt_of(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        same(mt.cov(mt_of(x), **ours), torch.cov(x, **kwargs), geometry=False)
    ints = torch.tensor([[1, 2, 4], [0, 1, 1]])
    same(mt.cov(mt_of(ints)), torch.cov(ints), geometry=False)
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
        got = mt.cov(mt.ones(2, 1))
    assert np.isnan(got.numpy()).all()
    # gradients with respect to the input and the importance weights
    xa, wa = mt_of(x).requires_grad_(), mt_of(aw).requires_grad_()
    assert mt.autograd.gradcheck(lambda a, w: mt.cov(a, aweights=w), (xa, wa))


def test_svd_keeps_torch_svds_conventions():
    a = torch.randn(2, 4, 3, dtype=torch.float64)
    for some in (True, False):
        U, S, V = mt.svd(mt_of(a), some=some)
        tU, tS, tV = torch.svd(a, some=some)
        assert (U.shape, S.shape, V.shape) == (tU.shape, tS.shape, tV.shape)
        k = S.shape[-1]
        rebuilt = (U[..., :k] * S.unsqueeze(-2)) @ V[..., :k].mT
        np.testing.assert_allclose(rebuilt.numpy(), a.numpy(), atol=1e-12)
    U, S, V = mt.svd(mt_of(a), compute_uv=False)
    tU, tS, tV = torch.svd(a, compute_uv=False)
    same((U, S, V), (tU, tS, tV), geometry=False)
    assert type(mt.svd(mt_of(a))).__name__ == "svd"
    assert type(mt.slogdet(mt.eye(2))).__name__ == "slogdet"
    assert mt.slogdet(mt.eye(2)).logabsdet.item() == 0.0


def test_logdet_and_matrix_power_edges():
    for m in ([[0.0, 1.0], [1.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]], [[2.0, 0.0], [0.0, 3.0]]):
        same(mt.logdet(mt.tensor(m)), torch.logdet(torch.tensor(m)))
    ints = torch.tensor([[1, 2], [0, 1]])
    for n in (0, 1, 5):
        same(mt_of(ints).matrix_power(n), ints.matrix_power(n), geometry=False)
    a = torch.randn(2, 3, 3, dtype=torch.float64) + 3 * torch.eye(3, dtype=torch.float64)
    same(mt_of(a).matrix_power(-3), a.matrix_power(-3), geometry=False)


INPLACE_PRODUCTS = {
    "addmv_": lambda x, lib: x[0, :3].addmv_(lib.ones(3, 2, dtype=x.dtype),
                                             lib.ones(2, dtype=x.dtype), beta=2, alpha=0.5),
    "addr_": lambda x, lib: x.addr_(lib.ones(3, dtype=x.dtype) * 2, lib.ones(4, dtype=x.dtype)),
    "addbmm_": lambda x, lib: x.addbmm_(lib.ones(2, 3, 1, dtype=x.dtype),
                                        lib.ones(2, 1, 4, dtype=x.dtype), beta=0),
    "renorm_": lambda x, lib: x.renorm_(2, 0, 1.0),
}


@pytest.mark.parametrize("name", INPLACE_PRODUCTS)
def test_inplace_products_match_pytorch(name):
    t = torch.randn(3, 4, dtype=torch.float64)
    results = []
    for lib, start in ((mt, mt_of(t)), (torch, t.clone())):
        leaf = start.requires_grad_()
        x = leaf * 1
        call = INPLACE_PRODUCTS[name]
        call(x, lib)
        (x * lib.arange(12.0, dtype=lib.float64).view(3, 4)).sum().backward()
        results.append((x.detach(), leaf.grad))
    same(results[0][0], results[1][0])
    same(results[0][1], results[1][1], geometry=False)


def test_matrix_methods_exist_as_in_pytorch():
    for name in ["addmv", "addmv_", "addr", "addr_", "addbmm", "addbmm_", "ger", "inner", "vdot",
                 "dist", "cov", "corrcoef", "renorm", "renorm_", "det", "logdet", "slogdet",
                 "inverse", "svd", "cholesky", "matrix_power", "pinverse"]:
        assert hasattr(torch.Tensor, name) and hasattr(mt.Tensor, name), name
    for name in ["chain_matmul", "trapezoid", "trapz", "cumulative_trapezoid"]:
        assert hasattr(mt, name) and not hasattr(mt.Tensor, name), name


MATRIX_ERRORS = {
    "addmv sizes": lambda m: m.addmv(m.ones(3), m.ones(3, 4), m.ones(3)),
    "addmv input": lambda m: m.addmv(m.ones(2), m.ones(3, 4), m.ones(4)),
    "addmv dims": lambda m: m.addmv(m.ones(3), m.ones(2, 3, 4), m.ones(4)),
    "addmv_ shape": lambda m: m.ones(1).addmv_(m.ones(3, 4), m.ones(4)),
    "addr dims": lambda m: m.addr(m.ones(3, 4), m.ones(3, 4), m.ones(4)),
    "addr input": lambda m: m.addr(m.ones(2, 4), m.ones(3), m.ones(4)),
    "addbmm batches": lambda m: m.addbmm(m.ones(3, 5), m.ones(2, 3, 4), m.ones(3, 4, 5)),
    "addbmm sizes": lambda m: m.addbmm(m.ones(3, 5), m.ones(2, 3, 4), m.ones(2, 3, 5)),
    "addbmm input": lambda m: m.addbmm(m.ones(2, 5), m.ones(2, 3, 4), m.ones(2, 4, 5)),
    "inner": lambda m: m.inner(m.ones(3, 4), m.ones(3)),
    "vdot dims": lambda m: m.vdot(m.ones(3, 4), m.ones(3)),
    "vdot sizes": lambda m: m.vdot(m.ones(3), m.ones(4)),
    "chain_matmul none": lambda m: m.chain_matmul(),
    "chain_matmul 1-d": lambda m: m.chain_matmul(m.ones(3, 4), m.ones(4)),
    "dist integers": lambda m: m.dist(m.tensor([1, 2]), m.tensor([1, 2])),
    "cov dims": lambda m: m.cov(m.ones(2, 2, 2)),
    "cov fweights dims": lambda m: m.cov(m.ones(3, 4), fweights=m.ones(2, 2, dtype=m.int64)),
    "cov fweights dtype": lambda m: m.cov(m.ones(3, 4), fweights=m.ones(4)),
    "cov fweights numel": lambda m: m.cov(m.ones(3, 4), fweights=m.ones(3, dtype=m.int64)),
    "cov fweights negative": lambda m: m.cov(m.ones(3, 4), fweights=-m.ones(4, dtype=m.int64)),
    "cov aweights dtype": lambda m: m.cov(m.ones(3, 4), aweights=m.ones(4, dtype=m.int64)),
    "cov aweights negative": lambda m: m.cov(m.ones(3, 4), aweights=-m.ones(4)),
    "renorm dims": lambda m: m.renorm(m.ones(3), 2, 0, 1),
    "renorm p": lambda m: m.renorm(m.ones(3, 4), 0, 0, 1),
    "renorm maxnorm": lambda m: m.renorm(m.ones(3, 4), 2, 0, -1),
    "trapezoid x": lambda m: m.trapezoid(m.ones(3, 4), m.ones(3)),
    "trapz x": lambda m: m.trapz(m.ones(3, 4), m.ones(3)),
    "cumulative_trapezoid x": lambda m: m.cumulative_trapezoid(m.ones(3, 4), m.ones(3)),
    "trapezoid 0-d": lambda m: m.trapezoid(m.tensor(1.0)),
    "matrix_power 1-d": lambda m: m.matrix_power(m.ones(3), 2),
    "matrix_power square": lambda m: m.matrix_power(m.ones(3, 4), 2),
    "matrix_power integer inverse": lambda m: m.matrix_power(m.ones(2, 2, dtype=m.int64), -1),
}


@pytest.mark.parametrize("name", MATRIX_ERRORS)
def test_matrix_errors_match_pytorch(name):
    raises_like(lambda: MATRIX_ERRORS[name](mt), lambda: MATRIX_ERRORS[name](torch))


def test_trapezoid_family_matches_pytorch():
    y = torch.randn(3, 4, dtype=torch.float64)
    x = torch.randn(4, dtype=torch.float64).cumsum(0)
    for fn in ("trapezoid", "trapz", "cumulative_trapezoid"):
        same(getattr(mt, fn)(mt_of(y), mt_of(x)), getattr(torch, fn)(y, x), geometry=False)
        same(getattr(mt, fn)(mt_of(y), dim=0), getattr(torch, fn)(y, dim=0), geometry=False)
    same(mt.trapezoid(mt_of(y), dx=0.25), torch.trapezoid(y, dx=0.25), geometry=False)
    same(mt.trapz(mt_of(y), dx=0.25), torch.trapz(y, dx=0.25), geometry=False)
    ints = torch.tensor([1, 2, 4])
    same(mt.trapezoid(mt_of(ints)), torch.trapezoid(ints))
    same(mt.cumulative_trapezoid(mt_of(ints), dx=2), torch.cumulative_trapezoid(ints, dx=2))
    same(mt.trapezoid(mt.ones(2, 0)), torch.trapezoid(torch.ones(2, 0)))


def test_matrix_exp_matches_pytorch_with_gradients():
    for scale in (0.1, 1.0, 30.0):          # no scaling, and several squarings
        a = torch.randn(2, 3, 3, dtype=torch.float64) * scale
        ours = mt_of(a).requires_grad_()
        theirs = a.clone().requires_grad_()
        same(ours.matrix_exp(), theirs.matrix_exp(), geometry=False)
        weight = torch.randn(2, 3, 3, dtype=torch.float64)
        (mt.matrix_exp(ours) * mt_of(weight)).sum().backward()
        (torch.matrix_exp(theirs) * weight).sum().backward()
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-7,
                                   atol=1e-9 * scale)
    for bad in (lambda m: m.matrix_exp(m.ones(2, 2, dtype=m.int64)),
                lambda m: m.matrix_exp(m.ones(3)), lambda m: m.matrix_exp(m.ones(2, 3))):
        raises_like(lambda: bad(mt), lambda: bad(torch))
