"""meshgrid / broadcast_tensors (views: autograd and vmap through expand/reshape) and the
random ops bernoulli, normal, uniform_, normal_, multinomial, compared with PyTorch."""
import numpy as np
import pytest

import microtensor as mt

torch = pytest.importorskip("torch")


def _np(t):
    return np.asarray(t.detach().numpy() if hasattr(t, "detach") else t)


# --------------------------------------------------------------------------- meshgrid
@pytest.mark.parametrize("indexing", ["ij", "xy"])
@pytest.mark.parametrize("sizes", [(3,), (3, 2), (3, 2, 4), (1, 0)])
def test_meshgrid_matches_torch(indexing, sizes):
    data = [np.arange(n, dtype=np.float64) + 10 * i for i, n in enumerate(sizes)]
    ours = mt.meshgrid(*[mt.tensor(d) for d in data], indexing=indexing)
    theirs = torch.meshgrid(*[torch.tensor(d) for d in data], indexing=indexing)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_array_equal(_np(a), b.numpy())


def test_meshgrid_list_form_default_and_errors():
    a, b = mt.tensor([1.0, 2.0]), mt.tensor([3.0, 4.0, 5.0])
    with pytest.warns(UserWarning, match="required to pass the indexing argument"):
        assert [tuple(g.shape) for g in mt.meshgrid([a, b])] == [(2, 3), (2, 3)]
    assert mt.meshgrid(mt.tensor(1.0), b, indexing="ij")[0].shape == (1, 3)
    for lib in (mt, torch):
        with pytest.raises(TypeError, match="expected Tensor as element 1 in argument 0"):
            lib.meshgrid(lib.ones(2), 3, indexing="ij")
        with pytest.raises(RuntimeError, match="non-empty TensorList"):
            lib.meshgrid(indexing="ij")
    with pytest.raises(RuntimeError, match="indexing must be one of"):
        mt.meshgrid(a, b, indexing="yx")
    with pytest.raises(RuntimeError, match="Expected 0D or 1D"):
        mt.meshgrid(mt.ones(2, 2), b, indexing="ij")
    with pytest.raises(RuntimeError, match="same dtype"):
        mt.meshgrid(a, mt.tensor([1, 2]), indexing="ij")
    with pytest.raises(RuntimeError, match="indexing must be one of"):
        torch.meshgrid(torch.ones(2), indexing="yx")


def test_meshgrid_autograd_and_vmap():
    a = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = mt.tensor([4.0, 5.0], requires_grad=True)
    x, y = mt.meshgrid(a, b, indexing="xy")
    (x * y).sum().backward()
    ta = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    tb = torch.tensor([4.0, 5.0], requires_grad=True)
    tx, ty = torch.meshgrid(ta, tb, indexing="xy")
    (tx * ty).sum().backward()
    np.testing.assert_allclose(_np(a.grad), ta.grad.numpy())
    np.testing.assert_allclose(_np(b.grad), tb.grad.numpy())
    batch = mt.tensor(np.arange(12.0).reshape(4, 3))
    out = mt.vmap(lambda t: mt.meshgrid(t, t[:2], indexing="ij")[0])(batch)
    loop = mt.stack([mt.meshgrid(batch[i], batch[i][:2], indexing="ij")[0] for i in range(4)])
    np.testing.assert_array_equal(_np(out), _np(loop))


def test_broadcast_tensors():
    shapes = [(3, 1), (4,), (2, 1, 1)]
    data = [np.random.default_rng(i).standard_normal(s) for i, s in enumerate(shapes)]
    ours = mt.broadcast_tensors(*[mt.tensor(d) for d in data])
    theirs = torch.broadcast_tensors(*[torch.tensor(d) for d in data])
    for a, b in zip(ours, theirs):
        assert tuple(a.shape) == tuple(b.shape) == (2, 3, 4)
        np.testing.assert_array_equal(_np(a), b.numpy())
    with pytest.raises(RuntimeError, match="must match the size"):
        mt.broadcast_tensors(mt.ones(3), mt.ones(4))
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.broadcast_tensors(torch.ones(3), torch.ones(4))
    x = mt.ones(3, 1, requires_grad=True)
    a, b = mt.broadcast_tensors(x, mt.ones(4))
    a.sum().backward()
    np.testing.assert_array_equal(_np(x.grad), np.full((3, 1), 4.0))
    out = mt.vmap(lambda t: mt.broadcast_tensors(t, mt.ones(2, 1))[0])(mt.ones(5, 3))
    assert tuple(out.shape) == (5, 2, 3)


# --------------------------------------------------------------------------- random
def test_bernoulli_stats_and_dtype():
    mt.manual_seed(0)
    p = mt.full((20000,), 0.3, dtype=mt.float64)
    draw = mt.bernoulli(p)
    assert draw.dtype == mt.float64 and tuple(draw.shape) == (20000,)
    assert set(np.unique(_np(draw))) <= {0.0, 1.0}
    assert abs(float(draw.mean()) - 0.3) < 0.02
    assert abs(float(p.bernoulli().mean()) - 0.3) < 0.02
    x = mt.empty(20000)
    assert x.bernoulli_(0.8) is x and abs(float(x.mean()) - 0.8) < 0.02
    x.bernoulli_(mt.full((20000,), 0.1))
    assert abs(float(x.mean()) - 0.1) < 0.02
    ints = mt.zeros(1000, dtype=mt.int64).bernoulli_(0.5)
    assert ints.dtype == mt.int64 and abs(float(ints.double().mean()) - 0.5) < 0.1
    assert float(mt.bernoulli(mt.zeros(100)).sum()) == 0.0
    assert float(mt.bernoulli(mt.ones(100)).sum()) == 100.0


