"""Sparse COO tensors against PyTorch: construction (size inference, validation errors),
the parts (indices, values, nnz, coalesced order), conversions, printing, arithmetic,
``sparse.sum``, the products with a dense operand, and their gradients (wrt the values
and the dense operand: vs PyTorch, gradcheck, gradgradcheck, vmap and vmap(grad) over the
dense operand), a sparse leaf's ``.grad``, and the refusals of ops without a sparse
version."""
import warnings

import numpy as np
import pytest

import microtensor as mt

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")


@pytest.fixture(autouse=True)
def _quiet_torch():
    # PyTorch warns that it skips the invariant checks by default
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse invariant checks")
        warnings.filterwarnings("ignore", message=r"torch\.sparse\.SparseTensor")
        yield


def _to_torch(x):
    if isinstance(x, mt.Tensor):
        return torch.from_numpy(np.array(x.detach().numpy()))
    return x


def _both(indices, values, *args, **kwargs):
    tkw = {k: getattr(torch, v.__repr__().split(".")[1]) if isinstance(v, mt.dtype) else v
           for k, v in kwargs.items()}
    args = tuple(a for a in args if a is not None)
    ours = mt.sparse_coo_tensor(indices, values, *args, **kwargs)
    theirs = torch.sparse_coo_tensor(_to_torch(indices), _to_torch(values), *args, **tkw)
    return ours, theirs


def _same_dtype(ours, theirs):
    assert repr(ours).split(".")[-1] == repr(theirs).split(".")[-1]


def assert_dense(ours, theirs, atol=1e-6):
    assert isinstance(ours, mt.Tensor) and theirs.layout == torch.strided
    assert tuple(ours.shape) == tuple(theirs.shape)
    _same_dtype(ours.dtype, theirs.dtype)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), atol=atol)


def assert_sparse(ours, theirs, atol=1e-6):
    assert ours.is_sparse and theirs.is_sparse and ours.layout is mt.sparse_coo
    assert tuple(ours.shape) == tuple(theirs.shape)
    _same_dtype(ours.dtype, theirs.dtype)
    assert ours._nnz() == theirs._nnz()
    assert (ours.sparse_dim(), ours.dense_dim()) == (theirs.sparse_dim(), theirs.dense_dim())
    assert ours.is_coalesced() == theirs.is_coalesced()
    assert ours._indices().tolist() == theirs._indices().tolist()
    assert ours._indices().dtype is mt.int64
    assert_dense(ours._values(), theirs._values(), atol)


def assert_same_error(ours, theirs, exact=True):
    with pytest.raises(Exception) as expected:
        theirs()
    with pytest.raises(type(expected.value)) as got:
        ours()
    if exact:
        assert str(got.value) == str(expected.value)
    return got.value


I = [[1, 0, 1, 1], [2, 0, 2, 1]]           # (1, 2) twice: uncoalesced; size (2, 3)
V = [3.0, 4.0, 5.0, -1.0]


# --------------------------------------------------------------------------- layouts

def test_layouts():
    assert mt.strided is not mt.sparse_coo
    assert repr(mt.sparse_coo) == "microtensor.sparse_coo"
    assert mt.ones(2).layout is mt.strided and not mt.ones(2).is_sparse
    s = mt.sparse_coo_tensor(I, V)
    assert s.layout is mt.sparse_coo and s.is_sparse and not s.is_sparse_csr


# --------------------------------------------------------------------------- construction

@pytest.mark.parametrize("case", [
    dict(indices=I, values=V),
    dict(indices=I, values=V, size=(4, 5)),
    dict(indices=I, values=[1, 2, 3, 4]),
    dict(indices=I, values=V, dtype=mt.float64),
    dict(indices=I, values=V, size=(2, 3), dtype=mt.int64),
    dict(indices=[[0, 2]], values=[[1.0, 2.0], [3.0, 4.0]]),                 # hybrid
    dict(indices=[[0, 2]], values=[[1.0, 2.0], [3.0, 4.0]], size=(5, 2)),
    dict(indices=[[1], [0]], values=[7.0]),                                   # nnz 1
    dict(indices=np.zeros((2, 0), np.int64), values=np.zeros(0, np.float32)),
    dict(indices=np.zeros((2, 0), np.int64), values=np.zeros(0, np.float32), size=(2, 2)),
    dict(indices=[[0, 1], [1, 0]], values=V[:2], is_coalesced=True),
    dict(indices=I, values=[1 + 1j, 2j, 3, 4]),
    dict(indices=I, values=[True, False, True, True]),
])
def test_construction_matches_torch(case):
    case = dict(case)
    indices, values = case.pop("indices"), case.pop("values")
    ours, theirs = _both(mt.tensor(np.asarray(indices)), mt.tensor(np.asarray(values)), **case)
    assert_sparse(ours, theirs)
    assert ours.size() == ours.shape and ours.dim() == theirs.dim()
    assert ours.numel() == theirs.numel() and ours.device == mt.device("cpu")


