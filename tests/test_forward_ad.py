"""autograd.forward_ad: dual levels, make_dual/unpack_dual, and the tangents every op gives.

Every op with samples is run on dual float64 inputs and its tangents compared with
PyTorch's forward AD (with ``func.jvp`` of the op where PyTorch has no forward formula or
is not installed); then errors, levels, grad mode, in-place ops and views, and the
combinations with reverse mode and vmap.
"""
import numpy as np
import pytest

import microtensor as mt
import microtensor.autograd.forward_ad as fwAD
from microtensor._C.tensor import TensorBase
from microtensor.ops import REGISTRY
from microtensor.testing import differentiable_places, maker, seed_for
from test_op_registry import (CASES, CONVENTIONAL_GRADIENTS, GAUGE_DEPENDENT, _differentiable,
                              _sample, _to_torch, _torch_callable)

try:
    import torch
    import torch.autograd.forward_ad as tfwAD
except ImportError:
    torch = tfwAD = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def arr(t):
    return np.array(t.detach()._array())


def close(actual, expected, rtol=1e-7, atol=1e-9):
    """``actual`` (a tensor, or an array of flags) equals ``expected``."""
    if torch is not None and isinstance(expected, torch.Tensor):
        expected = expected.detach().numpy()
    elif isinstance(expected, TensorBase):
        expected = arr(expected)
    assert isinstance(actual, (TensorBase, np.ndarray)), type(actual)
    got = arr(actual) if isinstance(actual, TensorBase) else actual
    assert got.shape == np.shape(expected), (got.shape, np.shape(expected))
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)


def tangent(t):
    return fwAD.unpack_dual(t).tangent


# ------------------------------------------------------------------ every op

def _floating(result, tensor_type=TensorBase):
    """The floating tensors among an op's outputs."""
    items = result if isinstance(result, (tuple, list)) else [result]
    return [r for r in items if isinstance(r, tensor_type) and r.is_floating_point()]


def _mt_tangents(op, args, kwargs, places, tangents):
    with fwAD.dual_level():
        for (container, key), t in zip(places, tangents):
            # clones: an in-place op writes into them (and the tangent, kept as it is), and
            # an expanded sample becomes dense (its tangent could not take its layout)
            container[key] = fwAD.make_dual(container[key].clone(), t.clone())
        result = op(*args, **kwargs)
        return [tangent(o) for o in _floating(result)]


def _torch_tangents(op, args, kwargs, paths, tangents):
    """PyTorch's tangents of the same call, or None when it has no such op."""
    fn = _torch_callable(op)
    if fn is None:
        return None
    targs, tkwargs = list(_to_torch(list(args))), _to_torch(dict(kwargs))
    with tfwAD.dual_level():
        for path, t in zip(paths, tangents):
            container, key = _resolve(targs, tkwargs, path)
            container[key] = tfwAD.make_dual(container[key].clone(), _to_torch(t))
        result = fn(*targs, **tkwargs)
        return [tfwAD.unpack_dual(o).tangent for o in _floating(result, torch.Tensor)]


def _paths(args, kwargs, places):
    """Each place as ``(top, index)``: an argument position or name, and an index into a
    list argument or None."""
    paths = []
    for container, key in places:
        if container is args or container is kwargs:
            paths.append((key, None))
        else:
            top = next(k for k, v in list(enumerate(args)) + list(kwargs.items())
                       if v is container)
            paths.append((top, key))
    return paths


def _resolve(targs, tkwargs, path):
    top, index = path
    container = targs if isinstance(top, int) else tkwargs
    if index is None:
        return container, top
    container[top] = list(container[top])
    return container[top], index


def _jvp_reference(op, args, kwargs, places, tangents):
    """``func.jvp`` of the op as a function of the dual inputs (the op on a clone of its
    target when in place)."""
    primals = tuple(container[key] for container, key in places)

    def f(*xs):
        for (container, key), x in zip(places, xs):
            container[key] = x
        call_args = list(args)
        if op.kind == "inplace":
            call_args[0] = call_args[0].clone()
        result = op(*call_args, **kwargs)
        return tuple(_floating(result))
    _, out = mt.func.jvp(f, primals, tuple(tangents))
    return list(out)


