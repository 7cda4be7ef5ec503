"""optim, the rest of torch.optim: Rprop, ASGD, Adafactor and SparseAdam against PyTorch
(trajectories in float64, state in PyTorch's layout, state_dicts moving both ways between the
libraries, argument checks)."""
import copy

import numpy as np
import pytest

import microtensor as mt
import test_optim
from test_optim import (factory, loss_of, make_params, needs_torch,  # the shared
                        numpy_of, run, torch)                      # test problem

# the optimizers added with this file; test_optim's tests (trajectories against PyTorch,
# resuming from a state_dict) run them too
OPTIMIZERS = [entry for entry in test_optim.OPTIMIZERS
              if entry[0] in ("Rprop", "ASGD", "Adafactor")]
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
    """The names, order and defaults of the arguments are PyTorch's."""
    import inspect
    if torch is None:
        pytest.skip("PyTorch is not installed (optional test oracle)")
    names = ["optim.Rprop", "optim.ASGD", "optim.Adafactor", "optim.SparseAdam", "optim.Muon",
             "optim.lr_scheduler.CyclicLR", "optim.swa_utils.SWALR",
             "optim.swa_utils.AveragedModel", "optim.swa_utils.update_bn",
             "optim.swa_utils.get_ema_avg_fn", "optim.swa_utils.get_ema_multi_avg_fn",
             "optim.swa_utils.get_swa_avg_fn", "optim.swa_utils.get_swa_multi_avg_fn"]
    for name in names:
        ours, theirs = mt, torch
        for part in name.split("."):
            ours, theirs = getattr(ours, part), getattr(theirs, part)
        ours = inspect.signature(ours).parameters
        theirs = inspect.signature(theirs).parameters
        assert list(ours) == list(theirs), name
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


# -- CyclicLR and swa_utils ---------------------------------------------------------------

from test_optim import assert_lr_sequence_as_torch, assert_scheduler_resumes  # noqa: E402


class Halving:
    """A scale_fn object, whose state a scheduler's state_dict saves."""

    def __init__(self):
        self.base = 2.0

    def __call__(self, cycle):
        return self.base ** (1 - cycle)


SCHEDULERS = {
    "CyclicLR": lambda s, o: [s.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=4)],
    "CyclicLR-triangular2-uneven": lambda s, o: [
        s.CyclicLR(o, base_lr=[0.01, 0.001], max_lr=[0.2, 0.05], step_size_up=3,
                   step_size_down=5, mode="triangular2", base_momentum=[0.7, 0.8])],
    "CyclicLR-exp_range": lambda s, o: [
        s.CyclicLR(o, base_lr=0.02, max_lr=0.3, step_size_up=2, mode="exp_range",
                   gamma=0.97, max_momentum=0.95)],
    "CyclicLR-scale_fn-iterations": lambda s, o: [
        s.CyclicLR(o, base_lr=0.02, max_lr=0.3, step_size_up=3, scale_fn=Halving(),
                   scale_mode="iterations", cycle_momentum=False)],
    "CyclicLR-scale_fn-function": lambda s, o: [
        s.CyclicLR(o, base_lr=0.02, max_lr=0.3, step_size_up=5,
                   scale_fn=lambda c: 1 / c)],
    "SWALR-cos": lambda s, o: [_swalr(o, swa_lr=0.05, anneal_epochs=6)],
    "SWALR-linear-per-group": lambda s, o: [
        _swalr(o, swa_lr=[0.3, 0.002], anneal_epochs=4, anneal_strategy="linear")],
    "SWALR-no-anneal": lambda s, o: [_swalr(o, swa_lr=0.02, anneal_epochs=0)],
}


def _swalr(optimizer, **options):
    lib = mt if isinstance(optimizer, mt.optim.Optimizer) else torch
    return lib.optim.swa_utils.SWALR(optimizer, **options)