def test_construction_takes_float_and_int32_indices_and_lists():
    for indices in (mt.tensor(I, dtype=mt.float32), mt.tensor(I, dtype=mt.int32)):
        ours, theirs = _both(indices, mt.tensor(V))
        assert_sparse(ours, theirs)
    assert_sparse(mt.sparse_coo_tensor(I, V), torch.sparse_coo_tensor(I, V))


@pytest.mark.filterwarnings("ignore:microtensor.sparse")
def test_legacy_typed_constructors():
    with pytest.warns(UserWarning, match="deprecated"):
        mt.sparse.FloatTensor(2, 2)
    i, v = mt.tensor([[0, 1], [1, 0]]), mt.tensor([1.0, 2.0])
    ti, tv = _to_torch(i), _to_torch(v)
    assert_sparse(mt.sparse.FloatTensor(i, v, mt.Size([2, 2])),
                  torch.sparse.FloatTensor(ti, tv, torch.Size([2, 2])))
    assert_sparse(mt.sparse.FloatTensor(i, v), torch.sparse.FloatTensor(ti, tv))
    assert_sparse(mt.sparse.FloatTensor(i, v.double(), (2, 2)),       # values keep their dtype
                  torch.sparse.FloatTensor(ti, tv.double(), (2, 2)))
    assert_sparse(mt.sparse.DoubleTensor(2, 3), torch.sparse.DoubleTensor(2, 3))
    assert_sparse(mt.sparse.LongTensor(i, mt.tensor([1, 2]), (2, 2)),
                  torch.sparse.LongTensor(ti, torch.tensor([1, 2]), (2, 2)))
    assert_same_error(lambda: mt.sparse.FloatTensor(i.int(), v, (2, 2)),
                      lambda: torch.sparse.FloatTensor(ti.int(), tv, (2, 2)))
    assert mt.sparse.FloatTensor(i, v.double()).type() == "microtensor.sparse.DoubleTensor"


@pytest.mark.parametrize("indices, values, size", [
    (I, V, (3,)),                                   # len(size) != sparse_dim + dense_dim
    (I, V, (3, 3, 2)),
    (I, V[:3], None),                               # nnz mismatch
    ([0, 1], [1.0, 2.0], (3,)),                     # indices not 2-D
    ([[-1], [0]], [1.0], None),                     # negative index
    ([[0, 2]], [[1.0, 2.0], [3.0, 4.0]], (3, 3)),   # wrong dense sizes
    (I, 2.0, None),                                 # 0-d values
])
def test_construction_errors_match_torch(indices, values, size):
    size = () if size is None else (size,)
    assert_same_error(lambda: mt.sparse_coo_tensor(indices, values, *size),
                      lambda: torch.sparse_coo_tensor(indices, values, *size))


def test_out_of_bounds_indices_are_always_refused():
    # PyTorch checks them only with check_invariants=True (its default reads out of bounds)
    indices, values = [[2], [0]], [1.0]
    assert_same_error(
        lambda: mt.sparse_coo_tensor(indices, values, (2, 2)),
        lambda: torch.sparse_coo_tensor(indices, values, (2, 2), check_invariants=True))


def test_values_share_memory_but_not_autograd_flags():
    values = mt.tensor(V)
    for s in (mt.sparse_coo_tensor(I, values), mt.sparse_coo_tensor(I, values, requires_grad=True)):
        s.requires_grad_()
        assert s.is_leaf and s.requires_grad and not values.requires_grad
    values.mul_(2)     # as in PyTorch, the sparse tensor's values are the given memory
    assert s._values().tolist() == [2 * v for v in V]


def test_flags_data_and_cpu():
    ours, theirs = _both(mt.tensor(I), mt.tensor(V))
    assert ours.is_contiguous() == theirs.is_contiguous()
    assert ours.cpu() is ours and theirs.cpu() is theirs
    assert_sparse(ours.data, theirs.data)
    ours.requires_grad = theirs.requires_grad = True
    assert ours.requires_grad and ours.is_leaf and theirs.is_leaf


