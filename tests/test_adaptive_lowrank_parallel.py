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
