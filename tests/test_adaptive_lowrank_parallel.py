"""``nn.AdaptiveLogSoftmaxWithLoss`` (parameters, initialisation, forward, ``log_prob``,
``predict`` against torch's with the same weights), ``svd_lowrank``/``pca_lowrank``
(against the exact SVD on low-rank inputs) and ``nn.DataParallel`` on the CPU."""
import inspect

import numpy as np
import pytest

import microtensor as mt
from microtensor import nn

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def to_mt(sd):
    return {k: mt.tensor(v.detach().numpy()) for k, v in sd.items()}


def close(ours, theirs, **tol):
    np.testing.assert_allclose(np.asarray(ours.detach().tolist()),
                               theirs.detach().numpy(), **(tol or {"rtol": 1e-5,
                                                                   "atol": 1e-6}))


@needs_torch
def test_adaptive_signature_parameters_and_init_as_torch():
    ours_sig = inspect.signature(nn.AdaptiveLogSoftmaxWithLoss.__init__).parameters.values()
    theirs_sig = inspect.signature(
        torch.nn.AdaptiveLogSoftmaxWithLoss.__init__).parameters.values()
    assert [(p.name, p.default) for p in ours_sig] == [(p.name, p.default) for p in theirs_sig]
    ours = nn.AdaptiveLogSoftmaxWithLoss(16, 20, [5, 12], div_value=2.0, head_bias=True)
    theirs = torch.nn.AdaptiveLogSoftmaxWithLoss(16, 20, [5, 12], div_value=2.0,
                                                 head_bias=True)
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    assert repr(ours).replace("microtensor", "torch") == repr(theirs)
    bound = 1 / np.sqrt(16)                             # Linear's default init
    assert float(ours.head.weight.abs().max()) <= bound
    assert float(ours.tail[1][1].weight.abs().max()) <= 1 / np.sqrt(16 // 4)
    for lib in (nn, torch.nn):
        for bad in ([], [5, 3], [0, 4], [4, 20], [4, 4]):
            with pytest.raises(ValueError):
                lib.AdaptiveLogSoftmaxWithLoss(16, 20, bad)


@needs_torch
@pytest.mark.parametrize("batched", [True, False])
def test_adaptive_forward_log_prob_predict_as_torch(batched):
    theirs = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 12, [3, 7], div_value=2.0).double()
    ours = nn.AdaptiveLogSoftmaxWithLoss(8, 12, [3, 7], div_value=2.0).double()
    ours.load_state_dict(to_mt(theirs.state_dict()))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 8) if batched else (8,))
    target = np.array([0, 2, 5, 11, 7, 3]) if batched else np.array(9)
    tx = torch.tensor(x, requires_grad=True)
    mx = mt.tensor(x, requires_grad=True)
    t_out = theirs(tx, torch.tensor(target))
    m_out = ours(mx, mt.tensor(target))
    assert type(m_out).__name__ == "_ASMoutput" and m_out._fields == ("output", "loss")
    close(m_out.output, t_out.output)
    close(m_out.loss, t_out.loss)
    t_out.loss.backward()
    m_out.loss.backward()
    close(mx.grad, tx.grad)
    close(ours.tail[1][0].weight.grad, theirs.tail[1][0].weight.grad)
    if batched:
        close(ours.log_prob(mx), theirs.log_prob(tx))
        assert ours.predict(mx).tolist() == theirs.predict(tx).tolist()


@needs_torch
def test_adaptive_predict_paths_and_errors_as_torch():
    theirs = torch.nn.AdaptiveLogSoftmaxWithLoss(4, 6, [2], head_bias=True).double()
    ours = nn.AdaptiveLogSoftmaxWithLoss(4, 6, [2], head_bias=True).double()
    with torch.no_grad():                # the head prefers the cluster for rows 1 and 2
        theirs.head.bias.copy_(torch.tensor([0.0, 0.0, 0.0]))
    ours.load_state_dict(to_mt(theirs.state_dict()))
    x = np.random.default_rng(1).standard_normal((20, 4)) * 3
    assert ours.predict(mt.tensor(x)).tolist() == theirs.predict(torch.tensor(x)).tolist()
    for lib, module in ((mt, ours), (torch, theirs)):
        with pytest.raises(RuntimeError, match=r"Target values should be in \[0, 5\]"):
            module(lib.zeros(2, 4, dtype=lib.float64), lib.tensor([1, 6]))
        with pytest.raises(RuntimeError, match="same size in the batch dimension"):
            module(lib.zeros(2, 4, dtype=lib.float64), lib.tensor([1, 2, 3]))
        with pytest.raises(RuntimeError, match="multi-target not supported"):
            module(lib.zeros(2, 4, dtype=lib.float64), lib.tensor([[1, 2]]))


# --------------------------------------------------------------------------- low rank

def low_rank(rank, m, n, batch=(), seed=0):
    rng = np.random.default_rng(seed)
    return mt.tensor(rng.standard_normal(batch + (m, rank)) @
                     rng.standard_normal(batch + (rank, n)))


