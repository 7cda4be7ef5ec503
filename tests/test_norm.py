"""Normalization: the functional forms and modules against PyTorch (values, gradients,
running statistics, errors, repr, state_dict), and batch_norm under vmap as torch.func
runs it.  The ops themselves also go through the registry sweeps."""
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor import nn
from microtensor.autograd import gradcheck, gradgradcheck
from microtensor.nn import functional as F

torch = pytest.importorskip("torch", reason="PyTorch is the test oracle")
TF = torch.nn.functional
RNG = np.random.default_rng(11)


def pair(*shape, dtype=np.float64):
    values = RNG.standard_normal(shape).astype(dtype)
    return mt.tensor(values), torch.tensor(values)


def close(ours, theirs, tol=1e-6):
    np.testing.assert_allclose(np.asarray(ours.detach().numpy()), theirs.detach().numpy(),
                               rtol=tol, atol=tol)


# --------------------------------------------------------------------------- functional

def grads_match(ours_fn, theirs_fn, *pairs):
    ours = [p[0].clone().requires_grad_() for p in pairs]
    theirs = [p[1].clone().requires_grad_() for p in pairs]
    out, expected = ours_fn(*ours), theirs_fn(*theirs)
    close(out, expected)
    weights = RNG.standard_normal(tuple(expected.shape))
    (out * mt.tensor(weights)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    for a, b in zip(ours, theirs):
        close(a.grad, b.grad)


def test_layer_norm_and_rms_norm_match_torch():
    grads_match(lambda x, w, b: F.layer_norm(x, (3, 4), w, b, 1e-3),
                lambda x, w, b: TF.layer_norm(x, (3, 4), w, b, 1e-3),
                pair(2, 3, 4), pair(3, 4), pair(3, 4))
    grads_match(lambda x, w: F.rms_norm(x, 4, w), lambda x, w: TF.rms_norm(x, [4], w),
                pair(2, 3, 4), pair(4))
    x32, t32 = pair(5, 6, dtype=np.float32)
    close(F.rms_norm(x32, [6]), TF.rms_norm(t32, [6]))   # eps: float32's epsilon


def test_group_and_instance_norm_and_normalize_match_torch():
    grads_match(lambda x, w, b: F.group_norm(x, 3, w, b), lambda x, w, b: TF.group_norm(x, 3, w, b),
                pair(2, 6, 2, 3), pair(6), pair(6))
    grads_match(lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
                lambda x, w, b: TF.instance_norm(x, weight=w, bias=b),
                pair(2, 3, 5), pair(3), pair(3))
    for p, dim in ((2.0, 1), (1, 0), (3, -1), (float("inf"), 2)):
        grads_match(lambda x: F.normalize(x, p, dim), lambda x: TF.normalize(x, p, dim),
                    pair(2, 3, 4))
    zero = mt.zeros(2, 3)
    assert not np.isnan(F.normalize(zero).numpy()).any()


def test_batch_norm_running_statistics_as_torch():
    (x, tx), (mean, tmean), (var, tvar) = pair(4, 3, 5), pair(3), pair(3)
    var, tvar = var.abs() + 0.5, tvar.abs() + 0.5
    close(F.batch_norm(x, mean, var, training=True, momentum=0.3),
          TF.batch_norm(tx, tmean, tvar, training=True, momentum=0.3))
    close(mean, tmean)
    close(var, tvar)           # unbiased variance
    close(F.batch_norm(x, mean, var), TF.batch_norm(tx, tmean, tvar))   # eval mode
    grads_match(lambda x, w, b: F.batch_norm(x, mean, var, w, b),
                lambda x, w, b: TF.batch_norm(x, tmean, tvar, w, b), pair(4, 3, 2),
                pair(3), pair(3))


def test_instance_norm_running_statistics_as_torch():
    (x, tx), (mean, tmean) = pair(2, 3, 5), pair(3)
    var, tvar = mt.ones(3, dtype=mt.float64), torch.ones(3, dtype=torch.float64)
    close(F.instance_norm(x, mean, var, momentum=0.2),
          TF.instance_norm(tx, tmean, tvar, momentum=0.2))
    close(mean, tmean)
    close(var, tvar)
    close(F.instance_norm(x, mean, var, use_input_stats=False),
          TF.instance_norm(tx, tmean, tvar, use_input_stats=False))


def test_derivatives_are_differentiable():
    x = mt.tensor(RNG.standard_normal((3, 2, 2))).requires_grad_()
    w = mt.tensor(RNG.standard_normal(2)).requires_grad_()
    mean, var = mt.zeros(2, dtype=mt.float64), mt.ones(2, dtype=mt.float64) * 2
    for fn in (lambda x, w: F.batch_norm(x, mean, var, w, None),
               lambda x, w: F.batch_norm(x, None, None, w, None, training=True),
               lambda x, w: F.instance_norm(x, weight=w),
               lambda x, w: F.group_norm(x, 2, w),
               lambda x, w: F.normalize(x) * w.reshape(2, 1)):
        assert gradcheck(fn, (x, w))
        assert gradgradcheck(fn, (x, w))


def _message(fn):
    try:
        fn()
    except Exception as e:          # noqa: BLE001 - what is compared is the type and text
        return type(e), str(e)
    return None


@pytest.mark.parametrize("call", [
    lambda m, x: m.layer_norm(x((2, 3)), (5,)),
    lambda m, x: m.layer_norm(x((2, 5)), (5,), x((4,))),
    lambda m, x: m.layer_norm(x((2, 5)), (5,), None, x((4,))),
    lambda m, x: m.rms_norm(x((2, 3)), (5,)),
    lambda m, x: m.group_norm(x((2, 6, 3)), 4),
    lambda m, x: m.group_norm(x((2, 6, 3)), 3, x((5,))),
    lambda m, x: m.batch_norm(x((1, 3)), None, None, training=True),
    lambda m, x: m.batch_norm(x((2, 3)), x((2,)), x((3,)), training=True),
    lambda m, x: m.batch_norm(x((2, 3)), None, None, x((2,)), training=True),
    lambda m, x: m.batch_norm(x((2, 3)), None, None, training=False),
    lambda m, x: m.instance_norm(x((2, 3, 1))),
])
def test_errors_as_torch(call):
    ours = _message(lambda: call(F, lambda s: mt.ones(*s)))
    theirs = _message(lambda: call(TF, lambda s: torch.ones(*s)))
    assert ours is not None and ours == theirs


def test_batch_norm_dtype_mismatch_raises():
    with pytest.raises(RuntimeError, match=r"mixed dtype \(CPU\): all inputs must share"):
        F.batch_norm(mt.ones(2, 3, dtype=mt.float64), mt.zeros(3), mt.ones(3))


# --------------------------------------------------------------------------- modules

MODULES = ["BatchNorm1d(3)", "BatchNorm2d(3, momentum=None)", "BatchNorm3d(2, affine=False)",
           "BatchNorm2d(3, track_running_stats=False, bias=False)", "LayerNorm((4, 5))",
           "LayerNorm(4, elementwise_affine=False)", "LayerNorm(4, bias=False)",
           "RMSNorm(4)", "RMSNorm([2, 4], eps=1e-3, elementwise_affine=False)",
           "GroupNorm(2, 4)", "GroupNorm(2, 4, affine=False)", "InstanceNorm1d(3)",
           "InstanceNorm2d(3, affine=True, track_running_stats=True)", "InstanceNorm3d(2)"]


@pytest.mark.parametrize("spec", MODULES)
def test_module_repr_parameters_and_buffers_as_torch(spec):
    ours, theirs = eval("nn." + spec), eval("torch.nn." + spec)
    assert repr(ours) == repr(theirs)
    expected = theirs.state_dict()
    state = ours.state_dict()
    assert list(state) == list(expected)
    for key, value in expected.items():
        assert state[key].dtype.name == str(value.dtype).split(".")[-1], key
        np.testing.assert_array_equal(state[key].numpy(), value.numpy(), err_msg=key)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]