def test_requires_grad_only_for_float_values():
    assert_same_error(lambda: mt.sparse_coo_tensor(I, [1, 2, 3, 4], requires_grad=True),
                      lambda: torch.sparse_coo_tensor(I, [1, 2, 3, 4], requires_grad=True))


def test_uncoalesced_indices_and_values_raise():
    ours, theirs = _both(mt.tensor(I), mt.tensor(V))
    assert_same_error(ours.indices, theirs.indices)
    assert_same_error(ours.values, theirs.values)
    assert ours.coalesce().indices().tolist() == theirs.coalesce().indices().tolist()


# --------------------------------------------------------------------------- coalesce

@pytest.mark.parametrize("sizes, dense", [((4, 5), ()), ((3, 2, 4), ()), ((6,), ()),
                                          ((3, 4), (2,)), ((2, 3), (2, 1))])
def test_coalesce_sums_duplicates_and_orders_indices(sizes, dense):
    rng = np.random.default_rng(len(sizes) + len(dense))
    nnz = 12
    indices = np.stack([rng.integers(0, s, nnz) for s in sizes])
    values = rng.standard_normal((nnz,) + dense)
    ours, theirs = _both(mt.tensor(indices), mt.tensor(values))
    assert_sparse(ours, theirs)
    assert_sparse(ours.coalesce(), theirs.coalesce(), atol=1e-12)
    assert_dense(ours.to_dense(), theirs.to_dense(), atol=1e-12)
    coalesced = ours.coalesce()
    assert coalesced.coalesce() is coalesced


def test_to_dense_dtype():
    ours, theirs = _both(mt.tensor(I), mt.tensor(V))
    assert_same_error(lambda: ours.to_dense(mt.float64), lambda: theirs.to_dense(torch.float64))
    dense = mt.ones(2)
    assert dense.to_dense() is dense


# --------------------------------------------------------------------------- to_sparse

@pytest.mark.parametrize("sparse_dim", [None, 1, 2])
def test_to_sparse(sparse_dim):
    x = np.array([[0.0, 1.5, 0.0], [0.0, 0.0, 0.0], [2.0, 0.0, -3.0]])
    args = () if sparse_dim is None else (sparse_dim,)
    assert_sparse(mt.tensor(x).to_sparse(*args), torch.tensor(x).to_sparse(*args))


@pytest.mark.parametrize("x", [3.0, 0.0])
def test_to_sparse_of_a_scalar(x):
    assert_sparse(mt.tensor(x).to_sparse(), torch.tensor(x).to_sparse())


def test_to_sparse_errors_and_sparse_input():
    for bad in (3, -1, 0):
        assert_same_error(lambda: mt.zeros(2, 3).to_sparse(bad),
                          lambda: torch.zeros(2, 3).to_sparse(bad))
    ours, theirs = _both(mt.tensor(I), mt.tensor(V))
    assert ours.to_sparse() is ours
    assert_same_error(lambda: ours.to_sparse(1), lambda: theirs.to_sparse(1))


# --------------------------------------------------------------------------- printing

@pytest.mark.parametrize("case", [
    (I, V, None), (I, [1, 2, 3, 4], None), ([[0, 2]], [[1.0, 2.0], [3.0, 4.0]], None),
    (I, np.array([1 + 1j, 2j, 3, 4], np.complex64), None),
    (np.zeros((2, 0), np.int64), np.zeros(0, np.float32), (2, 2)),
])
def test_repr_matches_torch(case):
    indices, values, size = case
    values = np.asarray(values)
    if values.dtype == np.float64:    # float32: no dtype printed, so lines wrap alike
        values = values.astype(np.float32)
    ours, theirs = _both(mt.tensor(np.asarray(indices)), mt.tensor(values), size)
    assert repr(ours) == repr(theirs).replace("torch.", "microtensor.")
    assert repr(ours.coalesce()) == repr(theirs.coalesce()).replace("torch.", "microtensor.")


def test_repr_shows_dtype_and_autograd():
    values = mt.tensor(V, dtype=mt.float64, requires_grad=True)
    text = repr(mt.sparse_coo_tensor(I, values))
    assert "dtype=microtensor.float64" in text and "grad_fn=<" in text
    leaf = mt.sparse_coo_tensor(I, V, requires_grad=True)
    assert repr(leaf).endswith("requires_grad=True)")