def _sweep_cases():
    """Each op's first three samples (an in-place variant's first: its base op has the
    others); the mechanism is the same for every sample, and each op's derivative is
    checked on all of them by tests/test_op_registry.py."""
    return [case for case in CASES
            if case.values[1] < (1 if REGISTRY[case.values[0]].kind == "inplace" else 3)]


@pytest.mark.parametrize("name, index", _sweep_cases())
def test_tangents_of_every_op(name, index):
    op = REGISTRY[name]
    if not _differentiable(op):
        pytest.skip(f"{name} is not differentiable")
    if op.random:
        pytest.skip("random: the tangent depends on the draw")
    if name in GAUGE_DEPENDENT or name in CONVENTIONAL_GRADIENTS or name == "embedding":
        pytest.skip("the derivative is fixed by a convention (gauge, padding, CTC's), which "
                    "PyTorch's forward formula does not follow")
    args, kwargs = _sample(name, index)
    if _has_complex((args, kwargs)) or _has_complex(op(*_sample(name, index)[0],
                                                         **_sample(name, index)[1])):
        pytest.skip("forward AD of complex tensors is not supported (refusal tested below)")
    places = differentiable_places(op, args, kwargs)
    if not places:
        pytest.skip("no float64 input to differentiate")
    make = maker(seed_for(f"{name}-{index}-tangent"))
    tangents = [make(*container[key].shape) for container, key in places]
    paths = _paths(args, kwargs, places)
    got = _mt_tangents(op, args, kwargs, places, tangents)
    expected = None
    if torch is not None:
        try:
            expected = _torch_tangents(op, *_sample(name, index), paths, tangents)
        except (NotImplementedError, RuntimeError, TypeError, AttributeError):
            expected = None    # PyTorch has no forward formula (or no such op)
    if expected is None or None in expected:
        # where PyTorch gives no tangent (an output it declares non-differentiable, such
        # as native_layer_norm's mean), func.jvp of the op is the reference
        a, k = _sample(name, index)
        reference = _jvp_reference(op, a, k, differentiable_places(op, a, k), tangents)
        expected = reference if expected is None else \
            [r if e is None else e for e, r in zip(expected, reference)]
    if not _matches(got, expected):
        assert not _torch_consistent(op, *_sample(name, index), paths, tangents, expected), \
            "PyTorch's forward and reverse modes agree, and this tangent differs"
        # PyTorch's two modes disagree (a convention of its derivative): func.jvp decides
        a, k = _sample(name, index)
        expected = _jvp_reference(op, a, k, differentiable_places(op, a, k), tangents)
    assert _matches(got, expected, raise_=True)


def _has_complex(value):
    if isinstance(value, TensorBase):
        return value.is_complex()
    if isinstance(value, dict):
        return any(_has_complex(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return any(_has_complex(v) for v in value)
    return False


def test_complex_duals_are_refused_clearly():
    with fwAD.dual_level():
        with pytest.raises(NotImplementedError, match="complex"):
            fwAD.make_dual(mt.zeros(2, dtype=mt.complex128), mt.zeros(2, dtype=mt.complex128))
        dual = fwAD.make_dual(mt.ones(4, dtype=mt.float64), mt.ones(4, dtype=mt.float64))
        with pytest.raises(NotImplementedError, match="fft_r2c.*complex"):
            mt.fft.rfft(dual)


def _matches(got, expected, raise_=False):
    """Tangents equal, None (no tangent) standing for zeros."""
    try:
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            if g is None:
                assert not np.asarray(_numpy(e)).any(), "no tangent, but a nonzero one expected"
            else:
                close(g, _numpy(e), rtol=1e-6, atol=1e-8)
    except AssertionError:
        if raise_:
            raise
        return False
    return True


def _numpy(t):
    if torch is not None and isinstance(t, torch.Tensor):
        # PyTorch's tangent of an output with a zero derivative may be a ZeroTensor
        return np.zeros(tuple(t.shape)) if t._is_zerotensor() else t.detach().numpy()
    return arr(t)


def _torch_consistent(op, args, kwargs, paths, tangents, forward):
    """Whether PyTorch's forward-mode tangents ``forward`` agree with its reverse mode
    (``autograd.functional.jvp``, reverse mode twice)."""
    fn = _torch_callable(op)
    targs, tkwargs = list(_to_torch(list(args))), _to_torch(dict(kwargs))
    primals = []
    for path in paths:
        container, key = _resolve(targs, tkwargs, path)
        primals.append(container[key])

    def f(*xs):
        for path, x in zip(paths, xs):
            container, key = _resolve(targs, tkwargs, path)
            container[key] = x.clone() if op.kind == "inplace" and path == (0, None) else x
        return tuple(_floating(fn(*targs, **tkwargs), torch.Tensor))
    try:
        _, reverse = torch.autograd.functional.jvp(f, tuple(primals),
                                                   tuple(_to_torch(t) for t in tangents))
    except RuntimeError:    # an output PyTorch's reverse mode does not differentiate
        return False
    return all(np.allclose(_numpy(a), _numpy(b), rtol=1e-6, atol=1e-8)
               for a, b in zip(forward, reverse))


# ------------------------------------------------------------------ the same program on both

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 3))
T = RNG.standard_normal((4, 3))
W = RNG.standard_normal((3, 2))
IMAGES = RNG.standard_normal((2, 3, 6, 6))
XX = RNG.standard_normal((2, 4, 3))