@needs_torch
@pytest.mark.parametrize("name", SCHEDULERS)
def test_scheduler_lr_sequence_is_torch_s_exactly(name):
    ours = assert_lr_sequence_as_torch(SCHEDULERS[name])
    assert {row[0] for row in ours} != {0.1}          # the first group's rate was set


@pytest.mark.parametrize("name", SCHEDULERS)
def test_scheduler_state_dict_resumes(name):
    assert_scheduler_resumes(SCHEDULERS[name], optimizer_first=True)


@needs_torch
def test_cyclic_lr_state_dict_as_torch_and_cycles_adam_beta1():
    def run_adam(lib, scale_fn):
        opt = lib.optim.Adam([lib.zeros(2, requires_grad=True)], lr=0.1)
        sched = lib.optim.lr_scheduler.CyclicLR(opt, 0.001, 0.01, step_size_up=2,
                                                scale_fn=scale_fn)
        betas = []
        for _ in range(7):
            opt.step()
            sched.step()
            betas.append(opt.param_groups[0]["betas"])
        return betas, sched.state_dict()
    (betas, sd), (tbetas, tsd) = run_adam(mt, Halving()), run_adam(torch, Halving())
    assert betas == tbetas and betas[0] != betas[1]
    assert sd["_scale_fn_custom"] == tsd["_scale_fn_custom"] == {"base": 2.0}
    assert tsd == sd


def test_cyclic_lr_and_swalr_checks_as_torch():
    for lib in (mt, torch) if torch is not None else (mt,):
        s, swa = lib.optim.lr_scheduler, lib.optim.swa_utils
        params = make_params(lib)
        sgd = lib.optim.SGD(params, lr=0.1, momentum=0.9)
        cases = [
            (lambda: s.CyclicLR(sgd, 0.01, 0.1, mode="sawtooth"), ValueError,
             "mode is invalid and scale_fn is None"),
            (lambda: s.CyclicLR(lib.optim.Adagrad(params), 0.01, 0.1), ValueError,
             "optimizer must support momentum or beta1 with `cycle_momentum` option enabled"),
            (lambda: s.CyclicLR(sgd, [0.01, 0.02], 0.1), ValueError,
             "base_lr must have the same length as optimizer.param_groups. base_lr has 2 "
             "values, param_groups has 1."),
            (lambda: swa.SWALR(sgd, 0.05, anneal_strategy="step"), ValueError,
             "anneal_strategy must be one of 'cos' or 'linear', instead got step"),
            (lambda: swa.SWALR(sgd, 0.05, anneal_epochs=-1), ValueError,
             "anneal_epochs must be equal or greater than 0, got -1"),
            (lambda: swa.SWALR(sgd, 0.05, anneal_epochs=2.0), ValueError,
             "anneal_epochs must be equal or greater than 0, got 2.0"),
            (lambda: swa.get_ema_avg_fn(1.5), ValueError,
             "Invalid decay value 1.5 provided. Please provide a value in [0,1] range."),
            (lambda: swa.get_ema_multi_avg_fn(-0.1), ValueError,
             "Invalid decay value -0.1 provided. Please provide a value in [0,1] range."),
            (lambda: swa.AveragedModel(lib.nn.Linear(2, 1), avg_fn=swa.get_swa_avg_fn(),
                                       multi_avg_fn=swa.get_swa_multi_avg_fn()),
             AssertionError, "Only one of avg_fn and multi_avg_fn should be provided"),
        ]
        for make, error, message in cases:
            with pytest.raises(error) as info:
                make()
            assert str(info.value) == message, lib.__name__


@needs_torch
def test_swalr_after_a_cosine_schedule_as_torch():
    """The documented use: cosine annealing, then SWALR from epoch 5 on."""
    def sequence(lib):
        opt = lib.optim.SGD([lib.zeros(1, requires_grad=True)], lr=0.5)
        cosine = lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)
        swa = lib.optim.swa_utils.SWALR(opt, swa_lr=0.05, anneal_epochs=3)
        out = []
        for epoch in range(12):
            opt.step()
            (swa if epoch >= 5 else cosine).step()
            out.append(opt.param_groups[0]["lr"])
        return out
    assert sequence(mt) == sequence(torch)