# --------------------------------------------------------------------------- copies, shape

def test_clone_detach_to_keep_the_pattern():
    for indices in (I, [[0, 1], [1, 1]]):
        ours, theirs = _both(mt.tensor(indices), mt.tensor(V[:len(indices[0])]))
        assert_sparse(ours.clone(), theirs.clone())
        assert_sparse(ours.detach(), theirs.detach())
        assert_sparse(ours.to(mt.float64), theirs.to(torch.float64))
        for method in ("double", "half", "long", "int", "bool", "cfloat", "byte"):
            assert_sparse(getattr(ours, method)(), getattr(theirs, method)())
    clone = ours.clone()
    clone._values().add_(1)
    assert ours._values().tolist() != clone._values().tolist()


def test_transpose():
    ours, theirs = _both(mt.tensor(I), mt.tensor(V))
    assert_sparse(ours.t(), theirs.t())
    assert_sparse(ours.t().t(), theirs.t().t())
    assert_sparse(ours.transpose(0, 1), theirs.transpose(0, 1))
    assert_sparse(ours.coalesce().t(), theirs.coalesce().t())
    assert_same_error(lambda: ours.transpose(0, 2), lambda: theirs.transpose(0, 2))
    assert_sparse(mt.t(ours), torch.t(theirs))
    assert_sparse(mt.transpose(ours, 1, 0), torch.transpose(theirs, 1, 0))
    hybrid, torch_hybrid = _both(mt.tensor([[0, 2]]), mt.ones(2, 2))
    assert_same_error(lambda: hybrid.transpose(0, 1), lambda: torch_hybrid.transpose(0, 1))
    assert_same_error(hybrid.t, torch_hybrid.t)
    cube, torch_cube = _both(mt.tensor([[0], [1], [2]]), mt.tensor([1.0]), (2, 2, 3))
    assert_same_error(cube.t, torch_cube.t)
    vector, torch_vector = _both(mt.tensor([[0, 1]]), mt.tensor([1.0, 2.0]))
    assert_sparse(vector.t(), torch_vector.t())


# --------------------------------------------------------------------------- arithmetic