def both(program):
    """``program(lib, fw)`` run on microtensor and, when installed, on PyTorch: their
    results (a list of arrays or None each) must agree."""
    ours = program(mt, fwAD)
    if torch is None:
        return ours
    theirs = program(torch, tfwAD)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        if b is None:
            assert a is None
        else:
            assert a is not None
            close(a, b)
    return ours


def t64(lib, values, **kwargs):
    return lib.tensor(np.asarray(values, dtype=np.float64), **kwargs)


def test_a_function_of_many_ops_matches_func_jvp_and_torch():
    def f(lib, x):
        w = t64(lib, W)
        h = (x @ w).tanh() * x.sum()
        return (h.softmax(-1) + h.exp().mean(0) - (x[:, :2] ** 2).sqrt().log1p()).cumsum(0)

    def program(lib, fw):
        with fw.dual_level():
            out = f(lib, fw.make_dual(t64(lib, X), t64(lib, T)))
            return [fw.unpack_dual(out).tangent]
    got = both(program)
    _, expected = mt.func.jvp(lambda x: f(mt, x), (t64(mt, X),), (t64(mt, T),))
    close(got[0], expected)


def test_nn_layers_and_a_model():
    def program(lib, fw):
        lib.manual_seed(0)
        F = lib.nn.functional
        x = t64(lib, IMAGES)
        tx = t64(lib, np.ones((2, 3, 6, 6)))
        w = t64(lib, np.linspace(-1, 1, 4 * 3 * 3 * 3).reshape(4, 3, 3, 3))
        tw = t64(lib, np.linspace(1, 2, 4 * 3 * 3 * 3).reshape(4, 3, 3, 3))
        target = lib.tensor([1, 3])
        with fw.dual_level():
            xd, wd = fw.make_dual(x, tx), fw.make_dual(w, tw)
            h = F.conv2d(xd, wd, padding=1)
            h = F.max_pool2d(F.gelu(F.batch_norm(h, None, None, training=True)), 2)
            h = F.layer_norm(h.flatten(1), (36,))
            v = t64(lib, np.linspace(-1, 1, 4 * 36).reshape(4, 36))
            vd = fw.make_dual(v, t64(lib, np.linspace(2, 1, 4 * 36).reshape(4, 36)))
            loss = F.cross_entropy(F.linear(h, vd), target)
            return [fw.unpack_dual(h).tangent, fw.unpack_dual(loss).tangent]
    both(program)


# ------------------------------------------------------------------ levels and errors

def test_levels():
    x, t = t64(mt, X), t64(mt, T)
    assert fwAD.unpack_dual(x) == (x, None)                     # no level: as it is
    assert isinstance(fwAD.unpack_dual(x), fwAD.UnpackedDualTensor)
    with fwAD.dual_level() as level:
        assert level == 0
        d = fwAD.make_dual(x, t)
        y = d * 2
        assert tangent(y) is not None
    assert tangent(y) is None and tangent(d) is None            # gone with the level
    assert fwAD.enter_dual_level() == 0                         # a new level: 0 again
    try:
        assert tangent(y) is None
    finally:
        fwAD.exit_dual_level()

    @fwAD.dual_level()
    def decorated():
        return tangent(fwAD.make_dual(x, t))
    close(decorated(), t)
    with pytest.raises(ZeroDivisionError), fwAD.dual_level():
        1 / 0
    with pytest.raises(RuntimeError, match="no level exists"):
        fwAD.make_dual(x, t)                                    # exited despite the error


