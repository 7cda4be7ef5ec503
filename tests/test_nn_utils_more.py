"""nn.utils beyond clipping, against PyTorch with identical weights: ``parametrize``
(registration, chains, tuple right-inverses, removal, caching, state dicts),
``parametrizations.orthogonal / weight_norm / spectral_norm``, the older hook-based
``weight_norm`` and ``spectral_norm``, fusion, memory formats, ``skip_init``,
``stateless``; and the nn gaps next to them (``init`` aliases and ``sparse_``, ``Buffer``,
``SyncBatchNorm``, ``NLLLoss2d``).  Values, gradients, state-dict keys, loading PyTorch's
state dicts, errors and warnings are compared with PyTorch's."""
import copy
import pickle
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor import nn
from tests.test_module_api import same_error

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")
P, TP = nn.utils.parametrize, torch.nn.utils.parametrize
PZ, TPZ = nn.utils.parametrizations, torch.nn.utils.parametrizations


def to_np(t):
    return np.array(t.detach()._array())


def to_mt(t):
    return mt.tensor(t.detach().numpy())


def close(ours, theirs, atol=1e-12):
    np.testing.assert_allclose(to_np(ours), theirs.detach().numpy(), rtol=1e-10, atol=atol)


def torch_state(source):
    """PyTorch's state dict (of a module, or given) as microtensor tensors, metadata
    kept."""
    state = source.state_dict() if isinstance(source, torch.nn.Module) else source
    ours = type(state)((k, to_mt(v)) for k, v in state.items())
    ours._metadata = state._metadata
    return ours


def twin(build):
    """``build(mt)`` and ``build(torch)`` in float64 with PyTorch's weights."""
    ours, theirs = build(mt).double(), build(torch).double()
    ours.load_state_dict(torch_state(theirs))
    return ours, theirs