INPUTS = {"BatchNorm1d": (4, 3, 5), "BatchNorm2d": (4, 3, 2, 2), "BatchNorm3d": (2, 2, 2, 2, 2),
          "LayerNorm": (3, 4), "RMSNorm": (3, 4), "GroupNorm": (2, 4, 3),
          "InstanceNorm1d": (2, 3, 5), "InstanceNorm2d": (2, 3, 3, 2),
          "InstanceNorm3d": (2, 2, 2, 3, 2)}


@pytest.mark.parametrize("spec", MODULES)
def test_module_training_and_eval_as_torch(spec):
    theirs = eval("torch.nn." + spec).double()
    for p in theirs.parameters():
        p.data.normal_()
    ours = eval("nn." + spec).double()
    ours.load_state_dict({k: mt.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    shape = INPUTS[type(theirs).__name__]
    if spec.startswith("LayerNorm((4, 5))"):
        shape = (3, 4, 5)
    if "[2, 4]" in spec:
        shape = (3, 2, 4)
    for step in range(2):
        x, tx = pair(*shape)
        close(ours(x), theirs(tx))
    for key, value in theirs.state_dict().items():
        close(ours.state_dict()[key], value)
    ours.eval()
    theirs.eval()
    x, tx = pair(*shape)
    close(ours(x), theirs(tx))
    if type(theirs).__name__.startswith("Instance"):
        close(ours(x[0]), theirs(tx[0]))   # an input without its batch dim


def test_batch_norm_module_checks_input_rank():
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        nn.BatchNorm2d(3)(mt.ones(2, 3, 4))
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        nn.BatchNorm1d(3)(mt.ones(2, 3, 4, 1))


# --------------------------------------------------------------------------- vmap

def vmapped(fn, *args, in_dims=0):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*fallback.*")
        return mt.vmap(fn, in_dims=in_dims)(*args)


def test_batch_norm_under_vmap_uses_per_sample_statistics_as_torch_func():
    (x, tx), (w, tw) = pair(3, 4, 2, 5), pair(3, 2)
    close(vmapped(lambda x, w: F.batch_norm(x, None, None, w, None, training=True), x, w),
          torch.func.vmap(lambda x, w: TF.batch_norm(x, None, None, w, None, training=True))(
              tx, tw))
    (mean, tmean), var, tvar = pair(3, 2), mt.ones(3, 2, dtype=mt.float64), \
        torch.ones(3, 2, dtype=torch.float64)
    close(vmapped(lambda x, m, v: F.batch_norm(x, m, v, training=True), x, mean, var),
          torch.func.vmap(lambda x, m, v: TF.batch_norm(x, m, v, training=True))(tx, tmean,
                                                                               tvar))
    close(mean, tmean)      # per-sample running statistics, updated
    close(var, tvar)
    close(vmapped(lambda x, m, v: F.batch_norm(x, m, v), x, mean, var),
          torch.func.vmap(lambda x, m, v: TF.batch_norm(x, m, v))(tx, tmean, tvar))


def test_batch_norm_running_update_inside_vmap_raises_torch_funcs_error():
    x, tx = pair(3, 4, 2)
    mean, var = mt.zeros(2, dtype=mt.float64), mt.ones(2, dtype=mt.float64)
    with pytest.raises(RuntimeError) as ours:
        mt.vmap(lambda x: F.batch_norm(x, mean, var, training=True))(x)
    with pytest.raises(RuntimeError) as theirs:
        torch.func.vmap(lambda x: TF.batch_norm(x, torch.zeros(2, dtype=torch.float64),
                                                torch.ones(2, dtype=torch.float64),
                                                training=True))(tx)
    assert str(ours.value) == str(theirs.value)
    np.testing.assert_array_equal(mean.numpy(), 0)   # nothing changed


def test_layer_norm_with_per_sample_weights_under_vmap():
    (x, tx), (w, tw), (b, tb) = pair(3, 2, 4), pair(3, 4), pair(3, 4)
    close(vmapped(lambda x, w, b: F.layer_norm(x, (4,), w, b), x, w, b),
          torch.func.vmap(lambda x, w, b: TF.layer_norm(x, (4,), w, b))(tx, tw, tb))


def test_per_sample_gradients_of_a_normalized_model_match_torch_func():
    ours = nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.GroupNorm(2, 6), nn.RMSNorm(6))
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.LayerNorm(6),
                                 torch.nn.GroupNorm(2, 6), torch.nn.RMSNorm(6)).double()
    ours.double().load_state_dict({k: mt.tensor(v.detach().numpy())
                                   for k, v in theirs.state_dict().items()})
    x, tx = pair(5, 3, 4)

    def loss(params, x):
        return mt.func.functional_call(ours, params, (x,)).tanh().sum()

    def tloss(params, x):
        return torch.func.functional_call(theirs, params, (x,)).tanh().sum()
    params = {k: v.detach() for k, v in ours.named_parameters()}
    tparams = {k: v.detach() for k, v in theirs.named_parameters()}
    grads = vmapped(mt.func.grad(loss), params, x, in_dims=(None, 0))
    expected = torch.func.vmap(torch.func.grad(tloss), in_dims=(None, 0))(tparams, tx)
    for key in expected:
        close(grads[key], expected[key])


def test_layer_norm_backward_paths_agree():
    """A backward pass that records nothing takes a fused kernel; one that builds a graph
    (create_graph) takes the formula in ops: the same gradients."""
    (x, _), (w, _), (g, _) = pair(3, 2, 5), pair(2, 5), pair(3, 2, 5)
    x.requires_grad_()
    w.requires_grad_()
    fused = mt.autograd.grad(F.layer_norm(x, (2, 5), w), (x, w), g)
    in_ops = mt.autograd.grad(F.layer_norm(x, (2, 5), w), (x, w), g, create_graph=True)
    for a, b in zip(fused, in_ops):
        assert not a.requires_grad and b.requires_grad
        close(a, torch.tensor(b.detach().numpy()), 1e-12)