def test_fast_paths_stand_aside_only_while_a_level_is_active():
    from microtensor._C import dispatch
    x = t64(mt, X)
    seen = []
    dispatch.set_forward_ad(lambda op, args, kwargs: seen.append(op.name) or NotImplemented)
    try:
        (x + x).sum()
        x[1:].t()
    finally:
        dispatch.set_forward_ad(None)
    assert seen == ["add", "sum", "slice", "t"] or seen[:2] == ["add", "sum"], seen
    with fwAD.dual_level():
        fwAD.make_dual(x, t64(mt, T))
    assert fwAD._current_level == -1 and not fwAD._tangents


def test_errors():
    def program(lib, fw):
        x, t = t64(lib, X), t64(lib, T)
        messages = []

        def error(kind, fn):
            with pytest.raises(kind) as info:
                fn()
            messages.append(str(info.value))
        error(RuntimeError, lambda: fw.make_dual(x, t))
        with fw.dual_level():
            error(RuntimeError, fw.enter_dual_level)
            error(RuntimeError, lambda: fw.make_dual(x, t[:2]))
            error(ValueError, lambda: fw.make_dual(x.long(), t))
            error(ValueError, lambda: fw.make_dual(x, t.long()))
            d = fw.make_dual(x, t)
            error(RuntimeError, lambda: fw.make_dual(d, t))
            error(RuntimeError, lambda: fw.make_dual(x, t, level=1))
            error(RuntimeError, lambda: fw.unpack_dual(d, level=1))
            error(NotImplementedError, lambda: lib.sin(d, out=lib.empty(4, 3,
                                                                        dtype=lib.float64)))
            error(RuntimeError, lambda: fw.exit_dual_level(level=5))
            error(TypeError, lambda: fw.unpack_dual(np.zeros(3)))
        error(RuntimeError, fw.exit_dual_level)
        return [np.array([len(m) > 0 for m in messages])]
    both(program)
    x, t = t64(mt, X), t64(mt, T)
    with pytest.raises(RuntimeError, match="different size than that of the original Tensor"):
        with fwAD.dual_level():
            fwAD.make_dual(x, t[:2])
    with pytest.raises(NotImplementedError, match="sin_out that does not support it because "
                                                  "it is an out= function"):
        with fwAD.dual_level():
            mt.sin(fwAD.make_dual(x, t), out=mt.empty(4, 3, dtype=mt.float64))
    with pytest.raises(RuntimeError, match="Nested forward mode AD is not supported"):
        with fwAD.dual_level(), fwAD.dual_level():
            pass


def test_a_refused_call_changes_no_tangent():
    x, t = t64(mt, X), t64(mt, T)
    with fwAD.dual_level():
        d = fwAD.make_dual(x.clone(), t.clone())
        with pytest.raises(RuntimeError):
            d.add_(mt.ones(5, dtype=mt.float64))
        close(tangent(d), t)


# ------------------------------------------------------------------ grad mode, layout

def test_tangents_ignore_grad_mode_and_follow_the_tangent_as_given():
    def program(lib, fw):
        x = t64(lib, X)
        t = t64(lib, T).t().contiguous().t()         # column-major: copied to x's layout
        with fw.dual_level():
            d = fw.make_dual(x, t)
            kept = fw.unpack_dual(fw.make_dual(t64(lib, X), t64(lib, T))).tangent
            same = np.array([fw.unpack_dual(d).tangent is t, kept is not None,
                             tuple(fw.unpack_dual(d).tangent.stride()) == tuple(x.stride())])
            with lib.no_grad():
                y = (d * d).sum(0)
            with lib.inference_mode():
                z = d.exp()
            return [same, fw.unpack_dual(y).tangent, fw.unpack_dual(z).tangent]
    both(program)


def test_primal_is_a_view_without_tangent():
    def program(lib, fw):
        with fw.dual_level():
            d = fw.make_dual(t64(lib, X), t64(lib, T))
            y = d.sin()
            primal, tan = fw.unpack_dual(y)
            flags = np.array([primal._base is y, fw.unpack_dual(primal).tangent is None,
                              fw.unpack_dual(primal[1:]).tangent is None,
                              fw.unpack_dual(primal.t()).tangent is None])
            return [flags, primal, tan]
    both(program)