def quietly(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def assert_same_parameters_and_grads(ours, theirs, atol=1e-12):
    theirs_named = dict(theirs.named_parameters())
    assert list(dict(ours.named_parameters())) == list(theirs_named)
    for name, p in ours.named_parameters():
        close(p, theirs_named[name], atol)
        if theirs_named[name].grad is None:
            assert p.grad is None, name
        else:
            close(p.grad, theirs_named[name].grad, atol)


def run_both(ours, theirs, shape, steps=1, seed=0):
    """``steps`` forwards and backwards of ``sum(y²)`` on the same input; the outputs are
    compared at each step."""
    x = np.random.default_rng(seed).standard_normal(shape)
    for _ in range(steps):
        y_ours, y_theirs = ours(mt.tensor(x)), theirs(torch.tensor(x))
        close(y_ours, y_theirs)
        (y_ours * y_ours).sum().backward()
        (y_theirs * y_theirs).sum().backward()


# --------------------------------------------------------------------------- parametrize

class Symmetric:
    """A parametrization as users write them: (upper triangle) -> symmetric matrix."""

    def __init__(self, lib):
        class Sym(lib.nn.Module):
            def forward(self, X):
                return X.triu() + X.triu(1).transpose(-1, -2)

            def right_inverse(self, A):
                return A.triu()
        self.cls = Sym


class Scale2:
    def __init__(self, lib):
        class Scale(lib.nn.Module):
            def forward(self, X):
                return 2 * X

            def right_inverse(self, A):
                return A / 2
        self.cls = Scale


class Split:
    """right_inverse returning two tensors: original0, original1."""

    def __init__(self, lib):
        class SplitSum(lib.nn.Module):
            def forward(self, A, B):
                return A + B

            def right_inverse(self, X):
                return X * 0.25, X * 0.75
        self.cls = SplitSum


def test_register_parametrization_layout_values_and_gradients():
    ours, theirs = twin(lambda lib: lib.nn.Linear(4, 4))
    for lib, m in ((mt, ours), (torch, theirs)):
        lib.nn.utils.parametrize.register_parametrization(m, "weight", Symmetric(lib).cls())
        lib.nn.utils.parametrize.register_parametrization(m, "weight", Scale2(lib).cls())
    assert type(ours).__name__ == type(theirs).__name__ == "ParametrizedLinear"
    assert P.type_before_parametrizations(ours) is nn.Linear
    assert isinstance(ours, nn.Linear)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == \
        ["bias", "parametrizations.weight.original"]
    assert repr(ours) == repr(theirs)
    close(ours.weight, theirs.weight)
    w = to_np(ours.weight)
    np.testing.assert_allclose(w, w.T)
    run_both(ours, theirs, (3, 4))
    assert_same_parameters_and_grads(ours, theirs)
    # assigning runs the right inverses, last to first
    value = np.arange(16.0).reshape(4, 4)
    ours.weight = mt.tensor(value)
    with torch.no_grad():
        theirs.weight = torch.tensor(value)
    close(ours.parametrizations.weight.original, theirs.parametrizations.weight.original)
    original = ours.parametrizations.weight.original
    ours.weight = mt.tensor(value * 3)
    assert ours.parametrizations.weight.original is original   # the same Parameter object


def test_parametrize_loads_pytorch_state_dict_and_predicates():
    ours, theirs = twin(lambda lib: lib.nn.Linear(3, 3))
    P.register_parametrization(ours, "weight", Symmetric(mt).cls())
    TP.register_parametrization(theirs, "weight", Symmetric(torch).cls())
    with torch.no_grad():
        theirs.parametrizations.weight.original.normal_()
    ours.load_state_dict(torch_state(theirs))
    close(ours.weight, theirs.weight)
    assert P.is_parametrized(ours) and P.is_parametrized(ours, "weight")
    assert not P.is_parametrized(ours, "bias") and not P.is_parametrized(nn.Linear(2, 2))
    assert P.type_before_parametrizations(nn.Linear(2, 2)) is nn.Linear


def test_parametrize_tuple_right_inverse_originals():
    ours, theirs = twin(lambda lib: lib.nn.Linear(3, 2))
    P.register_parametrization(ours, "weight", Split(mt).cls())
    TP.register_parametrization(theirs, "weight", Split(torch).cls())
    assert list(ours.state_dict()) == list(theirs.state_dict()) == \
        ["bias", "parametrizations.weight.original0", "parametrizations.weight.original1"]
    assert isinstance(ours.parametrizations.weight.original0, nn.Parameter)
    close(ours.parametrizations.weight.original1, theirs.parametrizations.weight.original1)
    run_both(ours, theirs, (2, 3))
    assert_same_parameters_and_grads(ours, theirs)
    same_error(lambda: P.remove_parametrizations(ours, "weight", leave_parametrized=False),
               lambda: TP.remove_parametrizations(theirs, "weight", leave_parametrized=False))
    P.remove_parametrizations(ours, "weight")
    TP.remove_parametrizations(theirs, "weight")
    assert type(ours) is nn.Linear and list(ours.state_dict()) == list(theirs.state_dict())
    assert isinstance(ours.weight, nn.Parameter)
    close(ours.weight, theirs.weight)


@pytest.mark.parametrize("leave", [True, False])
def test_remove_parametrizations(leave):
    ours, theirs = twin(lambda lib: lib.nn.Linear(3, 3))
    P.register_parametrization(ours, "weight", Scale2(mt).cls())
    TP.register_parametrization(theirs, "weight", Scale2(torch).cls())
    original = ours.parametrizations.weight.original
    P.remove_parametrizations(ours, "weight", leave_parametrized=leave)
    TP.remove_parametrizations(theirs, "weight", leave_parametrized=leave)
    assert type(ours) is nn.Linear and not hasattr(ours, "parametrizations")
    assert ours.weight is original          # the original Parameter, so optimizers keep it
    close(ours.weight, theirs.weight)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["bias", "weight"]
    assert not hasattr(nn.Linear, "weight")  # the property went with the injected class


def test_parametrize_buffer_and_unsafe():
    class Holder(mt.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", mt.ones(2, 3))

    class Widen(mt.nn.Module):
        def forward(self, X):
            return mt.cat([X, X], dim=0)

    m = Holder()
    with pytest.raises(ValueError, match="may not change the shape"):
        P.register_parametrization(m, "table", Widen())
    assert type(m) is Holder and "table" in m._buffers       # refused: nothing changed
    P.register_parametrization(m, "table", Widen(), unsafe=True)
    assert m.table.shape == (4, 3)
    assert list(m.state_dict()) == ["parametrizations.table.original"]
    assert not isinstance(m.parametrizations.table.original, nn.Parameter)


def test_parametrize_errors_match_torch():
    class Halve:
        def __init__(self, lib):
            class H(lib.nn.Module):
                def forward(self, X):
                    return X[:1]
            self.cls = H

    class ToInt:
        def __init__(self, lib):
            class I(lib.nn.Module):
                def forward(self, X):
                    return X.long()
            self.cls = I

    ours, theirs = twin(lambda lib: lib.nn.Linear(2, 2))
    for kind in (Halve, ToInt):
        same_error(lambda: P.register_parametrization(ours, "weight", kind(mt).cls()),
                   lambda: TP.register_parametrization(theirs, "weight", kind(torch).cls()))
    same_error(lambda: P.register_parametrization(ours, "nothing", Scale2(mt).cls()),
               lambda: TP.register_parametrization(theirs, "nothing", Scale2(torch).cls()))
    same_error(lambda: P.remove_parametrizations(ours, "weight"),
               lambda: TP.remove_parametrizations(theirs, "weight"))
    # appending to a chain: the same checks, with the chain's value
    P.register_parametrization(ours, "weight", Scale2(mt).cls())
    TP.register_parametrization(theirs, "weight", Scale2(torch).cls())
    for kind in (Halve, ToInt):
        same_error(lambda: P.register_parametrization(ours, "weight", kind(mt).cls()),
                   lambda: TP.register_parametrization(theirs, "weight", kind(torch).cls()))
    assert len(ours.parametrizations.weight) == 1
    for module in (ours, theirs):
        with pytest.raises(RuntimeError, match="Serialization of parametrized modules is "
                                               "only supported through state_dict"):
            pickle.dumps(module)


def test_parametrize_cached_and_deepcopy():
    m = nn.Linear(3, 3)
    P.register_parametrization(m, "weight", Scale2(mt).cls())
    assert m.weight is not m.weight
    with P.cached():
        first = m.weight
        with P.cached():
            assert m.weight is first
        assert m.weight is first            # the inner exit keeps the outer cache
    assert m.weight is not first
    replica = copy.deepcopy(m)
    assert type(replica).__name__ == "ParametrizedLinear"
    assert replica.parametrizations.weight.original is not m.parametrizations.weight.original
    np.testing.assert_array_equal(to_np(replica.weight), to_np(m.weight))


def test_transfer_parametrizations_and_params():
    source = nn.Linear(3, 3)
    P.register_parametrization(source, "weight", Scale2(mt).cls())
    target = nn.Linear(3, 3)
    P.transfer_parametrizations_and_params(source, target)
    assert target.parametrizations.weight.original is source.parametrizations.weight.original
    np.testing.assert_array_equal(to_np(target.weight), to_np(source.weight))


# --------------------------------------------------------------------------- orthogonal

class Batched:
    """A module whose parameter is a batch of matrices."""

    def __init__(self, lib, shape):
        class Stack(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = lib.nn.Parameter(lib.zeros(*shape))

            def forward(self, x):
                return x @ self.weight
        self.cls = Stack


ORTHOGONAL_CASES = [(m, s) for m in ("matrix_exp", "cayley", "householder")
                    for s in ((4, 4), (5, 3), (3, 5), (2, 4, 3))]


def _orthogonal_twins(orthogonal_map, shape):
    rng = np.random.default_rng(1)
    weight = rng.standard_normal(shape)

    def build(lib):
        module = Batched(lib, shape).cls()
        with lib.no_grad():
            module.weight.copy_(lib.tensor(weight))
        return module
    ours, theirs = build(mt).double(), build(torch).double()
    PZ.orthogonal(ours, orthogonal_map=orthogonal_map)
    TPZ.orthogonal(theirs, orthogonal_map=orthogonal_map)
    return ours, theirs


@pytest.mark.parametrize("orthogonal_map, shape", ORTHOGONAL_CASES)
def test_orthogonal_is_orthogonal_and_matches_torch(orthogonal_map, shape):
    ours, theirs = _orthogonal_twins(orthogonal_map, shape)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == \
        ["parametrizations.weight.original", "parametrizations.weight.0.base"]
    # registration keeps the weight's span: the same orthogonal matrix as PyTorch's
    q = to_np(ours.weight)
    close(ours.weight, theirs.weight, atol=1e-12)
    gram = q.swapaxes(-1, -2) @ q if shape[-2] >= shape[-1] else q @ q.swapaxes(-1, -2)
    np.testing.assert_allclose(gram, np.broadcast_to(np.eye(gram.shape[-1]), gram.shape),
                               atol=1e-12)
    # away from the identity, from PyTorch's state: values and gradients
    rng = np.random.default_rng(2)
    original = 0.3 * rng.standard_normal(shape)
    if orthogonal_map == "householder":
        # its diagonal holds each reflector's sign (truncated to an integer)
        idx = np.arange(min(shape[-2:]))
        original[..., idx, idx] = rng.choice([-1.0, 1.0], original[..., idx, idx].shape)
    with torch.no_grad():
        theirs.parametrizations.weight.original.copy_(torch.tensor(original))
    ours.load_state_dict(torch_state(theirs))
    close(ours.weight, theirs.weight)
    q = to_np(ours.weight)
    gram = q.swapaxes(-1, -2) @ q if shape[-2] >= shape[-1] else q @ q.swapaxes(-1, -2)
    np.testing.assert_allclose(gram, np.broadcast_to(np.eye(gram.shape[-1]), gram.shape),
                               atol=1e-12)
    run_both(ours, theirs, (3, shape[-2]))
    assert_same_parameters_and_grads(ours, theirs)


@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley", "householder"])
def test_orthogonal_assignment_sets_base(orthogonal_map):
    ours, theirs = _orthogonal_twins(orthogonal_map, (4, 3))
    target = np.linalg.qr(np.random.default_rng(3).standard_normal((4, 3)))[0]
    ours.weight = mt.tensor(target)
    theirs.weight = torch.tensor(target)
    close(ours.weight, theirs.weight)
    np.testing.assert_allclose(to_np(ours.weight), target, atol=1e-12)
    close(ours.parametrizations.weight.original, theirs.parametrizations.weight.original)


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5)])
def test_orthogonal_householder_without_trivialization(shape):
    def build(lib):
        module = lib.nn.Linear(shape[1], shape[0])
        return module
    ours, theirs = twin(build)
    PZ.orthogonal(ours, orthogonal_map="householder", use_trivialization=False)
    TPZ.orthogonal(theirs, orthogonal_map="householder", use_trivialization=False)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert not hasattr(ours.parametrizations.weight[0], "base")
    close(ours.parametrizations.weight.original, theirs.parametrizations.weight.original)
    close(ours.weight, theirs.weight)
    run_both(ours, theirs, (2, shape[1]))
    assert_same_parameters_and_grads(ours, theirs)


