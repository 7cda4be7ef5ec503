"""optim, the rest of torch.optim: Rprop, ASGD, Adafactor and SparseAdam against PyTorch
(trajectories in float64, state in PyTorch's layout, state_dicts moving both ways between the
libraries, argument checks)."""
import copy

import numpy as np
import pytest

import microtensor as mt
from test_optim import (U0, factory, make_params, needs_torch, numpy_of, run,  # the shared
                        torch)                                                # test problem

OPTIMIZERS = [
    ("Rprop", dict(), {}),
    ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2)), dict(lr=0.01)),
    ("Rprop", dict(lr=0.05, maximize=True), dict(etas=(0.6, 1.1))),
    ("ASGD", dict(lr=0.05), {}),
    # t0 small and lambd large, so that the average and eta move within the run.
    ("ASGD", dict(lr=0.05, lambd=0.5, alpha=0.5, t0=2, weight_decay=0.1), dict(lr=0.02)),
    ("ASGD", dict(lr=0.05, t0=0, maximize=True), dict(lambd=0.1)),
    ("Adafactor", dict(), {}),
    ("Adafactor", dict(lr=0.05, beta2_decay=-0.5, eps=(1e-6, 1e-2), d=1.5,
                       weight_decay=0.1), dict(lr=0.2)),
    ("Adafactor", dict(lr=0.5, maximize=True, d=1.0), dict(eps=(1e-20, 1e-3))),
]
OPTIMIZER_IDS = [f"{cls}-{options}-{group}" for cls, options, group in OPTIMIZERS]


def assert_same_state(sd, tsd):
    """The same per-parameter state (keys, values, dtypes) and groups, in PyTorch's layout."""
    assert sd["state"].keys() == tsd["state"].keys()
    for index, state in sd["state"].items():
        assert list(state) == list(tsd["state"][index])
        for key, value in state.items():
            expected = tsd["state"][index][key]
            np.testing.assert_allclose(numpy_of(value), expected.numpy(), rtol=1e-10,
                                       atol=1e-12, err_msg=key)
            assert str(value.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1]
    for group, tgroup in zip(sd["param_groups"], tsd["param_groups"]):
        # PyTorch's groups also hold its foreach/differentiable/capturable switches.
        assert {k: v for k, v in tgroup.items() if k in group} == group
        assert set(tgroup) - set(group) <= {"foreach", "differentiable", "capturable"}