@needs_torch
def test_lowrank_signatures_as_torch():
    for name in ("svd_lowrank", "pca_lowrank"):
        ours = inspect.signature(getattr(mt, name)).parameters.values()
        theirs = inspect.signature(getattr(torch, name)).parameters.values()
        assert [(p.name, p.default) for p in ours] == [(p.name, p.default) for p in theirs]


@pytest.mark.parametrize("shape", [(12, 7), (6, 15), (2, 9, 8)])
def test_svd_lowrank_is_exact_on_low_rank_inputs(shape):
    A = low_rank(3, *shape[-2:], batch=shape[:-2])
    U, S, V = mt.svd_lowrank(A, q=5)
    assert U.shape == shape[:-1] + (5,) and V.shape == shape[:-2] + (shape[-1], 5)
    exact = mt.linalg.svdvals(A)[..., :5]
    assert mt.allclose(S, exact, atol=1e-9)
    assert mt.allclose((U * S.unsqueeze(-2)) @ V.mT, A, atol=1e-9)
    eye = mt.eye(5, dtype=mt.float64)
    assert mt.allclose(U.mT @ U, eye.expand(U.mT.shape[:-1] + (5,)), atol=1e-9)
    assert mt.allclose(V.mT @ V, eye.expand(V.mT.shape[:-1] + (5,)), atol=1e-9)


def test_svd_lowrank_with_M_and_pca_center():
    A = low_rank(2, 10, 6) + 5.0                   # rank 3 with the offset; rank 2 without
    M = mt.full((1, 6), 5.0, dtype=mt.float64)
    U, S, V = mt.svd_lowrank(A, q=2, M=M)
    assert mt.allclose((U * S) @ V.mT, A - 5.0, atol=1e-9)
    centred = A - A.mean(0, keepdim=True)
    U, S, V = mt.pca_lowrank(A, q=3)
    assert mt.allclose(S, mt.linalg.svdvals(centred)[:3], atol=1e-9)
    assert mt.allclose((U * S) @ V.mT, centred, atol=1e-9)
    U, S, V = mt.pca_lowrank(A, q=3, center=False)
    assert mt.allclose((U * S) @ V.mT, A, atol=1e-9)


@needs_torch
def test_pca_lowrank_checks_as_torch():
    for lib in (mt, torch):
        A = lib.zeros(4, 3)
        with pytest.raises(ValueError, match=r"q\(=4\) must be non-negative integer and not "
                                             r"greater than min\(m, n\)=3"):
            lib.pca_lowrank(A, q=4)
        with pytest.raises(ValueError, match=r"niter\(=-1\) must be non-negative integer"):
            lib.pca_lowrank(A, niter=-1)
        assert lib.pca_lowrank(A)[1].shape == (3,)       # q defaults to min(6, m, n)


def test_svd_lowrank_gradient_matches_the_exact_svd():
    A = low_rank(3, 8, 5).requires_grad_()
    weights = mt.tensor([3.0, 2.0, 1.0], dtype=mt.float64)
    (mt.svd_lowrank(A, q=3)[1] * weights).sum().backward()
    ours = A.grad.clone()
    A.grad = None
    (mt.linalg.svdvals(A)[:3] * weights).sum().backward()
    assert mt.allclose(ours, A.grad, atol=1e-8)


def test_svd_lowrank_is_reproducible_with_the_seed():
    A = low_rank(4, 9, 9)
    mt.manual_seed(4)
    first = mt.svd_lowrank(A, q=2, niter=0)
    mt.manual_seed(4)
    assert all(mt.equal(a, b) for a, b in zip(first, mt.svd_lowrank(A, q=2, niter=0)))


# --------------------------------------------------------------------------- DataParallel

@needs_torch
def test_data_parallel_on_the_cpu_as_torch():
    theirs = torch.nn.DataParallel(torch.nn.Linear(3, 2))
    ours = nn.DataParallel(nn.Linear(3, 2))
    assert [(p.name, p.default) for p in inspect.signature(
        nn.DataParallel.__init__).parameters.values()] == [(p.name, p.default) for p in
                                                           inspect.signature(
        torch.nn.DataParallel.__init__).parameters.values()]
    assert list(ours.state_dict()) == list(theirs.state_dict()) == \
        ["module.weight", "module.bias"]
    assert repr(ours).replace("microtensor", "torch") == repr(theirs)
    assert ours.device_ids == theirs.device_ids == []
    ours.load_state_dict(to_mt(theirs.state_dict()))
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    close(ours(mt.tensor(x)), theirs(torch.tensor(x)))
    assert nn.parallel.DataParallel is nn.DataParallel
    assert isinstance(ours.module, nn.Linear)


def test_data_parallel_trains_the_wrapped_module():
    inner = nn.Linear(2, 1)
    model = nn.DataParallel(inner)
    before = inner.weight.detach().clone()
    opt = mt.optim.SGD(model.parameters(), lr=0.1)
    model(mt.ones(5, 2)).sum().backward()
    opt.step()
    assert not mt.equal(inner.weight, before)