def test_orthogonal_errors_match_torch():
    ours, theirs = twin(lambda lib: lib.nn.Linear(3, 3))
    same_error(lambda: PZ.orthogonal(ours, orthogonal_map="qr"),
               lambda: TPZ.orthogonal(theirs, orthogonal_map="qr"))
    same_error(lambda: PZ.orthogonal(ours, "bias"), lambda: TPZ.orthogonal(theirs, "bias"))
    same_error(lambda: PZ.orthogonal(ours, "nothing"), lambda: TPZ.orthogonal(theirs, "nothing"))
    PZ.orthogonal(ours, orthogonal_map="cayley", use_trivialization=False)
    TPZ.orthogonal(theirs, orthogonal_map="cayley", use_trivialization=False)
    value = np.eye(3)
    same_error(lambda: setattr(ours, "weight", mt.tensor(value)),
               lambda: setattr(theirs, "weight", torch.tensor(value)))
    ours, theirs = twin(lambda lib: lib.nn.Linear(3, 3))
    PZ.orthogonal(ours)
    TPZ.orthogonal(theirs)
    same_error(lambda: setattr(ours, "weight", mt.zeros(2, 3, dtype=mt.float64)),
               lambda: setattr(theirs, "weight", torch.zeros(2, 3, dtype=torch.float64)))