# ------------------------------------------------------------------ views and in-place

def test_tangent_of_a_view_is_a_view_of_the_tangent():
    def program(lib, fw):
        x, t = t64(lib, X), t64(lib, T)
        with fw.dual_level():
            d = fw.make_dual(x.clone(), t.clone())
            v = d[1:].t()
            v.mul_(3)                        # in place on a view: the base's tangent too
            d.unsqueeze(0).squeeze(0)[0].add_(fw.make_dual(t64(lib, [1, 2, 3]),
                                                            t64(lib, [1, 1, 1])))
            w = d.transpose(0, 1)
            w.transpose_(0, 1)               # metadata in place: the tangent follows
            parts = d.unbind(1)
            return [fw.unpack_dual(d).tangent, fw.unpack_dual(v).tangent,
                    fw.unpack_dual(w).tangent, fw.unpack_dual(parts[2]).tangent,
                    fw.unpack_dual(d.expand(2, 4, 3)).tangent,
                    fw.unpack_dual(d.as_strided((2, 2), (1, 3), 1)).tangent]
    both(program)


def test_inplace_gives_plain_tensors_tangents():
    def program(lib, fw):
        with fw.dual_level():
            dual = fw.make_dual(t64(lib, [1, 2]), t64(lib, [5, 7]))
            base = lib.zeros(2, 3, dtype=lib.float64)
            early = base[:, 1:]              # taken before the base has a tangent
            base[:, 0] = dual                # in place on a view of a plain tensor
            plain = t64(lib, [1, 1])
            plain.mul_(dual)                 # in place on a plain tensor with a dual
            noisy = dual.clone()
            noisy.uniform_()                 # no derivative: tangent zero
            filled = dual.clone().fill_(2.0)
            return [fw.unpack_dual(base).tangent, fw.unpack_dual(early).tangent,
                    fw.unpack_dual(plain).tangent, fw.unpack_dual(noisy).tangent,
                    fw.unpack_dual(filled).tangent, fw.unpack_dual(dual).tangent]
    both(program)


def test_inplace_writes_the_given_tangent():
    x, t = t64(mt, X), t64(mt, T)
    with fwAD.dual_level():
        tan = t.clone()
        d = fwAD.make_dual(x.clone(), tan)
        d.sin_()
        assert tangent(d) is tan                      # updated in place, as in PyTorch
        close(tan, np.cos(X) * T)
        c = d.clone()
        assert tangent(c)._storage is not tan._storage   # not an alias of the input's


# ------------------------------------------------------------------ reverse mode

def test_reverse_mode_through_tangents_and_primals():
    def program(lib, fw):
        x = t64(lib, X, requires_grad=True)
        t = t64(lib, T, requires_grad=True)
        with fw.dual_level():
            d = fw.make_dual(x, t)
            primal, tan = fw.unpack_dual((d * d).sin() @ t64(lib, W))
            flags = np.array([d.requires_grad, tan.requires_grad, primal.requires_grad])
            (tan.sum() + primal.sum()).backward()
        return [flags, x.grad, t.grad]
    both(program)


def test_forward_over_reverse_hessian_vector_product():
    def program(lib, fw):
        p = t64(lib, X, requires_grad=True)
        with fw.dual_level():
            d = fw.make_dual(p, t64(lib, T))
            loss = ((d @ t64(lib, W)).tanh() ** 2).sum() + (d ** 3).sum()
            grad, = lib.autograd.grad(loss, p, create_graph=True)
            return [fw.unpack_dual(grad).tangent]
    hvp = both(program)[0]
    f = lambda x: ((x @ t64(mt, W)).tanh() ** 2).sum() + (x ** 3).sum()   # noqa: E731
    _, expected = mt.func.jvp(mt.func.grad(f), (t64(mt, X),), (t64(mt, T),))
    close(hvp, expected)


# ------------------------------------------------------------------ vmap

def _f(x, w):
    return ((x @ w).tanh() * x.sum()).softmax(-1)


def _dual_jvp(x, t):
    with fwAD.dual_level():
        return tangent(_f(fwAD.make_dual(x, t), t64(mt, W)))