def _model(lib):
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4), lib.nn.Linear(4, 2))


def _twin_models():
    """A PyTorch model and a microtensor one with its weights (float64)."""
    theirs = _model(torch).double()
    ours = _model(mt).double()
    ours.load_state_dict({k: mt.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


AVERAGING = {
    "swa": lambda swa: {},
    "ema-avg_fn": lambda swa: dict(avg_fn=swa.get_ema_avg_fn(0.8)),
    "ema-multi": lambda swa: dict(multi_avg_fn=swa.get_ema_multi_avg_fn(0.8)),
    "swa-avg_fn-buffers": lambda swa: dict(avg_fn=swa.get_swa_avg_fn(), use_buffers=True),
    "ema-multi-buffers": lambda swa: dict(multi_avg_fn=swa.get_ema_multi_avg_fn(0.5),
                                          use_buffers=True),
}


@needs_torch
@pytest.mark.parametrize("name", AVERAGING)
def test_averaged_model_matches_torch(name):
    ours, theirs = _twin_models()
    rng = np.random.default_rng(2)
    steps = [(rng.standard_normal((5, 3)), [rng.standard_normal(tuple(p.shape)) * 0.1
                                           for p in theirs.parameters()]) for _ in range(5)]
    averaged = []
    for lib, model in ((mt, ours), (torch, theirs)):
        avg = lib.optim.swa_utils.AveragedModel(model, **AVERAGING[name](lib.optim.swa_utils))
        for x, deltas in steps:
            with lib.no_grad():
                for p, d in zip(model.parameters(), deltas):
                    p.add_(lib.tensor(d))
            model(lib.tensor(x))         # train mode: the batch-norm statistics move
            avg.update_parameters(model)
        averaged.append(avg)
    avg, tavg = averaged
    sd, tsd = avg.state_dict(), tavg.state_dict()
    assert list(sd) == list(tsd)
    for key in tsd:
        np.testing.assert_allclose(numpy_of(sd[key]), tsd[key].numpy(), rtol=1e-12,
                                   atol=1e-14, err_msg=key)
        assert str(sd[key].dtype).split(".")[-1] == str(tsd[key].dtype).split(".")[-1]
    assert avg.n_averaged.item() == 5
    # averaged, not the model's last weights
    assert not np.allclose(numpy_of(sd["module.0.weight"]), numpy_of(ours[0].weight))
    x = rng.standard_normal((2, 3))
    avg.eval()
    tavg.eval()
    np.testing.assert_allclose(numpy_of(avg(mt.tensor(x))), tavg(torch.tensor(x)).detach()
                               .numpy(), rtol=1e-12)


@needs_torch
def test_averaged_model_loads_a_torch_state_dict():
    ours, theirs = _twin_models()
    tavg = torch.optim.swa_utils.AveragedModel(theirs)
    tavg.update_parameters(theirs)
    avg = mt.optim.swa_utils.AveragedModel(ours)
    avg.load_state_dict({k: mt.tensor(v.numpy()) for k, v in tavg.state_dict().items()})
    assert avg.n_averaged.item() == 1 and avg.n_averaged.dtype == mt.int64


@needs_torch
@pytest.mark.parametrize("tuples", [False, True])
def test_update_bn_matches_torch(tuples):
    ours, theirs = _twin_models()
    rng = np.random.default_rng(3)
    batches = [rng.standard_normal((4, 3)) * 2 + 1 for _ in range(3)]
    for lib, model in ((mt, ours), (torch, theirs)):
        model.eval()
        loader = [(lib.tensor(b), 0) if tuples else lib.tensor(b) for b in batches]
        lib.optim.swa_utils.update_bn(loader, model)
        assert not model.training and model[1].momentum == 0.1
    for key, value in theirs.state_dict().items():
        np.testing.assert_allclose(numpy_of(ours.state_dict()[key]), value.numpy(),
                                   rtol=1e-12, err_msg=key)
    # cumulative: the mean of the three batches' means
    np.testing.assert_allclose(numpy_of(ours[1].running_mean), np.mean(
        [numpy_of(ours[0](mt.tensor(b))).mean(0) for b in batches], axis=0), rtol=1e-12)


@pytest.mark.parametrize("lib", [mt, pytest.param(torch, marks=needs_torch)],
                         ids=["microtensor", "torch"])
def test_swa_multi_avg_fn_refuses_integer_buffers_as_torch(lib):
    """PyTorch's multi-tensor mean divides integer tensors with addcdiv, which refuses them
    (a batch-norm's num_batches_tracked, with use_buffers)."""
    model = lib.nn.BatchNorm1d(2)
    avg = lib.optim.swa_utils.AveragedModel(
        model, multi_avg_fn=lib.optim.swa_utils.get_swa_multi_avg_fn(), use_buffers=True)
    avg.update_parameters(model)
    with pytest.raises(RuntimeError, match="Integer division with addcdiv is no longer "
                                           "supported"):
        avg.update_parameters(model)
    assert avg.n_averaged.item() == 1


def test_update_bn_without_batch_norm_leaves_the_model_alone():
    model = mt.nn.Linear(2, 2).eval()
    mt.optim.swa_utils.update_bn([mt.ones(1, 2)], model)
    assert not model.training


# -- Muon ----------------------------------------------------------------------------------

MUON_OPTIONS = [dict(), dict(nesterov=False, adjust_lr_fn="match_rms_adamw", weight_decay=0.01),
                dict(momentum=0.3, ns_steps=3, adjust_lr_fn="original"),
                dict(ns_coefficients=(2.0, -1.5, 0.5), eps=1e-3, weight_decay=0.0)]


SHAPES = ((4, 3), (3, 5))
try:
    HAS_BFLOAT16 = mt.bfloat16.np is not None
except ImportError:     # the optional 'bfloat16' extra is not installed
    HAS_BFLOAT16 = False
needs_bfloat16 = pytest.mark.skipif(not HAS_BFLOAT16, reason="Muon computes in bfloat16: "
                                    "the optional 'bfloat16' extra (ml_dtypes) is missing")


def muon_run(lib, dtype, options, steps=6, params=None, opt=None, first=0):
    """``steps`` Muon steps (from step ``first`` of a fixed gradient sequence) on a (4, 3)
    and a (3, 5) matrix; returns (the parameters in float64, the starts, the optimizer)."""
    rng = np.random.default_rng(5)
    starts = [rng.standard_normal(shape) for shape in SHAPES]
    grads = [[rng.standard_normal(shape) for shape in SHAPES] for _ in range(first + steps)]
    if params is None:
        params = [lib.tensor(s, dtype=getattr(lib, dtype), requires_grad=True) for s in starts]
    opt = opt or lib.optim.Muon(params, lr=0.05, **options)
    for step_grads in grads[first:]:
        for p, g in zip(params, step_grads):
            p.grad = lib.tensor(g, dtype=getattr(lib, dtype))
        opt.step()
    return [np.array(p.detach().to(lib.float64).numpy()) for p in params], starts, opt


@needs_torch
@needs_bfloat16
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("options", MUON_OPTIONS, ids=[str(o) for o in MUON_OPTIONS])
def test_muon_matches_torch(dtype, options):
    """Muon orthogonalises in bfloat16: the result is PyTorch's up to an occasional
    bfloat16 rounding that falls the other way (float32 matrix products summed in another
    order), a few parts in a thousand of one step."""
    (ours, starts, opt), (theirs, _, topt) = (muon_run(mt, dtype, options),
                                               muon_run(torch, dtype, options))
    for p, q, start in zip(ours, theirs, starts):
        moved = np.abs(q - start).max()
        assert moved > 0.05
        np.testing.assert_allclose(p, q, rtol=0, atol=5e-3 * moved)
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert [list(s) for s in sd["state"].values()] == [["momentum_buffer"]] * 2
    assert {k: v for k, v in tsd["param_groups"][0].items() if k in sd["param_groups"][0]} \
        == sd["param_groups"][0]


@needs_torch
@needs_bfloat16
def test_muon_newton_schulz_is_torch_s_in_bfloat16():
    from torch.optim._muon import _zeropower_via_newtonschulz
    from microtensor.optim.muon import _orthogonalized
    rng = np.random.default_rng(6)
    coefficients = (3.4445, -4.7750, 2.0315)
    same = 0
    for shape in ((4, 3), (3, 5), (6, 6), (2, 7)):
        g = rng.standard_normal(shape)
        ours = _orthogonalized(mt.tensor(g), coefficients, 5, 1e-7)
        theirs = _zeropower_via_newtonschulz(torch.tensor(g), coefficients, 5, 1e-7)
        assert ours.dtype == mt.bfloat16 and tuple(ours.shape) == shape
        same += np.array_equal(ours.float().numpy(), theirs.float().numpy())
        # nearly semi-orthogonal: the singular values are pulled into a band around 1
        singular = np.linalg.svd(ours.float().numpy(), compute_uv=False)
        assert np.all((singular > 0.6) & (singular < 1.25)), singular
    assert same >= 3


@needs_bfloat16
def test_muon_state_dict_resumes_bit_identically():
    straight, _, _ = muon_run(mt, "float64", {}, steps=5)
    halfway, _, opt = muon_run(mt, "float64", {}, steps=3)
    saved = copy.deepcopy(opt.state_dict())
    params = [mt.tensor(p, requires_grad=True) for p in halfway]
    resumed = mt.optim.Muon(params, lr=0.05)
    resumed.load_state_dict(saved)
    ours, _, _ = muon_run(mt, "float64", {}, steps=2, params=params, opt=resumed, first=3)
    for p, q in zip(ours, straight):
        np.testing.assert_array_equal(p, q)


@pytest.mark.parametrize("options, message", [
    (dict(lr=-1), "Learning rate should be >= 0 but is: -1"),
    (dict(momentum=-0.5), "momentum should be >= 0 but is: -0.5"),
    (dict(weight_decay=-1), "weight decay should be >= 0 but is: -1"),
    (dict(adjust_lr_fn="sqrt"), "Adjust learning rate function sqrt is not supported"),
])
def test_muon_checks_as_torch(options, message):
    for lib in (mt, torch) if torch is not None else (mt,):
        with pytest.raises(ValueError) as info:
            lib.optim.Muon([lib.zeros(2, 2, requires_grad=True)], **options)
        assert str(info.value) == message, lib.__name__
        with pytest.raises(ValueError, match="Muon only supports 2D parameters whereas we "
                                             "found a parameter with size: "):
            lib.optim.Muon([lib.zeros(3, requires_grad=True)])
        p = lib.zeros(2, 2, requires_grad=True)
        p.grad = lib.ones(2, 2)
        with pytest.raises(ValueError, match="Number of steps must be less than 100"):
            lib.optim.Muon([p], ns_steps=100).step()


# -- hooks ---------------------------------------------------------------------------------

def hook_calls(lib):
    """The calls the step and state_dict hooks see, in order, around two steps, a
    state_dict and a load, with one hook removed half way."""
    from importlib import import_module
    optimizer_module = import_module(lib.__name__ + ".optim.optimizer")
    calls = []
    w, b, _ = make_params(lib)
    opt = lib.optim.Adam([w, b], lr=0.1)
    handles = [
        optimizer_module.register_optimizer_step_pre_hook(
            lambda o, args, kwargs: calls.append(("global pre", args == (o,), kwargs))),
        optimizer_module.register_optimizer_step_post_hook(
            lambda o, args, kwargs: calls.append(("global post", args == (o,), kwargs))),
        opt.register_step_pre_hook(lambda o, args, kwargs: calls.append(("pre", len(args)))),
        opt.register_step_post_hook(lambda o, args, kwargs: calls.append(("post", len(args)))),
        opt.register_state_dict_pre_hook(lambda o: calls.append("sd pre")),
        opt.register_state_dict_post_hook(
            lambda o, sd: calls.append(("sd post", sorted(sd))) or dict(sd, extra=1)),
        opt.register_state_dict_post_hook(lambda o, sd: calls.append("first"), prepend=True),
        opt.register_load_state_dict_pre_hook(
            lambda o, sd: calls.append(("load pre", sorted(sd))) or
            {k: v for k, v in sd.items() if k != "extra"}),
        opt.register_load_state_dict_post_hook(lambda o: calls.append("load post")),
    ]
    try:
        opt.register_step_pre_hook(lambda o, args, kwargs: (args, {"closure": None}))
        for _ in range(2):
            opt.zero_grad()
            loss_of(lib, [w, b, None]).backward()
            opt.step()
            handles[2].remove()
        sd = opt.state_dict()
        assert sd["extra"] == 1
        opt.load_state_dict(sd)
        assert "extra" in sd          # the hooks saw a copy
    finally:
        for handle in handles[:2]:
            handle.remove()
    return calls


@needs_torch
def test_hooks_run_as_torch_s():
    ours = hook_calls(mt)
    assert ours == hook_calls(torch)
    # the step's args are (optimizer,); the second step's pre-hook was removed; the last
    # pre-hook's (args, kwargs) replace the step's own
    assert ours[:4] == [("global pre", True, {}), ("pre", 1), ("post", 1),
                        ("global post", True, {"closure": None})]
    assert ours[4:] == [("global pre", True, {}), ("post", 1),
                        ("global post", True, {"closure": None}), "sd pre", "first",
                        ("sd post", ["param_groups", "state"]),
                        ("load pre", ["extra", "param_groups", "state"]), "load post"]


def test_a_step_hook_with_a_bad_result_is_refused():
    w, b, _ = make_params(mt)
    opt = mt.optim.SGD([w], lr=0.1)
    opt.register_step_pre_hook(lambda o, args, kwargs: "no")
    with pytest.raises(RuntimeError, match="must return None or a tuple of \\(new_args, "
                                           "new_kwargs\\), but got no"):
        opt.step()


def test_a_subclass_step_calling_super_runs_the_hooks_once():
    class Counting(mt.optim.SGD):
        def step(self, closure=None):
            return super().step(closure)

    w, b, _ = make_params(mt)
    opt = Counting([w], lr=0.1)
    calls = []
    opt.register_step_post_hook(lambda o, args, kwargs: calls.append(1))
    w.grad = mt.ones_like(w)
    opt.step()
    assert calls == [1]


@needs_torch
def test_lbfgs_state_and_float32_steps_as_torch():
    """LBFGS keeps ``ro``, ``al`` and ``H_diag`` as 0-d tensors in the parameters' dtype,
    as PyTorch's: its state_dict has the same entries, and float32 steps follow
    PyTorch's (scalars kept in float64 drifted by about 4e-4)."""
    import torch
    results = []
    for lib in (torch, mt):
        w = lib.nn.Parameter(lib.tensor([1.0, 2.0, -1.5]))
        optimizer = lib.optim.LBFGS([w], history_size=3)

        def closure():
            optimizer.zero_grad()
            loss = ((w - 3) ** 2).sum() + (w ** 4).sum() * 0.01 + (w[0] * w[1]).sin()
            loss.backward()
            return loss
        for _ in range(4):
            optimizer.step(closure)
        state = optimizer.state_dict()["state"][0]
        kinds = {k: (type(v).__name__, [type(x).__name__ for x in v] if isinstance(v, list)
                     else None) for k, v in state.items()}
        results.append((w.detach().numpy().copy(), kinds))
    (theirs, their_kinds), (ours, our_kinds) = results
    assert our_kinds == their_kinds
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