def test_bernoulli_errors_like_torch():
    for lib in (mt, torch):
        with pytest.raises(RuntimeError, match="p_in >= 0 && p_in <= 1"):
            lib.bernoulli(lib.tensor([0.5, 1.5]))
        with pytest.raises(RuntimeError, match="bernoulli_ expects p to be in"):
            lib.ones(3).bernoulli_(2.0)


def test_normal_forms_stats_and_grad():
    mt.manual_seed(1)
    d = mt.normal(mt.full((20000,), 2.0), mt.full((20000,), 3.0))
    assert tuple(d.shape) == (20000,) and d.dtype == mt.float32
    assert abs(float(d.mean()) - 2.0) < 0.1 and abs(float(d.std()) - 3.0) < 0.1
    d = mt.normal(mt.full((20000,), -1.0, dtype=mt.float64), 0.5)
    assert d.dtype == mt.float64 and abs(float(d.std()) - 0.5) < 0.03
    d = mt.normal(1.0, mt.full((20000,), 2.0))
    assert abs(float(d.mean()) - 1.0) < 0.1 and abs(float(d.std()) - 2.0) < 0.1
    d = mt.normal(0.0, 1.0, (3, 4))
    assert tuple(d.shape) == (3, 4)
    assert tuple(mt.normal(mt.zeros(3, 1), mt.ones(4)).shape) == (3, 4)
    mean = mt.tensor([1.0, 2.0], requires_grad=True)
    mt.normal(mean, 2.0).sum().backward()
    np.testing.assert_array_equal(_np(mean.grad), [1.0, 1.0])
    for lib in (mt, torch):
        with pytest.raises(RuntimeError, match="normal expects std >= 0.0"):
            lib.normal(lib.zeros(3), -1.0)
        with pytest.raises(RuntimeError, match="normal expects all elements of std >= 0.0"):
            lib.normal(lib.zeros(3), lib.tensor([1.0, -1.0, 1.0]))


def test_random_dtype_errors_like_torch():
    for lib in (mt, torch):
        with pytest.raises(NotImplementedError, match="normal_kernel_cpu"):
            lib.normal(lib.tensor([1, 2]), 1.0)
        with pytest.raises(NotImplementedError, match="normal_kernel_cpu"):
            lib.tensor([1, 2]).normal_()
        with pytest.raises(NotImplementedError, match="check_uniform_bounds"):
            lib.tensor([1, 2]).uniform_()
        with pytest.raises(NotImplementedError, match="bernoulli_tensor_cpu_p_"):
            lib.bernoulli(lib.tensor([1, 0]))
        with pytest.raises(RuntimeError, match="multinomial only supports floating-point"):
            lib.multinomial(lib.tensor([1, 0]), 1)
        with pytest.raises(RuntimeError, match="sum of probabilities <= 0"):
            lib.multinomial(lib.tensor([0.0, 0.0]), 1)
        with pytest.raises(RuntimeError, match="cannot sample n_sample <= 0 samples"):
            lib.multinomial(lib.tensor([1.0, 0.0]), 0)
    assert tuple(mt.multinomial(mt.tensor([1.0, 0.0, 0.0]), 2).shape) == (2,)   # as torch


def test_normal_and_uniform_inplace():
    mt.manual_seed(2)
    x = mt.empty(20000, dtype=mt.float64)
    assert x.normal_(3.0, 2.0) is x
    assert abs(float(x.mean()) - 3.0) < 0.1 and abs(float(x.std()) - 2.0) < 0.1
    assert x.uniform_(-2.0, 4.0) is x
    v = _np(x)
    assert v.min() >= -2.0 and v.max() < 4.0 and abs(v.mean() - 1.0) < 0.1
    assert abs(v.var() - 3.0) < 0.15          # (b - a)^2 / 12
    assert abs(float(mt.empty(20000).uniform_().mean()) - 0.5) < 0.02
    for lib in (mt, torch):
        with pytest.raises(RuntimeError, match="uniform_ expects to return a \\[from, to\\) range"):
            lib.empty(3).uniform_(2.0, 1.0)
        with pytest.raises(RuntimeError, match="normal expects std >= 0.0"):
            lib.empty(3).normal_(0.0, -1.0)
    w = mt.ones(3, requires_grad=True)
    with mt.no_grad():
        w.uniform_(0, 1)
    assert w.requires_grad
    for lib in (mt, torch):
        leaf = lib.ones(3, requires_grad=True)
        for fill in (lambda t: t.uniform_(), lambda t: t.normal_(), lambda t: t.bernoulli_(0.5)):
            with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
                fill(leaf)
        x = lib.ones(3, requires_grad=True)
        y = (x * 2).uniform_()
        assert y.requires_grad
        y.sum().backward()
        np.testing.assert_array_equal(np.asarray(x.grad.numpy()), np.zeros(3))