@needs_torch
@pytest.mark.parametrize("cls, options, group", OPTIMIZERS, ids=OPTIMIZER_IDS)
def test_optimizer_matches_torch(cls, options, group):
    make = factory(cls, options, group)
    ours, opt = run(mt, make, 10)
    theirs, topt = run(torch, make, 10)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(numpy_of(p), numpy_of(q), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(numpy_of(ours[2]), U0)     # no gradient: untouched
    assert not np.allclose(numpy_of(ours[0]), numpy_of(make_params(mt)[0]))
    assert_same_state(opt.state_dict(), topt.state_dict())


@pytest.mark.parametrize("cls, options, group", OPTIMIZERS, ids=OPTIMIZER_IDS)
def test_state_dict_resumes_bit_identically(cls, options, group):
    make = factory(cls, options, group)
    straight, _ = run(mt, make, 7)
    params, opt = run(mt, make, 3)
    saved = copy.deepcopy(opt.state_dict())
    fresh = [p.detach().clone().requires_grad_(True) for p in params]
    resumed = make(mt, fresh)
    resumed.load_state_dict(saved)
    run(mt, make, 4, fresh, resumed)
    for p, q in zip(fresh, straight):
        np.testing.assert_array_equal(numpy_of(p), numpy_of(q))


def converted(sd, tensor):
    """``sd`` with its state tensors made by ``tensor`` (a numpy array -> a tensor)."""
    return {"state": {i: {k: tensor(np.array(v.numpy())) for k, v in s.items()}
                      for i, s in sd["state"].items()},
            "param_groups": copy.deepcopy(sd["param_groups"])}


@needs_torch
@pytest.mark.parametrize("cls, options, group", OPTIMIZERS, ids=OPTIMIZER_IDS)
def test_a_torch_state_dict_continues_here_as_in_torch(cls, options, group):
    make = factory(cls, options, group)
    theirs, topt = run(torch, make, 3)
    ours = [mt.tensor(p.detach().numpy().copy(), requires_grad=True) for p in theirs]
    opt = make(mt, ours)
    opt.load_state_dict(converted(topt.state_dict(), mt.tensor))
    run(torch, make, 4, theirs, topt)
    run(mt, make, 4, ours, opt)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(numpy_of(p), numpy_of(q), rtol=1e-10, atol=1e-12)
    assert_same_state(opt.state_dict(), topt.state_dict())


@needs_torch
@pytest.mark.parametrize("cls, options, group", OPTIMIZERS, ids=OPTIMIZER_IDS)
def test_our_state_dict_continues_in_torch_as_here(cls, options, group):
    make = factory(cls, options, group)
    ours, opt = run(mt, make, 3)
    theirs = [torch.tensor(numpy_of(p), requires_grad=True) for p in ours]
    topt = make(torch, theirs)
    topt.load_state_dict(converted(opt.state_dict(), torch.tensor))
    run(mt, make, 4, ours, opt)
    run(torch, make, 4, theirs, topt)
    # PyTorch casts a loaded ASGD eta to the parameter's dtype (float64 here), so that it
    # no longer rounds eta to float32 as a run that was not resumed does.
    rtol = 1e-7 if cls == "ASGD" else 1e-10
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(numpy_of(p), numpy_of(q), rtol=rtol, atol=1e-12)


@needs_torch
@pytest.mark.parametrize("shape", [(2, 3, 4), (5,), ()])
def test_adafactor_factors_the_last_two_dims_as_torch(shape):
    """A batch of matrices (row and column factors per matrix), a vector, a scalar."""
    rng = np.random.default_rng(1)
    start, grads = rng.standard_normal(shape), rng.standard_normal((6,) + shape)

    def trajectory(lib):
        p = lib.tensor(start.copy(), requires_grad=True)
        opt = lib.optim.Adafactor([p], lr=0.1, weight_decay=0.01)
        for g in grads:
            p.grad = lib.tensor(g * (1 + numpy_of(p) ** 2))
            opt.step()
        return p, opt
    (p, opt), (q, topt) = trajectory(mt), trajectory(torch)
    np.testing.assert_allclose(numpy_of(p), numpy_of(q), rtol=1e-10, atol=1e-12)
    assert_same_state(opt.state_dict(), topt.state_dict())
    if len(shape) > 1:
        assert tuple(opt.state[p]["row_var"].shape) == (2, 3, 1)
        assert tuple(opt.state[p]["col_var"].shape) == (2, 1, 4)


@needs_torch
def test_float32_counters_round_as_torch():
    """ASGD's eta and mu, and every step count, are float32 tensors as in PyTorch."""
    for cls in ("ASGD", "Rprop", "Adafactor"):
        make = factory(cls, dict(lr=0.05, **(dict(t0=1) if cls == "ASGD" else {})), {})
        _, opt = run(mt, make, 4)
        _, topt = run(torch, make, 4)
        for key, value in opt.state_dict()["state"][0].items():
            if value.dim() == 0:
                assert value.dtype == mt.float32
                assert value.item() == topt.state_dict()["state"][0][key].item(), key


@pytest.mark.parametrize("cls, options, message", [
    ("Rprop", dict(lr=-1), "Invalid learning rate: -1"),
    ("Rprop", dict(etas=(1.0, 1.2)), "Invalid eta values: 1.0, 1.2"),
    ("Rprop", dict(etas=(0.5, 0.9)), "Invalid eta values: 0.5, 0.9"),
    ("ASGD", dict(lr=-0.1), "Invalid learning rate: -0.1"),
    ("ASGD", dict(weight_decay=-1), "Invalid weight_decay value: -1"),
    ("Adafactor", dict(lr=-1), "Learning rate should be >= 0 but is: -1"),
    ("Adafactor", dict(beta2_decay=0.5), "beta2_decay should be <= 0 but is: 0.5"),
    ("Adafactor", dict(eps=(-1, 1e-3)), "epsilon1 should be >= 0 but is: -1"),
    ("Adafactor", dict(eps=(None, -1)), "epsilon2 should be >= 0 but is: -1"),
    ("Adafactor", dict(d=0.5), "Clipping threshold d should be >= 1 but is: 0.5"),
    ("Adafactor", dict(weight_decay=-1), "weight_decay should be >= 0 but is: -1"),
    ("SparseAdam", dict(lr=0), "Invalid learning rate: 0"),
    ("SparseAdam", dict(eps=0), "Invalid epsilon value: 0"),
    ("SparseAdam", dict(betas=(0.9, 1.0)), "Invalid beta parameter at index 1: 1.0"),
])
def test_argument_checks_as_torch(cls, options, message):
    for lib in (mt, torch) if torch is not None else (mt,):
        with pytest.raises(ValueError) as info:
            getattr(lib.optim, cls)(make_params(lib), **options)
        assert str(info.value) == message, lib.__name__


@pytest.mark.parametrize("lib", [mt, pytest.param(torch, marks=needs_torch)],
                         ids=["microtensor", "torch"])
def test_sparse_adam_refuses_dense_gradients_and_changes_nothing(lib):
    params = make_params(lib)
    opt = lib.optim.SparseAdam(params[:2], lr=0.1)
    params[0].sum().backward()
    before = numpy_of(params[0]).copy()
    with pytest.raises(RuntimeError, match="SparseAdam does not support dense gradients, "
                                           "please consider Adam instead"):
        opt.step()
    np.testing.assert_array_equal(numpy_of(params[0]), before)
    assert opt.state_dict() == {"state": {}, "param_groups": [
        {"lr": 0.1, "betas": (0.9, 0.999), "eps": 1e-8, "maximize": False, "params": [0, 1]}]}


def test_signatures_and_defaults_as_torch():
    """The hyperparameters' names, order and defaults are PyTorch's (PyTorch adds its
    foreach/differentiable/capturable switches, which microtensor does not take)."""
    import inspect
    if torch is None:
        pytest.skip("PyTorch is not installed (optional test oracle)")
    switches = {"foreach", "differentiable", "capturable"}
    for name in ("Rprop", "ASGD", "Adafactor", "SparseAdam"):
        ours = inspect.signature(getattr(mt.optim, name)).parameters
        theirs = inspect.signature(getattr(torch.optim, name)).parameters
        assert list(ours) == [k for k in theirs if k not in switches], name
        assert all(ours[k].default == theirs[k].default for k in ours), name


def test_a_copied_tensor_sums_as_its_original():
    """A deep-copied or unpickled tensor keeps the CPU device object that the C fast paths
    test for (a loaded optimizer state, a copied model: Adafactor's resume relies on it)."""
    import pickle
    rows = mt.tensor([[7.7781881674726705], [5.790222377171227], [9.559340085345593],
                      [0.7917339869839147]], dtype=mt.float64)
    for copied in (copy.deepcopy(rows), pickle.loads(pickle.dumps(rows))):
        assert copied.untyped_storage().device is rows.untyped_storage().device
        assert copied.sum(dim=0).item() == rows.sum(dim=0).item()