# --------------------------------------------------------------------------- weight_norm

WEIGHT_NORM_LAYERS = [(lambda lib: lib.nn.Linear(5, 3), (2, 5)),
                      (lambda lib: lib.nn.Conv2d(2, 4, 3), (1, 2, 5, 5)),
                      (lambda lib: lib.nn.ConvTranspose2d(2, 4, 3), (1, 2, 4, 4))]


@pytest.mark.parametrize("dim", [0, 1, None, -2])
@pytest.mark.parametrize("build, shape", WEIGHT_NORM_LAYERS)
def test_parametrized_weight_norm(build, shape, dim):
    ours, theirs = twin(build)
    PZ.weight_norm(ours, dim=dim)
    TPZ.weight_norm(theirs, dim=dim)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == \
        ["bias", "parametrizations.weight.original0", "parametrizations.weight.original1"]
    g = ours.parametrizations.weight.original0
    assert g.shape == theirs.parametrizations.weight.original0.shape
    close(g, theirs.parametrizations.weight.original0)
    close(ours.weight, theirs.weight)
    run_both(ours, theirs, shape)
    assert_same_parameters_and_grads(ours, theirs, atol=1e-11)


def test_parametrized_weight_norm_loads_the_older_form_state_dict():
    older = quietly(torch.nn.utils.weight_norm, torch.nn.Linear(4, 3).double())
    with torch.no_grad():
        older.weight_g.mul_(3)
    ours = PZ.weight_norm(nn.Linear(4, 3).double())
    ours.load_state_dict(torch_state(older))
    older(torch.zeros(1, 4, dtype=torch.float64))     # recompute weight from g and v
    close(ours.weight, older.weight)


# --------------------------------------------------------------------------- spectral_norm

SPECTRAL_LAYERS = WEIGHT_NORM_LAYERS + [(lambda lib: lib.nn.Linear(4, 6), (2, 4))]


@pytest.mark.parametrize("build, shape", SPECTRAL_LAYERS)
def test_parametrized_spectral_norm(build, shape):
    ours, theirs = twin(build)
    PZ.spectral_norm(ours, n_power_iterations=2)
    TPZ.spectral_norm(theirs, n_power_iterations=2)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == \
        ["bias", "parametrizations.weight.original", "parametrizations.weight.0._u",
         "parametrizations.weight.0._v"]
    sn = ours.parametrizations.weight[0]
    assert sn.dim == theirs.parametrizations.weight[0].dim      # 1 for ConvTranspose
    # u and v were drawn at random: continue from PyTorch's
    ours.load_state_dict(torch_state(theirs))
    run_both(ours, theirs, shape, steps=3)
    assert_same_parameters_and_grads(ours, theirs, atol=1e-11)
    for name, buffer in theirs.named_buffers():
        close(ours.get_buffer(name), buffer)
    # the estimate converges to the largest singular value
    for _ in range(200):
        ours(mt.zeros(shape, dtype=mt.float64))
    assert abs(np.linalg.svd(to_np(sn._reshape_weight_to_matrix(ours.weight)),
                             compute_uv=False)[0] - 1) < 1e-8
    ours.eval()
    theirs.eval()
    x = np.ones(shape)
    before = to_np(sn._u).copy()
    ours(mt.tensor(x))
    np.testing.assert_array_equal(to_np(sn._u), before)          # eval: no power step


def test_parametrized_spectral_norm_of_a_vector_and_errors():
    ours = nn.Module()
    ours.v = nn.Parameter(mt.tensor([3.0, 4.0], dtype=mt.float64))
    PZ.spectral_norm(ours, "v")
    np.testing.assert_allclose(to_np(ours.v), [0.6, 0.8])
    assert list(ours.state_dict()) == ["parametrizations.v.original"]
    a, b = twin(lambda lib: lib.nn.Linear(3, 3))
    same_error(lambda: PZ.spectral_norm(a, n_power_iterations=0),
               lambda: TPZ.spectral_norm(b, n_power_iterations=0))
    same_error(lambda: PZ.spectral_norm(a, dim=2), lambda: TPZ.spectral_norm(b, dim=2))
    same_error(lambda: PZ.spectral_norm(a, "nothing"), lambda: TPZ.spectral_norm(b, "nothing"))


# --------------------------------------------------------------------------- older forms