def test_scalar_arithmetic():
    ours, theirs = _both(mt.tensor(I), mt.tensor(V))
    assert_sparse(ours * 2, theirs * 2)
    assert_sparse(2.5 * ours, 2.5 * theirs)
    assert_sparse(ours * mt.tensor(3.0), theirs * torch.tensor(3.0))
    assert_sparse(ours / 4, theirs / 4)
    assert_sparse(-ours, -theirs)
    assert_sparse(mt.neg(ours), torch.neg(theirs))
    assert_sparse(mt.mul(ours, 2), torch.mul(theirs, 2))
    assert_sparse(ours // 2, theirs // 2)
    ints, torch_ints = _both(mt.tensor(I), mt.tensor([1, 2, 3, 4]))
    assert_sparse(ints / 2, torch_ints / 2)


@pytest.mark.parametrize("dense_shape", [(3,), (2, 3), (2, 1), (1,)])
def test_times_a_dense_tensor(dense_shape):
    dense = np.arange(1.0, 1.0 + np.prod(dense_shape)).reshape(dense_shape)
    ours, theirs = _both(mt.tensor(I), mt.tensor(V))
    assert_sparse(ours * mt.tensor(dense), theirs * torch.tensor(dense))
    assert_sparse(mt.mul(mt.tensor(dense), ours), torch.mul(torch.tensor(dense), theirs))
    hybrid, torch_hybrid = _both(mt.tensor([[0, 2]]), mt.ones(2, 2))
    assert_sparse(hybrid * mt.tensor([1.0, 2.0]), torch_hybrid * torch.tensor([1.0, 2.0]))


def _value_and_dense_grads(use):
    """The gradients wrt a sparse tensor's values and a dense operand of
    ``use(lib, sparse, dense)``, in microtensor and in PyTorch."""
    values, dense = _graph_operands()
    grads = []
    for lib in (mt, torch):
        v = lib.tensor(values, requires_grad=True)
        d = lib.tensor(dense, requires_grad=True)
        s = lib.sparse_coo_tensor(lib.tensor(I), v, (2, 3))
        assert s.requires_grad and not s.is_leaf and s.grad_fn is not None
        use(lib, s, d).backward()
        grads.append((v.grad, d.grad))
    return grads


def test_times_a_dense_tensor_is_differentiable():
    (mv, md), (tv, td) = _value_and_dense_grads(
        lambda lib, s, d: ((s * d.t()).to_dense() ** 2).sum())
    assert_dense(mv, tv, atol=1e-10)
    assert td.is_sparse     # PyTorch's gradient of the dense operand is sparse; ours dense
    assert_dense(md, td.to_dense(), atol=1e-10)


def test_sparse_addition():
    a, ta = _both(mt.tensor(I), mt.tensor(V))
    b, tb = _both(mt.tensor([[0, 1], [1, 1]]), mt.tensor([1.0, 2.0]), (2, 3))
    assert_sparse(a + b, ta + tb)                          # concatenated
    assert_sparse(a.coalesce() + b.coalesce(), ta.coalesce() + tb.coalesce())   # merged
    assert_sparse(a - b, ta - tb)
    assert_sparse(a.add(b, alpha=2), ta.add(tb, alpha=2))
    assert_sparse(mt.add(a, b), torch.add(ta, tb))
    doubles, tdoubles = _both(mt.tensor([[0], [0]]), mt.tensor([1.0]), (2, 3), dtype=mt.float64)
    assert_sparse(a + doubles, ta + tdoubles)
    c, tc = _both(mt.tensor(I), mt.tensor(V), (3, 3))
    assert_same_error(lambda: a + c, lambda: ta + tc)
    assert_same_error(lambda: a + 1, lambda: ta + 1)


def test_dense_plus_sparse_is_dense():
    a, ta = _both(mt.tensor(I), mt.tensor(V))
    dense = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    assert_dense(mt.tensor(dense) + a, torch.tensor(dense) + ta)
    assert_dense(mt.tensor(dense) - a, torch.tensor(dense) - ta)
    assert_dense(mt.add(mt.tensor(dense), a, alpha=2),
                 torch.add(torch.tensor(dense), ta, alpha=2))


# --------------------------------------------------------------------------- sparse.sum

@pytest.mark.parametrize("dim", [None, 0, 1, -1, (0, 1), 2, (0, 2), (1, 2)])
def test_sparse_sum(dim):
    values = np.arange(8.0).reshape(4, 2)            # hybrid: a dense dim of 2
    ours, theirs = _both(mt.tensor(I), mt.tensor(values))
    args = () if dim is None else (dim,)
    got, expected = mt.sparse.sum(ours, *args), torch.sparse.sum(theirs, *args)
    if expected.is_sparse:
        assert_sparse(got, expected)
    else:
        assert_dense(got, expected)


def test_sparse_sum_dtype_and_errors():
    ints, tints = _both(mt.tensor(I), mt.tensor([1, 2, 3, 4]))
    assert_dense(mt.sparse.sum(ints), torch.sparse.sum(tints))
    assert_dense(mt.sparse.sum(ints, dtype=mt.float64),
                 torch.sparse.sum(tints, dtype=torch.float64))
    assert_dense(ints.sum(), tints.sum())
    assert_same_error(lambda: mt.sparse.sum(ints, 2), lambda: torch.sparse.sum(tints, 2))
    assert_same_error(lambda: mt.sparse.sum(ints, (0, 0)), lambda: torch.sparse.sum(tints, (0, 0)))


# --------------------------------------------------------------------------- softmax

SOFTMAX_I = [[1, 0, 1, 1, 0], [2, 0, 2, 1, 1]]


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sparse_softmax_matches_torch(name, dim):
    values = np.array([3.0, 4.0, 5.0, -1.0, 2.0])
    results, grads = [], []
    for lib in (mt, torch):
        v = lib.tensor(values, requires_grad=True)
        # PyTorch's backward of a negative dim is wrong (its own gradcheck fails): the
        # reference takes the dim non-negative
        along = dim if lib is mt else dim % 2
        out = getattr(lib.sparse, name)(lib.sparse_coo_tensor(SOFTMAX_I, v, (2, 3)), along)
        (out.to_dense() * lib.arange(6.0, dtype=lib.float64).view(2, 3)).sum().backward()
        results.append(out)
        grads.append(v.grad)
    assert_sparse(*results, atol=1e-12)
    assert_dense(*grads, atol=1e-12)


@pytest.mark.parametrize("dim", [0, 1])
def test_sparse_softmax_of_a_hybrid_tensor(dim):
    values = np.arange(6.0).reshape(3, 2)
    ours, theirs = _both(mt.tensor([[0, 2, 0]]), mt.tensor(values))
    assert_sparse(mt.sparse.softmax(ours, dim), torch.sparse.softmax(theirs, dim), atol=1e-12)


def test_sparse_softmax_checks_gradcheck_and_vmap():
    ours, theirs = _both(mt.tensor(SOFTMAX_I), mt.tensor([1, 2, 3, 4, 5]), (2, 3))
    assert_same_error(lambda: mt.sparse.softmax(ours, 1), lambda: torch.sparse.softmax(theirs, 1))
    assert_same_error(lambda: mt.sparse.softmax(ours, 2), lambda: torch.sparse.softmax(theirs, 2))
    assert_sparse(mt.sparse.softmax(ours, 1, dtype=mt.float64),
                  torch.sparse.softmax(theirs, 1, dtype=torch.float64))

    def probabilities(v):
        return mt.sparse.softmax(mt.sparse_coo_tensor(SOFTMAX_I, v, (2, 3)), 1)._values()

    v = mt.tensor(np.random.default_rng(6).standard_normal(5), requires_grad=True)
    assert mt.autograd.gradcheck(probabilities, (v,))
    assert mt.autograd.gradgradcheck(probabilities, (v,))
    batch = mt.tensor(np.random.default_rng(7).standard_normal((3, 5)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # the loop fallback warns
        out = mt.vmap(probabilities)(batch)
    for k in range(3):
        np.testing.assert_allclose(out[k].numpy(), probabilities(batch[k]).numpy(), atol=1e-12)


# --------------------------------------------------------------------------- products

def _product_operands(dtype=np.float64):
    ours, theirs = _both(mt.tensor(I), mt.tensor(np.asarray(V, dtype)))
    dense = np.random.default_rng(0).standard_normal((3, 2)).astype(dtype)
    return ours, theirs, dense


@pytest.mark.parametrize("product", [
    lambda lib, s, d: lib.sparse.mm(s, d), lambda lib, s, d: lib.mm(s, d),
    lambda lib, s, d: lib.matmul(s, d), lambda lib, s, d: s @ d, lambda lib, s, d: s.mm(d),
    lambda lib, s, d: lib.spmm(s, d), lambda lib, s, d: s.matmul(d[:, 0]),
    lambda lib, s, d: lib.sparse.addmm(lib.ones(2, 2, dtype=d.dtype), s, d),
    lambda lib, s, d: lib.sparse.addmm(lib.ones(2, dtype=d.dtype), s, d, beta=0.5, alpha=2.0),
    lambda lib, s, d: lib.sparse.addmm(lib.full((1,), float("nan"), dtype=d.dtype), s, d,
                                       beta=0),
])
def test_products_match_torch(product):
    ours, theirs, dense = _product_operands()
    expected = product(torch, theirs, torch.tensor(dense))
    assert_dense(product(mt, ours, mt.tensor(dense)), expected, atol=1e-12)
    assert_dense(product(mt, ours.coalesce(), mt.tensor(dense)), expected, atol=1e-12)


def test_sparse_namespace_on_dense_tensors():
    a, b = np.ones((2, 3), np.float32), np.arange(6.0, dtype=np.float32).reshape(3, 2)
    for name in ("mm", "spmm"):
        ours = getattr(mt.sparse if name == "mm" else mt, name)(mt.tensor(a), mt.tensor(b))
        theirs = getattr(torch.sparse if name == "mm" else torch, name)(torch.tensor(a),
                                                                        torch.tensor(b))
        assert_dense(ours, theirs)
    assert_dense(mt.sparse.addmm(mt.ones(2, 2), mt.tensor(a), mt.tensor(b)),
                 torch.sparse.addmm(torch.ones(2, 2), torch.tensor(a), torch.tensor(b)))
    assert_same_error(lambda: mt.sparse.sum(mt.tensor(a)),
                      lambda: torch.sparse.sum(torch.tensor(a)))


def test_product_errors_match_torch():
    ours, theirs, dense = _product_operands(np.float32)
    cases = [
        (lambda: mt.sparse.mm(ours, mt.ones(4, 2)),
         lambda: torch.sparse.mm(theirs, torch.ones(4, 2))),
        (lambda: mt.mm(ours, mt.ones(4, 2)), lambda: torch.mm(theirs, torch.ones(4, 2))),
        (lambda: mt.sparse.mm(ours, mt.ones(3)), lambda: torch.sparse.mm(theirs, torch.ones(3))),
        (lambda: mt.sparse.mm(ours, mt.ones(3, 2, dtype=mt.float64)),
         lambda: torch.sparse.mm(theirs, torch.ones(3, 2, dtype=torch.float64))),
    ]
    cases.append((lambda: ours @ mt.ones(2, 3, 2), lambda: theirs @ torch.ones(2, 3, 2)))
    for mine, reference in cases:
        assert_same_error(mine, reference)
    hybrid = mt.sparse_coo_tensor([[0, 2]], mt.ones(2, 2))
    with pytest.raises(RuntimeError, match="sparse"):
        mt.sparse.mm(hybrid, mt.ones(2, 2))


# --------------------------------------------------------------------------- autograd

def _graph_operands():
    rng = np.random.default_rng(1)
    values = rng.standard_normal(4)
    dense = rng.standard_normal((3, 2))
    return values, dense


@pytest.mark.parametrize("use", [
    lambda lib, s, d: (lib.sparse.mm(s, d) ** 2).sum(),
    lambda lib, s, d: ((s @ d).sin()).sum(),
    lambda lib, s, d: (lib.mm(s, d) * d[:2]).sum(),
    lambda lib, s, d: ((s.coalesce() * 3) @ d).sum(),
    lambda lib, s, d: (s.to_dense() ** 2).sum() + d.sum(),
    lambda lib, s, d: lib.sparse.sum(s) * d.sum(),
    lambda lib, s, d: (lib.sparse.sum(s, 1).to_dense() ** 2).sum() + d.sum(),
    lambda lib, s, d: ((s.t() @ d[:2]) ** 2).sum(),
    lambda lib, s, d: (((s + s.coalesce()) / 2) @ d).pow(2).sum(),
])
def test_gradients_wrt_values_and_dense_match_torch(use):
    (mv, md), (tv, td) = _value_and_dense_grads(use)
    assert_dense(mv, tv, atol=1e-10)
    assert_dense(md, td, atol=1e-10)


def test_gradcheck_and_gradgradcheck_wrt_values_and_dense():
    values, dense = _graph_operands()
    v = mt.tensor(values, requires_grad=True)
    d = mt.tensor(dense, requires_grad=True)

    def product(v, d):
        return mt.sparse.mm(mt.sparse_coo_tensor(I, v, (2, 3)), d)

    def dense_of(v):
        return mt.sparse_coo_tensor(I, v, (2, 3)).coalesce().to_dense()

    assert mt.autograd.gradcheck(product, (v, d))
    assert mt.autograd.gradgradcheck(product, (v, d))
    assert mt.autograd.gradcheck(dense_of, (v,))
    assert mt.autograd.gradgradcheck(dense_of, (v,))


@pytest.mark.parametrize("call", [lambda s, d: s @ d, lambda s, d: mt.mm(s, d),
                                  lambda s, d: mt.matmul(s, d), lambda s, d: mt.sparse.mm(s, d)])
def test_vmap_over_the_dense_operand_takes_no_fallback(call):
    values, _ = _graph_operands()
    s = mt.sparse_coo_tensor(I, values, (2, 3))
    batch = mt.tensor(np.random.default_rng(2).standard_normal((4, 3, 2)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # the loop fallback warns
        out = mt.vmap(lambda d: call(s, d))(batch)
        grads = mt.vmap(mt.func.grad(lambda d: (call(s, d) ** 2).sum()))(batch)
    expected = torch.stack([torch.sparse.mm(_torch_sparse(s), _to_torch(d)) for d in batch])
    assert_dense(out, expected, atol=1e-12)
    for i in range(4):
        d = _to_torch(batch[i]).requires_grad_()
        (torch.sparse.mm(_torch_sparse(s), d) ** 2).sum().backward()
        np.testing.assert_allclose(grads[i].numpy(), d.grad.numpy(), atol=1e-12)


def test_forward_ad_through_a_product():
    # PyTorch has no forward AD through sparse_coo_tensor: the reference is the dense product
    rng = np.random.default_rng(5)
    v, tv = (mt.tensor(rng.standard_normal(4)) for _ in range(2))
    d, td = (mt.tensor(rng.standard_normal((3, 2))) for _ in range(2))

    def product(v, d):
        return mt.sparse_coo_tensor(I, v, (2, 3)) @ d

    _, tangent = mt.func.jvp(product, (v, d), (tv, td))
    expected = (mt.sparse_coo_tensor(I, tv, (2, 3)).to_dense() @ d +
                mt.sparse_coo_tensor(I, v, (2, 3)).to_dense() @ td)
    np.testing.assert_allclose(tangent.numpy(), expected.numpy(), atol=1e-12)


def _torch_sparse(s):
    return torch.sparse_coo_tensor(_to_torch(s._indices()), _to_torch(s._values()), s.shape)


@pytest.mark.parametrize("use", [
    lambda lib, s: (s.to_dense() ** 2).sum(),
    lambda lib, s: lib.sparse.mm(s, lib.ones(3, 2, dtype=lib.float64)).sum(),
    lambda lib, s: (lib.sparse.sum(s, 0).to_dense() ** 2).sum(),
])
@pytest.mark.parametrize("indices", [I, [[0, 1, 1], [0, 0, 2]]])
def test_sparse_leaf_grad_matches_torch(use, indices):
    values = np.arange(1.0, len(indices[0]) + 1)
    leaves = []
    for lib in (mt, torch):
        leaf = lib.sparse_coo_tensor(lib.tensor(indices), lib.tensor(values), (2, 3),
                                     requires_grad=True)
        assert leaf.is_leaf and leaf.requires_grad and leaf.grad is None
        use(lib, leaf).backward()
        leaves.append(leaf)
    assert_sparse(leaves[0].grad, leaves[1].grad, atol=1e-12)
    leaves[0].grad = None
    assert leaves[0].grad is None


def test_to_sparse_is_differentiable():
    x = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    grads = []
    for lib in (mt, torch):
        dense = lib.tensor(x, requires_grad=True)
        s = dense.to_sparse()
        (lib.sparse.mm(s, lib.ones(3, 2, dtype=lib.float64)) ** 2).sum().backward()
        grads.append(dense.grad)
    assert_dense(*grads, atol=1e-12)


def test_vmap_over_values_takes_no_fallback():
    batch = mt.tensor(np.random.default_rng(3).standard_normal((4, 4)))
    dense = mt.tensor(np.random.default_rng(4).standard_normal((3, 2)))

    def product(v):
        return mt.sparse_coo_tensor(I, v, (2, 3)) @ dense

    def summed(v):
        return (mt.sparse.sum(mt.sparse_coo_tensor(I, v, (2, 3)), 0).to_dense() ** 2).sum()

    with warnings.catch_warnings():
        warnings.simplefilter("error")      # the loop fallback warns
        out = mt.vmap(product)(batch)
        grads = mt.vmap(mt.func.grad(summed))(batch)
    for k in range(4):
        np.testing.assert_allclose(out[k].numpy(), product(batch[k]).numpy(), atol=1e-12)
        np.testing.assert_allclose(grads[k].numpy(), mt.func.grad(summed)(batch[k]).numpy(),
                                   atol=1e-12)


# --------------------------------------------------------------------------- refusals

def test_ops_without_a_sparse_version_raise_not_implemented():
    s = mt.sparse_coo_tensor(I, V)
    for call in (lambda: mt.exp(s), lambda: s.exp(), lambda: s.view(6), lambda: mt.relu(s),
                 lambda: s[0], lambda: mt.ones(3, 2) @ s,
                 lambda: mt.mm(mt.ones(3, 2), s), lambda: s * s, lambda: s * mt.ones(1, 2, 3),
                 lambda: bool(s), lambda: s == s, lambda: s < 1):
        with pytest.raises(NotImplementedError, match="Sparse|sparse"):
            call()
    with pytest.raises(NotImplementedError, match="aten::exp"):
        mt.exp(s)
    with pytest.raises(NotImplementedError, match="aten::view"):
        s.view(6)
    assert_same_error(s.numpy, _torch_sparse(s).numpy)
    with pytest.raises(AttributeError):
        s.no_such_attribute
    with pytest.raises(TypeError, match="SparseTensor"):   # a composite: no dispatcher
        mt.cat([s, s])
    with pytest.raises(RuntimeError, match="requires a scalar"):
        s / mt.ones(3)


def test_refused_op_changes_nothing():
    s = mt.sparse_coo_tensor(I, V)
    dense = mt.ones(2, 3)
    with pytest.raises(NotImplementedError):
        dense.add_(s)
    assert dense.tolist() == [[1.0] * 3] * 2 and dense._version == 0


def test_dense_errors_unchanged():
    # a failure without a sparse operand keeps its own error
    with pytest.raises(TypeError, match="must be Tensor"):
        mt.exp({"a": 1})