def test_vmap_over_make_dual():
    x, t = t64(mt, X), t64(mt, T)
    loop = mt.stack([_dual_jvp(x[i], t[i]) for i in range(4)])
    close(mt.func.vmap(_dual_jvp)(x, t), loop)
    close(mt.func.vmap(_dual_jvp, in_dims=(None, 0))(x[0], t),      # jacfwd's pattern
          mt.stack([_dual_jvp(x[0], t[i]) for i in range(4)]))
    with fwAD.dual_level():                                          # the level outside
        inner = mt.func.vmap(lambda a, b: tangent(_f(fwAD.make_dual(a, b), t64(mt, W))))
        close(inner(x, t), loop)
    if torch is not None:
        expected = torch.func.vmap(lambda a, b: torch.func.jvp(
            lambda y: _f(y, t64(torch, W)), (a,), (b,))[1])(t64(torch, X), t64(torch, T))
        close(loop, expected)


# ------------------------------------------------------------------ autograd.Function

def test_custom_function_jvp():
    def program(lib, fw):
        class NoJvp(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2

        class Scaled(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                ctx.save_for_forward(x)
                ctx.k = k
                return x.exp() * k

            @staticmethod
            def backward(ctx, g):
                return g, None

            @staticmethod
            def jvp(ctx, t, k_t):                  # deliberately not exp's derivative
                x, = ctx.saved_tensors
                return 3 * t * x.exp() * ctx.k

        x = t64(lib, [0.0, 1.0], requires_grad=True)
        with fw.dual_level():
            d = fw.make_dual(x, t64(lib, [1.0, 2.0]))
            with pytest.raises(NotImplementedError, match="must implement the jvp function"):
                NoJvp.apply(d)
            out = Scaled.apply(d, 2.0)
            return [fw.unpack_dual(out).tangent, fw.unpack_dual(NoJvp.apply(x)).tangent]
    both(program)


def test_repr_shows_the_tangent():
    def program(lib, fw):
        with fw.dual_level():
            d = fw.make_dual(t64(lib, [1.0, 2.0]), t64(lib, [3.0, 4.0]))
            texts = [repr(d), repr(d.float() * 2), repr(fw.unpack_dual(d).primal)]
        texts.append(repr(d))
        return [text.replace("microtensor.", "torch.") for text in texts]
    ours = program(mt, fwAD)
    if torch is not None:
        assert ours == program(torch, tfwAD)
    assert "tangent=tensor([6., 8.])" in ours[1] and "tangent" not in ours[3]


def test_dropout_tangent_follows_the_drawn_mask():
    x = mt.ones(200, dtype=mt.float64)
    with fwAD.dual_level():
        out = mt.nn.functional.dropout(fwAD.make_dual(x, mt.full((200,), 3.0,
                                                                 dtype=mt.float64)), 0.5)
        primal, tan = fwAD.unpack_dual(out)
    assert 0 < (primal == 0).sum().item() < 200
    close(tan, arr(primal) * 3.0)


IMAGE = RNG.standard_normal((2, 4, 5, 5))
IMAGE_T = RNG.standard_normal((2, 4, 5, 5))
FUNCTIONAL = {
    "relu6": lambda F, lib, x: F.relu6(x * 4),
    "softplus": lambda F, lib, x: F.softplus(x, beta=2.0),
    "elu": lambda F, lib, x: F.elu(x),
    "hardtanh": lambda F, lib, x: F.hardtanh(x * 2),
    "log_softmax": lambda F, lib, x: F.log_softmax(x, dim=1),
    "normalize": lambda F, lib, x: F.normalize(x, dim=1),
    "pad": lambda F, lib, x: F.pad(x, (1, 2, 0, 1), mode="reflect"),
    "interpolate": lambda F, lib, x: F.interpolate(x, scale_factor=2, mode="bilinear",
                                                   align_corners=False),
    "avg_pool2d": lambda F, lib, x: F.avg_pool2d(x, 2),
    "adaptive_avg_pool2d": lambda F, lib, x: F.adaptive_avg_pool2d(x, 3),
    "group_norm": lambda F, lib, x: F.group_norm(x, 2),
    "instance_norm": lambda F, lib, x: F.instance_norm(x),
    "unfold": lambda F, lib, x: F.unfold(x, 2),
    "mse_loss": lambda F, lib, x: F.mse_loss(x, x.detach() * 0.5),
    "smooth_l1_loss": lambda F, lib, x: F.smooth_l1_loss(x, x.detach().flip(0)),
    "bce_with_logits": lambda F, lib, x: F.binary_cross_entropy_with_logits(
        x, (x.detach() > 0).to(x.dtype)),
    "kl_div": lambda F, lib, x: F.kl_div(F.log_softmax(x, 1), F.softmax(x.detach(), 1),
                                         reduction="batchmean"),
    "cosine_similarity": lambda F, lib, x: F.cosine_similarity(x, x.flip(1), dim=1),
    "attention": lambda F, lib, x: F.scaled_dot_product_attention(x, x.flip(2), x),
    "conv_transpose2d": lambda F, lib, x: F.conv_transpose2d(x, x[:, :2, :3, :3].transpose(0, 1)
                                                             .contiguous().transpose(0, 1)
                                                             .reshape(4, 1, 3, 3)),
    "grid_sample": lambda F, lib, x: F.grid_sample(x, x[:, :2].permute(0, 2, 3, 1).tanh(),
                                                   align_corners=False),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_nn_functional(name):
    """Against func.jvp always, and PyTorch where it has forward formulas (not for
    scaled_dot_product_attention's CPU kernel nor grid_sample)."""
    def program(lib, fw):
        with fw.dual_level():
            out = FUNCTIONAL[name](lib.nn.functional, lib,
                                   fw.make_dual(t64(lib, IMAGE), t64(lib, IMAGE_T)))
            return [fw.unpack_dual(out).tangent]
    if name in ("attention", "grid_sample"):
        got = program(mt, fwAD)
        if torch is not None:
            with pytest.raises(NotImplementedError, match="Trying to use forward AD with"):
                program(torch, tfwAD)
    else:
        got = both(program)
    _, expected = mt.func.jvp(lambda x: FUNCTIONAL[name](mt.nn.functional, mt, x),
                              (t64(mt, IMAGE),), (t64(mt, IMAGE_T),))
    close(got[0], expected)


def test_modules_through_functional_call():
    def program(lib, fw):
        lib.manual_seed(0)
        model = lib.nn.Sequential(lib.nn.Linear(3, 5), lib.nn.Tanh(), lib.nn.Linear(5, 2))
        model.double()
        weights = {k: t64(lib, np.sin(np.arange(v.numel())).reshape(tuple(v.shape)))
                   for k, v in model.named_parameters()}
        for v in model.parameters():
            v.requires_grad_(False)
        lstm = lib.nn.LSTM(3, 4, batch_first=True).double()
        with lib.no_grad():
            for p in lstm.parameters():
                p.copy_(t64(lib, np.cos(np.arange(p.numel())).reshape(tuple(p.shape))))
        with fw.dual_level():
            duals = {k: fw.make_dual(v, lib.ones_like(v)) for k, v in weights.items()}
            out = lib.func.functional_call(model, duals, (t64(lib, X),))
            seq, _ = lstm(fw.make_dual(t64(lib, XX), t64(lib, np.ones_like(XX))))
            return [fw.unpack_dual(out).tangent, fw.unpack_dual(seq).tangent]
    both(program)



def test_reverse_mode_through_inplace_updates_of_tangents():
    def program(lib, fw):
        p = t64(lib, [0.5, 1.0, 2.0], requires_grad=True)
        t = t64(lib, [1.0, 2.0, 3.0], requires_grad=True)
        with fw.dual_level():
            d = fw.make_dual(p * 1, t * 1)
            d[1:].mul_(d[:2].detach() + 1)
            d.sin_()
            primal, tan = fw.unpack_dual(d)
            (primal.sum() + (tan * tan).sum()).backward()
            return [primal, tan, p.grad, t.grad]
    both(program)


def test_vmap_of_a_dual():
    def program(lib, fw):
        with fw.dual_level():
            d = fw.make_dual(t64(lib, X), t64(lib, T))
            rows = lib.func.vmap(lambda a: (a.sin() * a.sum()).softmax(0))(d)
            columns = lib.func.vmap(lambda a: a.exp(), in_dims=1, out_dims=1)(d)
            summed = lib.func.vmap(lambda a: {"s": a.sum(), "p": a.prod()})(d)
            return [fw.unpack_dual(rows).tangent, fw.unpack_dual(columns).tangent,
                    fw.unpack_dual(summed["s"]).tangent, fw.unpack_dual(summed["p"]).tangent]
    both(program)