@pytest.mark.parametrize("dim", [0, 1, None])
@pytest.mark.parametrize("build, shape", WEIGHT_NORM_LAYERS)
def test_hook_weight_norm(build, shape, dim):
    ours, theirs = twin(build)
    with pytest.warns(FutureWarning, match="parametrizations.weight_norm"):
        nn.utils.weight_norm(ours, dim=dim)
    quietly(torch.nn.utils.weight_norm, theirs, dim=dim)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["bias", "weight_g", "weight_v"]
    close(ours.weight_g, theirs.weight_g)
    run_both(ours, theirs, shape, steps=2)
    assert_same_parameters_and_grads(ours, theirs, atol=1e-11)
    ours.load_state_dict(torch_state(theirs))
    same_error(lambda: quietly(nn.utils.weight_norm, ours, dim=dim),
               lambda: quietly(torch.nn.utils.weight_norm, theirs, dim=dim))
    nn.utils.remove_weight_norm(ours)
    torch.nn.utils.remove_weight_norm(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert isinstance(ours.weight, nn.Parameter) and not ours._forward_pre_hooks
    close(ours.weight, theirs.weight)
    same_error(lambda: nn.utils.remove_weight_norm(ours),
               lambda: torch.nn.utils.remove_weight_norm(theirs))


@pytest.mark.parametrize("build, shape", SPECTRAL_LAYERS)
def test_hook_spectral_norm(build, shape):
    ours, theirs = twin(build)
    nn.utils.spectral_norm(ours)
    torch.nn.utils.spectral_norm(theirs)
    state = theirs.state_dict()
    assert list(ours.state_dict()) == list(state) == ["bias", "weight_orig", "weight_u",
                                                      "weight_v"]
    assert ours.state_dict()._metadata[""]["spectral_norm"] == \
        state._metadata[""]["spectral_norm"] == {"weight.version": 1}
    ours.load_state_dict(torch_state(theirs))
    run_both(ours, theirs, shape, steps=3)
    assert_same_parameters_and_grads(ours, theirs, atol=1e-11)
    close(ours.weight_u, theirs.weight_u)
    close(ours.weight_v, theirs.weight_v)
    ours.eval()
    theirs.eval()
    run_both(ours, theirs, shape)
    same_error(lambda: nn.utils.spectral_norm(ours), lambda: torch.nn.utils.spectral_norm(theirs))
    nn.utils.remove_spectral_norm(ours)
    torch.nn.utils.remove_spectral_norm(theirs)
    close(ours.weight, theirs.weight)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["bias", "weight"]
    assert not ours._forward_pre_hooks and not ours._state_dict_hooks
    # PyTorch keeps the loading hook and then refuses the module's own state dict
    ours.load_state_dict(ours.state_dict())
    same_error(lambda: nn.utils.remove_spectral_norm(ours),
               lambda: torch.nn.utils.remove_spectral_norm(theirs))


def test_hook_spectral_norm_loads_a_version_0_state_dict():
    """Before version 1 a checkpoint held ``weight`` and no ``weight_v``: v is solved for."""
    ours, theirs = twin(lambda lib: lib.nn.Linear(4, 3))
    nn.utils.spectral_norm(ours)
    torch.nn.utils.spectral_norm(theirs)
    theirs(torch.ones(1, 4, dtype=torch.float64))
    old = theirs.state_dict()
    old["weight"] = theirs.weight.detach().clone()
    del old["weight_v"]
    old._metadata[""]["spectral_norm"]["weight.version"] = 0
    fresh = quietly(torch.nn.utils.spectral_norm, torch.nn.Linear(4, 3).double())
    fresh.load_state_dict(old)
    ours.load_state_dict(torch_state(old))
    close(ours.weight_v, fresh.weight_v, atol=1e-10)
    ours.eval()
    fresh.eval()
    run_both(ours, fresh, (2, 4))


def test_hook_norm_errors_match_torch():
    ours, theirs = twin(lambda lib: lib.nn.Linear(3, 3, bias=False))
    same_error(lambda: nn.utils.spectral_norm(ours, n_power_iterations=0),
               lambda: torch.nn.utils.spectral_norm(theirs, n_power_iterations=0))
    same_error(lambda: nn.utils.spectral_norm(ours, "bias"),
               lambda: torch.nn.utils.spectral_norm(theirs, "bias"))
    same_error(lambda: nn.utils.remove_spectral_norm(ours),
               lambda: torch.nn.utils.remove_spectral_norm(theirs))
    lazy, tlazy = nn.LazyLinear(3), torch.nn.LazyLinear(3)
    same_error(lambda: quietly(nn.utils.weight_norm, lazy),
               lambda: quietly(torch.nn.utils.weight_norm, tlazy))
    same_error(lambda: nn.utils.spectral_norm(lazy), lambda: torch.nn.utils.spectral_norm(tlazy))


# --------------------------------------------------------------------------- fusion

def _eval_twins(build):
    """Twins whose batch norms have non-trivial running statistics, in eval mode."""
    ours, theirs = twin(build)
    rng = np.random.default_rng(4)
    with torch.no_grad():
        for name, tensor in list(theirs.named_parameters()) + list(theirs.named_buffers()):
            if tensor.is_floating_point():
                values = rng.standard_normal(tuple(tensor.shape))
                tensor.copy_(torch.tensor(np.abs(values) + 0.5 if "var" in name else values))
    ours.load_state_dict(torch_state(theirs))
    return ours.eval(), theirs.eval()


FUSIONS = [
    ("conv", lambda lib: lib.nn.Sequential(lib.nn.Conv2d(2, 3, 3), lib.nn.BatchNorm2d(3)),
     (2, 2, 5, 5), {}),
    ("conv", lambda lib: lib.nn.Sequential(lib.nn.Conv1d(2, 3, 3, bias=False),
                                           lib.nn.BatchNorm1d(3, affine=False)), (2, 2, 6), {}),
    ("conv", lambda lib: lib.nn.Sequential(lib.nn.ConvTranspose2d(2, 3, 3),
                                           lib.nn.BatchNorm2d(3)), (1, 2, 4, 4),
     {"transpose": True}),
    ("linear", lambda lib: lib.nn.Sequential(lib.nn.Linear(4, 3), lib.nn.BatchNorm1d(3)),
     (5, 4), {}),
    ("linear", lambda lib: lib.nn.Sequential(lib.nn.Linear(4, 3, bias=False),
                                             lib.nn.BatchNorm1d(1)), (5, 1, 4), {}),
]


@pytest.mark.parametrize("kind, build, shape, options", FUSIONS)
def test_fusion_equals_the_unfused_eval_modules(kind, build, shape, options):
    ours, theirs = _eval_twins(build)
    fuse, tfuse = ((nn.utils.fuse_conv_bn_eval, torch.nn.utils.fuse_conv_bn_eval)
                   if kind == "conv" else
                   (nn.utils.fuse_linear_bn_eval, torch.nn.utils.fuse_linear_bn_eval))
    fused, tfused = fuse(ours[0], ours[1], **options), tfuse(theirs[0], theirs[1], **options)
    assert fused is not ours[0] and type(fused) is type(ours[0])
    assert isinstance(fused.weight, nn.Parameter) and isinstance(fused.bias, nn.Parameter)
    close(fused.weight, tfused.weight)
    close(fused.bias, tfused.bias)
    x = mt.tensor(np.random.default_rng(5).standard_normal(shape))
    np.testing.assert_allclose(to_np(fused(x)), to_np(ours(x)), atol=1e-12)
    assert ours[0].bias is None or not np.array_equal(to_np(ours[0].bias), to_np(fused.bias))


def test_fusion_errors_and_weights_functions():
    ours, theirs = _eval_twins(lambda lib: lib.nn.Sequential(lib.nn.Linear(4, 3),
                                                            lib.nn.BatchNorm1d(2)))
    same_error(lambda: nn.utils.fuse_linear_bn_eval(ours[0], ours[1]),
               lambda: torch.nn.utils.fuse_linear_bn_eval(theirs[0], theirs[1]))
    ours.train()
    theirs.train()
    same_error(lambda: nn.utils.fuse_conv_bn_eval(ours[0], ours[1]),
               lambda: torch.nn.utils.fuse_conv_bn_eval(theirs[0], theirs[1]))
    bn, tbn = nn.BatchNorm1d(3, track_running_stats=False).eval(), \
        torch.nn.BatchNorm1d(3, track_running_stats=False).eval()
    same_error(lambda: nn.utils.fuse_linear_bn_eval(nn.Linear(2, 3).eval(), bn),
               lambda: torch.nn.utils.fuse_linear_bn_eval(torch.nn.Linear(2, 3).eval(), tbn))
    w = np.random.default_rng(6).standard_normal((3, 2, 1))
    mean, var = np.array([0.1, -0.2, 0.3]), np.array([1.5, 0.5, 2.0])
    ours = nn.utils.fuse_conv_bn_weights(mt.tensor(w), None, mt.tensor(mean), mt.tensor(var),
                                         1e-3, None, None)
    theirs = torch.nn.utils.fuse_conv_bn_weights(torch.tensor(w), None, torch.tensor(mean),
                                                 torch.tensor(var), 1e-3, None, None)
    for a, b in zip(ours, theirs):
        close(a, b)
        assert a.requires_grad == b.requires_grad


# --------------------------------------------------------------------------- small utils

@pytest.mark.parametrize("rank", [2, 3])
def test_convert_conv_weight_memory_format(rank):
    def build(lib):
        conv = getattr(lib.nn, f"Conv{rank}d")
        conv_t = getattr(lib.nn, f"ConvTranspose{rank}d")
        return lib.nn.Sequential(conv(2, 3, 3), lib.nn.Sequential(conv_t(3, 2, 3)),
                                 lib.nn.Linear(3, 3))
    ours, theirs = twin(build)
    fmt = "channels_last" if rank == 2 else "channels_last_3d"
    convert = getattr(nn.utils, f"convert_conv{rank}d_weight_memory_format")
    tconvert = getattr(torch.nn.utils, f"convert_conv{rank}d_weight_memory_format")
    weight = ours[0].weight
    assert convert(ours, getattr(mt, fmt)) is ours
    tconvert(theirs, getattr(torch, fmt))
    assert ours[0].weight is weight                  # the same Parameter, restrided
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert a.stride() == b.stride()
        close(a, b)


def test_skip_init():
    m = nn.utils.skip_init(nn.Linear, 3, 4, bias=True)
    assert isinstance(m.weight, nn.Parameter) and m.weight.shape == (4, 3)
    assert m.weight.device.type == "cpu" and m.bias.device.type == "cpu"
    m = nn.utils.skip_init(nn.Conv2d, in_channels=2, out_channels=3, kernel_size=1,
                           dtype=mt.float64)
    assert m.weight.dtype == mt.float64 and m.weight.shape == (3, 2, 1, 1)

    class NoDevice(mt.nn.Module):
        pass

    class TNoDevice(torch.nn.Module):
        pass
    same_error(lambda: nn.utils.skip_init(NoDevice), lambda: torch.nn.utils.skip_init(TNoDevice))
    same_error(lambda: nn.utils.skip_init(int), lambda: torch.nn.utils.skip_init(int))


def test_to_empty_keeps_parameters_and_leaves_meta():
    m = nn.Linear(2, 3, device="meta")
    weight = m.weight
    assert m.to_empty(device="cpu") is m
    assert m.weight is weight and m.weight.device.type == "cpu" and m.weight.shape == (3, 2)


def test_deprecated_aliases_warn_and_delegate():
    m = nn.Linear(3, 2)
    values = {k: v * 2 for k, v in m.state_dict().items()}
    x = mt.ones(1, 3)
    with pytest.warns(FutureWarning, match="func.functional_call"):
        y = nn.utils.stateless.functional_call(m, values, (x,))
    np.testing.assert_array_equal(to_np(y), to_np(mt.func.functional_call(m, values, (x,))))
    m(x).sum().backward()
    grads = [to_np(p.grad) for p in m.parameters()]
    with pytest.warns(FutureWarning, match="clip_grad_norm_"):
        total = nn.utils.clip_grad_norm(m.parameters(), 0.1)
    norm = np.sqrt(sum((g ** 2).sum() for g in grads))
    np.testing.assert_allclose(total.item(), norm, rtol=1e-6)
    np.testing.assert_allclose(to_np(m.weight.grad), grads[0] * 0.1 / (norm + 1e-6), rtol=1e-5)


def test_nn_utils_names_match_torch():
    names = {n for n in dir(torch.nn.utils) if not n.startswith("_")}
    assert sorted(n for n in names if not hasattr(nn.utils, n)) == []
    for module in ("parametrize", "parametrizations", "fusion", "memory_format", "stateless",
                   "init", "weight_norm", "spectral_norm"):
        theirs = getattr(torch.nn.utils, module)
        if not isinstance(theirs, type(torch.nn.utils)):
            continue
        ours = getattr(nn.utils, module)
        assert sorted(set(getattr(theirs, "__all__", [])) - set(dir(ours))) == []


# --------------------------------------------------------------------------- nn gaps

INIT_ALIASES = [("uniform", (3, 4), ()), ("normal", (3, 4), ()), ("constant", (3, 4), (0.5,)),
                ("eye", (3, 4), ()), ("dirac", (2, 2, 3), ()), ("xavier_uniform", (3, 4), ()),
                ("xavier_normal", (3, 4), ()), ("kaiming_uniform", (3, 4), ()),
                ("kaiming_normal", (3, 4), ()), ("orthogonal", (3, 4), ()),
                ("sparse", (4, 3), (0.5,))]


@pytest.mark.parametrize("name, shape, args", INIT_ALIASES)
def test_init_deprecated_aliases(name, shape, args):
    ours, theirs = mt.empty(shape), torch.empty(shape)
    with warnings.catch_warnings(record=True) as our_warnings:
        warnings.simplefilter("always")
        mt.manual_seed(0)
        result = getattr(nn.init, name)(ours, *args)
    with warnings.catch_warnings(record=True) as their_warnings:
        warnings.simplefilter("always")
        getattr(torch.nn.init, name)(theirs, *args)
    assert [str(w.message) for w in our_warnings] == [str(w.message) for w in their_warnings]
    assert [w.category for w in our_warnings] == [FutureWarning]
    assert our_warnings[0].filename == __file__            # points at the caller
    assert result is ours
    mt.manual_seed(0)
    expected = getattr(nn.init, name + "_")(mt.empty(shape), *args)
    np.testing.assert_array_equal(to_np(ours), to_np(expected))


def test_init_sparse_():
    rows, cols, sparsity = 40, 300, 0.3
    w = nn.init.sparse_(mt.empty(rows, cols, dtype=mt.float64), sparsity, std=2.0)
    values = to_np(w)
    zeros_per_column = (values == 0).sum(axis=0)
    assert (zeros_per_column == int(np.ceil(sparsity * rows))).all()
    # each row is zeroed in about sparsity of the columns: the zeros are spread at random
    per_row = (values == 0).mean(axis=1)
    assert np.abs(per_row - sparsity).max() < 0.15
    nonzero = values[values != 0]
    assert abs(nonzero.std() - 2.0) < 0.1 and abs(nonzero.mean()) < 0.1
    g1, g2 = mt.Generator().manual_seed(3), mt.Generator().manual_seed(3)
    np.testing.assert_array_equal(to_np(nn.init.sparse_(mt.empty(5, 4), 0.4, generator=g1)),
                                  to_np(nn.init.sparse_(mt.empty(5, 4), 0.4, generator=g2)))
    same_error(lambda: nn.init.sparse_(mt.empty(2, 3, 4), 0.1),
               lambda: torch.nn.init.sparse_(torch.empty(2, 3, 4), 0.1))
    meta = mt.empty(3, 4, device="meta")
    assert nn.init.sparse_(meta, 0.5) is meta


def test_buffer_registers_on_assignment():
    for lib in (mt, torch):
        m = lib.nn.Module()
        m.a = lib.nn.Buffer(lib.ones(2))
        m.b = lib.nn.Buffer(lib.ones(2), persistent=False)
        m.c = lib.ones(1)                                   # a plain attribute
        assert [n for n, _ in m.named_buffers()] == ["a", "b"]
        assert list(m.state_dict()) == ["a"]
        assert isinstance(m.a, lib.nn.Buffer) and not isinstance(lib.ones(1), lib.nn.Buffer)
        m.b = lib.nn.Buffer(lib.zeros(2))                   # a Buffer says its persistence
        assert list(m.state_dict()) == ["a", "b"]
        m.a = lib.zeros(3)                                  # a buffer stays one
        assert list(m.state_dict()) == ["a", "b"]
        param = lib.nn.Parameter(lib.ones(2))
        buffer = lib.nn.Buffer(param)
        assert buffer.requires_grad and buffer.grad_fn is None and buffer is not param
    ours, theirs = nn.Module(), torch.nn.Module()
    ours.p, theirs.p = nn.Parameter(mt.ones(1)), torch.nn.Parameter(torch.ones(1))
    same_error(lambda: setattr(ours, "p", nn.Buffer(mt.ones(1))),
               lambda: setattr(theirs, "p", torch.nn.Buffer(torch.ones(1))))
    ours.c, theirs.c = 1, 1
    same_error(lambda: setattr(ours, "c", nn.Buffer(mt.ones(1))),
               lambda: setattr(theirs, "c", torch.nn.Buffer(torch.ones(1))))
    ours.register_buffer("r", None)
    theirs.register_buffer("r", None)
    same_error(lambda: setattr(ours, "r", 3), lambda: setattr(theirs, "r", 3))


def test_sync_batch_norm_is_batch_norm_in_one_process():
    ours, theirs = twin(lambda lib: lib.nn.SyncBatchNorm(3, momentum=None))
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for shape in ((4, 3), (2, 3, 5), (2, 3, 2, 2, 2)):
        run_both(ours, theirs, shape)
    assert_same_parameters_and_grads(ours, theirs)
    for name, buffer in theirs.named_buffers():
        close(ours.get_buffer(name), buffer)
    ours.eval()
    theirs.eval()
    run_both(ours, theirs, (2, 3, 4))
    same_error(lambda: ours(mt.ones(3)), lambda: theirs(torch.ones(3)))
    same_error(lambda: ours(mt.ones(3, 0)), lambda: theirs(torch.ones(3, 0)))


def test_convert_sync_batchnorm():
    def build(lib):
        return lib.nn.Sequential(lib.nn.Conv2d(2, 3, 1), lib.nn.BatchNorm2d(3),
                                 lib.nn.Sequential(lib.nn.BatchNorm2d(3, affine=False)))
    ours, theirs = twin(build)
    ours.eval()
    theirs.eval()
    bn = ours[1]
    converted = nn.SyncBatchNorm.convert_sync_batchnorm(ours)
    tconverted = torch.nn.SyncBatchNorm.convert_sync_batchnorm(theirs)
    assert converted is ours and repr(converted) == repr(tconverted)
    assert type(ours[1]) is nn.SyncBatchNorm and type(ours[2][0]) is nn.SyncBatchNorm
    assert ours[1].weight is bn.weight and ours[1].running_mean is bn.running_mean
    assert not ours[1].training
    run_both(ours, theirs, (1, 2, 3, 3))
    single = nn.BatchNorm1d(4)
    assert type(nn.SyncBatchNorm.convert_sync_batchnorm(single)) is nn.SyncBatchNorm


def test_nll_loss_2d_and_container_are_deprecated_aliases():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 4, 4))
    target = rng.integers(0, 3, (2, 4, 4))
    with pytest.warns(FutureWarning, match="Please use `NLLLoss`"):
        ours = nn.NLLLoss2d(ignore_index=1)
    theirs = quietly(torch.nn.NLLLoss2d, ignore_index=1)
    assert isinstance(ours, nn.NLLLoss) and repr(ours) == repr(theirs)
    close(ours(mt.tensor(x), mt.tensor(target)), theirs(torch.tensor(x), torch.tensor(target)))
    with pytest.warns(FutureWarning, match="Subclass that instead"):
        box = nn.Container(first=nn.Linear(1, 1))
    assert repr(box) == repr(quietly(torch.nn.Container, first=torch.nn.Linear(1, 1)))