def test_multinomial_frequencies_and_shapes():
    mt.manual_seed(3)
    probs = mt.tensor([1.0, 2.0, 7.0, 0.0])
    draw = mt.multinomial(probs, 20000, replacement=True)
    assert draw.dtype == mt.int64 and tuple(draw.shape) == (20000,)
    freq = np.bincount(_np(draw), minlength=4) / 20000
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.7, 0.0], atol=0.02)
    rows = mt.multinomial(mt.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 3.0]]), 3)
    assert tuple(rows.shape) == (2, 3)
    for r in _np(rows):
        assert len(set(r.tolist())) == 3            # without replacement: distinct
    assert 0 not in _np(rows)[1].tolist()
    # first draw without replacement is proportional to the weights
    first = _np(mt.multinomial(mt.tensor([[1.0, 3.0]] * 20000), 1))[:, 0]
    assert abs(first.mean() - 0.75) < 0.02
    assert tuple(probs.multinomial(2).shape) == (2,)


def test_multinomial_errors_like_torch():
    for lib in (mt, torch):
        with pytest.raises(RuntimeError, match="cannot sample n_sample > prob_dist"):
            lib.multinomial(lib.ones(3), 4)
        with pytest.raises(RuntimeError, match="prob_dist must be 1 or 2 dim"):
            lib.multinomial(lib.ones(2, 2, 2), 1)
        with pytest.raises(RuntimeError, match="probability tensor contains"):
            lib.multinomial(lib.tensor([1.0, -1.0]), 1)


# --------------------------------------------------------------------------- vmap randomness
RANDOM_FUNCS = {
    "bernoulli": lambda t: mt.bernoulli(t * 0 + 0.5),
    "normal": lambda t: mt.normal(t * 0, 1.0),
    "normal_": lambda t: (t * 0).normal_(),
    "uniform_": lambda t: (t * 0).uniform_(0, 1),
    "bernoulli_": lambda t: (t * 0).bernoulli_(0.5),
    "multinomial": lambda t: mt.multinomial(t * 0 + 1, 3, replacement=True),
}


@pytest.mark.parametrize("name", sorted(RANDOM_FUNCS))
def test_vmap_randomness(name):
    fn = RANDOM_FUNCS[name]
    x = mt.ones(4, 16)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        mt.vmap(fn)(x)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        mt.vmap(fn, randomness="error")(x)
    mt.manual_seed(4)
    different = _np(mt.vmap(fn, randomness="different")(x))
    assert different.shape[0] == 4
    assert any(not np.array_equal(different[0], different[i]) for i in range(1, 4))
    same = _np(mt.vmap(fn, randomness="same")(x))
    for i in range(1, 4):
        np.testing.assert_array_equal(same[0], same[i])


def test_vmap_multinomial_without_replacement():
    out = mt.vmap(lambda t: mt.multinomial(t, 2), randomness="different")(mt.ones(3, 5))
    assert tuple(out.shape) == (3, 2)


# --------------------------------------------------------------------------- embedding padding_idx
@pytest.mark.parametrize("padding_idx", [0, 2, -1])
def test_embedding_padding_idx_matches_torch(padding_idx):
    w = np.random.default_rng(5).standard_normal((5, 3))
    idx = np.array([[0, 2, 4], [2, 2, 1]])
    mw = mt.tensor(w, requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    out = mt.nn.functional.embedding(mt.tensor(idx), mw, padding_idx=padding_idx)
    ref = torch.nn.functional.embedding(torch.tensor(idx), tw, padding_idx=padding_idx)
    np.testing.assert_allclose(_np(out), ref.detach().numpy())
    g = np.random.default_rng(6).standard_normal(out.shape)
    (out * mt.tensor(g)).sum().backward()
    (ref * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(_np(mw.grad), tw.grad.numpy(), atol=1e-12)


def test_embedding_module_padding_idx():
    emb = mt.nn.Embedding(6, 4, padding_idx=-2)
    ref = torch.nn.Embedding(6, 4, padding_idx=-2)
    assert emb.padding_idx == ref.padding_idx == 4
    assert repr(emb) == repr(ref) == "Embedding(6, 4, padding_idx=4)"
    np.testing.assert_array_equal(_np(emb.weight)[4], np.zeros(4))
    emb(mt.tensor([4, 1, 4])).sum().backward()
    np.testing.assert_array_equal(_np(emb.weight.grad)[4], np.zeros(4))
    np.testing.assert_array_equal(_np(emb.weight.grad)[1], np.ones(4))
    for nn_ in (mt.nn, torch.nn):
        with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
            nn_.Embedding(3, 2, padding_idx=3)
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        mt.nn.functional.embedding(mt.tensor([0]), mt.ones(3, 2), padding_idx=-4)
    assert repr(mt.nn.Embedding(3, 2)) == repr(torch.nn.Embedding(3, 2))