SIGNATURES = ["nn.utils.parametrize.register_parametrization",
              "nn.utils.parametrize.remove_parametrizations",
              "nn.utils.parametrize.is_parametrized",
              "nn.utils.parametrize.transfer_parametrizations_and_params",
              "nn.utils.parametrizations.orthogonal", "nn.utils.parametrizations.weight_norm",
              "nn.utils.parametrizations.spectral_norm", "nn.utils.weight_norm",
              "nn.utils.remove_weight_norm", "nn.utils.spectral_norm",
              "nn.utils.remove_spectral_norm", "nn.utils.fuse_conv_bn_eval",
              "nn.utils.fuse_conv_bn_weights", "nn.utils.fuse_linear_bn_eval",
              "nn.utils.fuse_linear_bn_weights", "nn.utils.convert_conv2d_weight_memory_format",
              "nn.utils.convert_conv3d_weight_memory_format", "nn.utils.skip_init",
              "nn.utils.clip_grad_norm", "nn.utils.stateless.functional_call",
              "nn.init.sparse_", "nn.Buffer", "nn.SyncBatchNorm", "nn.NLLLoss2d.__init__",
              "nn.Module.to_empty", "nn.SyncBatchNorm.convert_sync_batchnorm"]


@pytest.mark.parametrize("path", SIGNATURES)
def test_signatures_match_torch(path):
    import inspect

    def resolve(root):
        for part in path.split("."):
            root = getattr(root, part)
        return inspect.signature(root)
    ours, theirs = resolve(mt), resolve(torch)
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == \
        [(p.name, p.kind, p.default) for p in theirs.parameters.values()]
