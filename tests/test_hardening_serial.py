"""Serialization and the boundaries where data could be lost silently: ``pickle``,
``copy.copy`` and ``copy.deepcopy`` of tensors, parameters and modules; ``from_numpy``
aliasing or refusing (never copying); ``Module`` buffers and ``Sequential`` indexing.
Each behaviour is compared with PyTorch when it is installed."""
import copy
import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import microtensor as mt
from microtensor import nn
from test_cuda import dev  # noqa: F401 - the "cuda" fixture: fake CuPy, and the GPU if present

try:
    import torch
except ImportError:
    torch = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")

DTYPES = ["float32", "float64", "int64", "int32", "bool"]


def _roundtrip(kind, obj):
    if kind == "deepcopy":
        return copy.deepcopy(obj)
    return pickle.loads(pickle.dumps(obj, protocol=int(kind[len("pickle"):])))


KINDS = ["deepcopy"] + [f"pickle{p}" for p in range(pickle.HIGHEST_PROTOCOL + 1)]


@st.composite
def _geometries(draw):
    """A storage length and a view of it: sizes (zero-size included), strides (zero
    included), an offset, all inside the storage."""
    ndim = draw(st.integers(0, 3))
    sizes = tuple(draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    strides = tuple(draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    offset = draw(st.integers(0, 4))
    extent = offset + 1 + sum((n - 1) * s for n, s in zip(sizes, strides)) \
        if all(sizes) else offset
    return extent + draw(st.integers(0, 3)), sizes, strides, offset


def _make(lib, dtype, geometry, requires_grad):
    """The same base and view in microtensor or torch (a leaf view when requiring grad)."""
    length, sizes, strides, offset = geometry
    base = lib.arange(length).to(getattr(lib, dtype))
    view = base.as_strided(sizes, strides, offset)
    if requires_grad:
        view.requires_grad_()
    return base, view


def _facts(t):
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset(), str(t.dtype).split(".")[1],
            t.requires_grad, t.is_leaf, t.untyped_storage().nbytes(),
            t.detach().tolist())


# ------------------------------------------------------------ tensors: pickle, deepcopy

@requires_torch
@settings(max_examples=150, deadline=None)
@given(dtype=st.sampled_from(DTYPES), geometry=_geometries(), requires_grad=st.booleans(),
       kind=st.sampled_from(KINDS))
def test_pickle_and_deepcopy_keep_everything_pytorch_keeps(dtype, geometry, requires_grad,
                                                           kind):
    requires_grad = requires_grad and dtype.startswith("float")
    _, ours = _make(mt, dtype, geometry, requires_grad)
    _, theirs = _make(torch, dtype, geometry, requires_grad)
    copied = _roundtrip(kind, ours)
    assert type(copied) is mt.Tensor
    assert _facts(copied) == _facts(_roundtrip(kind, theirs)) == _facts(ours)
    assert copied.untyped_storage() is not ours.untyped_storage()
    assert copied._version == 0 and copied.grad_fn is None


@requires_torch
@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(["float32", "float64", "int64"]), geometry=_geometries(),
       kind=st.sampled_from(KINDS))
def test_views_copied_together_stay_views_of_one_new_storage(dtype, geometry, kind):
    base, view = _make(mt, dtype, geometry, False)
    new_base, new_view = _roundtrip(kind, (base, view))
    assert new_view.untyped_storage() is new_base.untyped_storage()
    assert new_base.untyped_storage() is not base.untyped_storage()
    if kind == "deepcopy":   # PyTorch's deepcopy shares too (its plain pickle does not)
        theirs = _make(torch, dtype, geometry, False)
        assert [_facts(t) for t in (new_base, new_view)] == \
            [_facts(t) for t in copy.deepcopy(theirs)]
    if view.numel():
        new_view[(0,) * view.dim()] = 7
        position = view.storage_offset()
        assert new_base[position].item() == 7          # the write reaches the new base
        assert base[position].item() == position      # and never the original


@requires_torch
def test_deepcopy_example_from_pytorch():
    for lib in (mt, torch):
        a = lib.arange(6.)
        b, w = copy.deepcopy((a, a[2:]))
        w[0] = 100
        assert b[2].item() == 100 and a[2].item() == 2


@requires_torch
@pytest.mark.parametrize("make_non_leaf", [lambda x: x * 2, lambda x: x[1:], lambda x: x.t()])
def test_deepcopy_of_a_non_leaf_raises_as_pytorch(make_non_leaf):
    for lib in (mt, torch):
        x = lib.ones(2, 2, requires_grad=True)
        with pytest.raises(RuntimeError, match=r"Only Tensors created explicitly by the user "
                                               r"\(graph leaves\) support the deepcopy"):
            copy.deepcopy(make_non_leaf(x))


@requires_torch
@pytest.mark.parametrize("kind", ["pickle2", "pickle5"])
def test_pickle_of_a_non_leaf_is_a_leaf_that_requires_grad(kind):
    results = [_roundtrip(kind, lib.ones(2, 3, requires_grad=True) * 2) for lib in (mt, torch)]
    assert _facts(results[0]) == _facts(results[1])
    assert results[0].is_leaf and results[0].requires_grad


@requires_torch
def test_grad_is_deep_copied_through_the_memo_and_not_pickled():
    for lib in (mt, torch):
        x = lib.ones(3, requires_grad=True)
        x.grad = lib.full((3,), 2.0)
        y, grad = copy.deepcopy([x, x.grad])
        assert y.grad is grad and grad is not x.grad and grad.tolist() == [2.0] * 3
        y.grad.add_(1)
        assert x.grad.tolist() == [2.0] * 3
        assert _roundtrip("pickle5", x).grad is None


@requires_torch
@pytest.mark.parametrize("requires_grad", [True, False])
@pytest.mark.parametrize("kind", KINDS + ["copy"])
def test_parameter_stays_a_parameter(requires_grad, kind):
    results = []
    for lib in (mt, torch):
        p = lib.nn.Parameter(lib.arange(6.).view(2, 3).t(), requires_grad=requires_grad)
        p.grad = lib.ones(3, 2)
        new = copy.copy(p) if kind == "copy" else _roundtrip(kind, p)
        assert type(new) is lib.nn.Parameter
        shares = new.untyped_storage().data_ptr() == p.untyped_storage().data_ptr()
        results.append((new.requires_grad, new.is_leaf, new.grad is None, shares,
                        tuple(new.shape), new.detach().tolist()))
    assert results[0] == results[1]
    assert results[0][:2] == (requires_grad, True)


@requires_torch
def test_integer_parameter_cannot_require_grad():
    for lib in (mt, torch):
        with pytest.raises(RuntimeError, match="(?i)only Tensors of floating point"):
            lib.nn.Parameter(lib.arange(3))
        assert not lib.nn.Parameter(lib.arange(3), requires_grad=False).requires_grad


@requires_torch
def test_copy_copy_shares_the_storage_as_pytorch():
    results = []
    for lib in (mt, torch):
        x = lib.arange(6.)[1:].requires_grad_()
        x.grad = lib.ones(5)
        y = copy.copy(x)
        assert y is not x and y.data_ptr() == x.data_ptr()
        results.append(_facts(y) + (y.grad is None,))
    assert results[0] == results[1]


class Tagged(mt.Tensor):
    """A user's subclass (module level, so that pickle finds it)."""


def test_attributes_and_subclasses_survive_including_cycles():
    source = mt.arange(3.)
    tagged = Tagged.__new__(Tagged)
    tagged._dtype = source.dtype
    tagged._set_storage(source.untyped_storage(), (3,), (1,), 0)
    tagged.tag = "x"
    tagged.me = [tagged]
    for kind in KINDS + ["copy"]:
        new = copy.copy(tagged) if kind == "copy" else _roundtrip(kind, tagged)
        assert type(new) is Tagged and new.tag == "x" and new.tolist() == [0.0, 1.0, 2.0]
        assert new.me[0] is (tagged if kind == "copy" else new)


def test_a_corrupt_pickle_cannot_reach_outside_its_storage():
    rebuild, (cls, storage, offset, sizes, strides, dtype, requires_grad), _ = \
        mt.arange(4.).__reduce_ex__(2)
    with pytest.raises(RuntimeError, match="out of bounds"):
        rebuild(cls, storage, offset, (9,), strides, dtype, requires_grad)
    with pytest.raises(RuntimeError, match="invalid storage offset"):
        rebuild(cls, storage, -1, sizes, strides, dtype, requires_grad)


@pytest.mark.parametrize("kind", ["deepcopy", "pickle5"])
def test_device_tensors_copy_to_their_device_and_stay_views(dev, kind):
    base = mt.arange(6.0, device=dev)
    view = base[2:].requires_grad_()
    new_base, new_view = _roundtrip(kind, (base, view))
    assert new_base.device == base.device and new_view.device == view.device
    assert new_view.untyped_storage() is new_base.untyped_storage()
    assert (new_view.storage_offset(), new_view.requires_grad) == (2, True)
    new_base[2] = 100
    assert new_view.detach().cpu().tolist() == [100.0, 3.0, 4.0, 5.0]
    assert base.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


# ------------------------------------------------------------ modules: deepcopy and train

def _train_copy_only(model, make_input):
    twin = copy.deepcopy(model)
    before = [p.detach().clone() for p in model.parameters()]
    assert [name for name, _ in twin.named_parameters()] == \
        [name for name, _ in model.named_parameters()]
    for p, q in zip(model.parameters(), twin.parameters()):
        assert type(q) is nn.Parameter and q.requires_grad and q.is_leaf
        assert q.untyped_storage() is not p.untyped_storage()
    opt = mt.optim.SGD(twin.parameters(), lr=0.5)
    twin(make_input()).pow(2).sum().backward()
    opt.step()
    assert all(q.grad is not None for q in twin.parameters())
    assert all(p.grad is None for p in model.parameters())
    assert all(mt.equal(b, p) for b, p in zip(before, model.parameters()))
    assert all(not mt.equal(b, q) for b, q in zip(before, twin.parameters()))


def test_deep_copied_linear_trains_and_leaves_the_original_alone():
    _train_copy_only(nn.Linear(3, 2), lambda: mt.randn(4, 3))


def test_deep_copied_model_of_several_layers_trains():
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 5), nn.ReLU(),
                          nn.Linear(5, 1))
    _train_copy_only(model, lambda: mt.randn(6, 3))


def test_pickled_model_keeps_parameters_and_values():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    model.register_buffer("steps", mt.tensor([3]))
    new = pickle.loads(pickle.dumps(model))
    assert [type(p) for p in new.parameters()] == [nn.Parameter] * 4
    x = mt.randn(2, 3)
    assert mt.equal(new(x), model(x))
    assert {k: v.tolist() for k, v in new.state_dict().items()} == \
        {k: v.tolist() for k, v in model.state_dict().items()}


# ------------------------------------------------------------ from_numpy: alias or refuse

def _structured(n=4):
    return np.zeros(n, dtype=[("x", "f4"), ("y", "f8")])


def _read_only():
    arr = np.arange(4.0)
    arr.flags.writeable = False
    return arr


ALIASABLE = {
    "contiguous": lambda: np.arange(6.0).reshape(2, 3),
    "transposed": lambda: np.arange(6, dtype=np.int64).reshape(2, 3).T,
    "field at a multiple stride": lambda: _structured()["x"],          # stride 12 = 3 * 4
    "aligned field": lambda: np.zeros(4, dtype=[("x", "f4"), ("y", "f4")])["y"],
    "stepped": lambda: np.arange(10, dtype=np.int32)[1::3],
    "zero stride": lambda: np.broadcast_to(np.arange(3.0), (2, 3)),
    "0-d": lambda: np.array(5.0),
    "bool": lambda: np.zeros(3, dtype=bool),
    "zero-size": lambda: np.zeros((0, 3)),
    "read-only": _read_only,
}

REFUSED = {
    "field at another stride": (lambda: _structured()["y"], "not a multiple of the element"),
    "2-d field": (lambda: np.zeros((3, 2), dtype=[("x", "f4"), ("y", "f8")])["y"],
                  "not a multiple of the element"),
    "negative stride": (lambda: np.arange(4.0)[::-1], "At least one stride in the given numpy "
                                                      "array is negative"),
    "byte-swapped": (lambda: np.arange(3, dtype=">f4"), "byte order different from the native"),
    "byte-swapped int": (lambda: np.arange(3, dtype=">i8"), "byte order different"),
}


@requires_torch
@pytest.mark.parametrize("name", list(ALIASABLE))
def test_from_numpy_aliases_as_pytorch(name):
    arr = ALIASABLE[name]()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = mt.from_numpy(arr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # PyTorch's own read-only warning
        expected = torch.from_numpy(ALIASABLE[name]())
    assert (tuple(t.shape), str(t.dtype).split(".")[1], t.tolist()) == \
        (tuple(expected.shape), str(expected.dtype).split(".")[1], expected.tolist())
    assert [w.category for w in caught] == ([UserWarning] if not arr.flags.writeable else [])
    if arr.size:
        assert t.data_ptr() == arr.ctypes.data
        assert np.shares_memory(t.numpy(), arr)
    if arr.flags.writeable and arr.size:
        first, last = (0,) * arr.ndim, (-1,) * arr.ndim
        arr[first] = 42                       # NumPy's writes reach the tensor
        assert t[first].item() == arr[first] != 0
        t[last] = 7                           # and the tensor's reach NumPy
        assert arr[last] == t[last].item() != 0


def test_from_numpy_of_a_structured_field_writes_through():
    a = _structured()
    x = mt.from_numpy(a["x"])
    x[1] = 3.5
    x.add_(1)
    assert a["x"].tolist() == [1.0, 4.5, 1.0, 1.0]
    assert a["y"].tolist() == [0.0] * 4                 # the neighbouring field is untouched


def test_from_numpy_of_a_read_only_array_warns_and_refuses_writes():
    arr = _read_only()
    with pytest.warns(UserWarning, match="not writable"):
        t = mt.from_numpy(arr)
    with pytest.raises((RuntimeError, ValueError), match="read-only"):
        t.add_(1)
    assert arr.tolist() == [0.0, 1.0, 2.0, 3.0]


@requires_torch
@pytest.mark.parametrize("name", list(REFUSED))
@pytest.mark.parametrize("fn", ["from_numpy", "as_tensor"])
def test_from_numpy_refuses_what_it_cannot_alias_as_pytorch(name, fn):
    make, message = REFUSED[name]
    with pytest.raises(ValueError, match=message):
        getattr(torch, fn)(make())
    with pytest.raises(ValueError, match=message):
        getattr(mt, fn)(make())


def test_from_dlpack_of_a_read_only_array_aliases_without_a_warning():
    arr = _read_only()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = mt.from_dlpack(arr)
    assert t.data_ptr() == arr.ctypes.data


# ------------------------------------------------------------ Module buffers, Sequential

def _outcome(fn):
    """What ``fn()`` gives, or its exception type and message (PyTorch's names aside)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        return type(e).__name__, str(e).replace("torch", "microtensor")


def _keys(m):
    return list(m.state_dict()), [n for n, _ in m.named_buffers()], sorted(m._buffers), \
        sorted(m._non_persistent_buffers_set)


BUFFER_SCENARIOS = {
    "non-persistent buffer stays out of state_dict": lambda lib, m: (
        m.register_buffer("running", lib.zeros(2), persistent=False), _keys(m)),
    "reassigning a buffer keeps it a buffer": lambda lib, m: (
        setattr(m, "steps", lib.ones(3)), "steps" in m.__dict__, _keys(m), m.steps.tolist()),
    "reassigning a non-persistent buffer keeps it non-persistent": lambda lib, m: (
        m.register_buffer("running", lib.zeros(2), persistent=False),
        setattr(m, "running", lib.ones(5)), _keys(m), m.running.tolist()),
    "None buffer stays registered, out of state_dict": lambda lib, m: (
        setattr(m, "steps", None), m.steps, _keys(m),
        setattr(m, "steps", lib.ones(1)), _keys(m)),
    "deleting a buffer": lambda lib, m: (
        m.register_buffer("running", lib.zeros(2), persistent=False), delattr(m, "running"),
        delattr(m, "steps"), _keys(m), hasattr(m, "steps"), _outcome(lambda: m.steps)),
    "non-tensor into a buffer is refused and changes nothing": lambda lib, m: (
        _outcome(lambda: setattr(m, "steps", 3)), m.steps.tolist(), _keys(m)),
    "persistent again after re-registering": lambda lib, m: (
        m.register_buffer("running", lib.zeros(2), persistent=False),
        m.register_buffer("running", lib.zeros(2)), _keys(m)),
    "a Module or Parameter replaces a buffer": lambda lib, m: (
        m.register_buffer("running", lib.zeros(2), persistent=False),
        setattr(m, "running", lib.nn.ReLU()), setattr(m, "steps", lib.nn.Parameter(lib.ones(1))),
        _keys(m), sorted(m._modules), sorted(m._parameters)),
    "a plain tensor attribute is not a buffer": lambda lib, m: (
        setattr(m, "plain", lib.ones(1)), _keys(m),
        _outcome(lambda: m.register_buffer("plain", lib.ones(1)))),
    "bad buffer names": lambda lib, m: [
        _outcome(lambda: m.register_buffer(name, lib.ones(1)))
        for name in ("a.b", "", 3, "in_features", "weight")],
    "bad buffer values": lambda lib, m: _outcome(lambda: m.register_buffer("z", [1.0])),
    "parameters: a tensor is refused, None is kept": lambda lib, m: (
        _outcome(lambda: setattr(m, "weight", lib.zeros(3, 2))),
        _outcome(lambda: m.register_parameter("q", lib.zeros(1))),
        _outcome(lambda: m.register_parameter("a.b", lib.nn.Parameter(lib.zeros(1)))),
        setattr(m, "bias", None), m.bias, _keys(m)),
    "child modules: a tensor is refused, None is kept": lambda lib, m: (
        setattr(m, "act", lib.nn.ReLU()),
        _outcome(lambda: setattr(m, "act", lib.zeros(1))),
        setattr(m, "act", None), m.act, list(m.children()) == [], _keys(m)),
}


@requires_torch
@pytest.mark.parametrize("name", list(BUFFER_SCENARIOS))
def test_module_buffers_as_pytorch(name):
    outcomes = []
    for lib in (mt, torch):
        m = lib.nn.Linear(2, 3)
        m.register_buffer("steps", lib.zeros(1, dtype=lib.int64))
        outcomes.append(BUFFER_SCENARIOS[name](lib, m))
    assert outcomes[0] == outcomes[1]


@requires_torch
def test_state_dict_order_and_tied_weights_as_pytorch():
    results = []
    for lib in (mt, torch):
        model = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Linear(2, 2))
        model.register_buffer("top", lib.zeros(1))
        model.register_buffer("scratch", lib.zeros(1), persistent=False)
        model[1].weight = model[0].weight
        results.append((list(model.state_dict()), list(model.state_dict(prefix="p.")),
                        len(list(model.parameters())),
                        model.state_dict(keep_vars=True)["0.weight"] is model[0].weight))
    assert results[0] == results[1]


@requires_torch
def test_traversal_lists_shared_modules_and_tensors_once_as_pytorch():
    results = []
    for lib in (mt, torch):
        shared = lib.nn.Linear(1, 1)
        model = lib.nn.Sequential(shared, lib.nn.ReLU(), shared)
        scale = lib.ones(1)
        model.register_buffer("scale", scale)
        model.register_buffer("alias", scale)
        model.register_buffer("unset", None)
        results.append([
            [n for n, _ in model.named_modules()],
            [n for n, _ in model.named_modules(remove_duplicate=False)],
            [n for n, _ in model.named_children()], len(list(model.children())),
            len(list(model.modules())),
            [n for n, _ in model.named_parameters()],
            [n for n, _ in model.named_parameters(remove_duplicate=False)],
            [n for n, _ in model.named_buffers()],
            [n for n, _ in model.named_buffers(remove_duplicate=False)],
            [n for n, _ in model.named_buffers(prefix="m", recurse=False)],
            list(model.state_dict())])
    assert results[0] == results[1]


@requires_torch
def test_load_state_dict_ignores_non_persistent_buffers_and_refuses_as_pytorch():
    outcomes = []
    for lib in (mt, torch):
        m = lib.nn.Linear(2, 2)
        m.register_buffer("scratch", lib.zeros(2), persistent=False)
        source = lib.nn.Linear(2, 2)
        keys = m.load_state_dict(source.state_dict())
        loaded = lib.equal(m.weight, source.weight)
        extra = _outcome(lambda: m.load_state_dict({**source.state_dict(),
                                                    "scratch": lib.ones(2)}))
        partial = tuple(m.load_state_dict({"weight": source.weight}, strict=False))
        outcomes.append((tuple(keys), loaded, extra, partial))
    assert outcomes[0] == outcomes[1]


def test_refused_load_state_dict_changes_nothing():
    m = nn.Linear(2, 2)
    before = [p.detach().clone() for p in m.parameters()]
    bad = {"weight": mt.ones(2, 2), "bias": mt.ones(3)}
    with pytest.raises(RuntimeError, match="size mismatch for bias"):
        m.load_state_dict(bad)
    with pytest.raises(RuntimeError, match='Unexpected key\\(s\\) in state_dict: "extra"'):
        m.load_state_dict({"weight": mt.ones(2, 2), "bias": mt.ones(2), "extra": mt.ones(1)})
    assert all(mt.equal(b, p) for b, p in zip(before, m.parameters()))


def _sequential(lib):
    return lib.nn.Sequential(lib.nn.Linear(1, 2), lib.nn.ReLU(), lib.nn.Linear(2, 3),
                             lib.nn.Tanh())


def _described(seq):
    return type(seq).__name__, [(k, type(m).__name__) for k, m in seq._modules.items()]


SEQUENTIAL_SCENARIOS = {
    "slices are Sequentials keeping names and modules": lambda lib, s: [
        _described(s[index]) + (all(s._modules[k] is m for k, m in s[index]._modules.items()),)
        for index in (slice(0, 2), slice(1, None), slice(None, None, 2), slice(5, None),
                      slice(None, None, -1))],
    "integer indices": lambda lib, s: [
        _outcome(lambda i=i: type(s[i]).__name__)
        for i in (0, 3, -1, -4, 4, -5, "0", 1.0, lib.tensor(1))],
    "len and iteration": lambda lib, s: (len(s), [type(m).__name__ for m in s]),
    "setitem": lambda lib, s: (s.__setitem__(1, lib.nn.Sigmoid()),
                               s.__setitem__(-1, lib.nn.ReLU()), _described(s),
                               _outcome(lambda: s.__setitem__(4, lib.nn.ReLU()))),
    "delitem renumbers": lambda lib, s: (s.__delitem__(0), _described(s),
                                         s.__delitem__(slice(0, 2)), _described(s),
                                         _outcome(lambda: s.__delitem__(5))),
    "append": lambda lib, s: (s.append(lib.nn.ReLU()) is s, _described(s)),
    "named modules": lambda lib, s: [
        _described(seq[1:]) + (type(seq[1]).__name__,) for seq in [lib.nn.Sequential(
            __import__("collections").OrderedDict([("a", lib.nn.ReLU()),
                                                   ("b", lib.nn.Tanh())]))]],
    "non-modules refused": lambda lib, s: _outcome(lambda: lib.nn.Sequential(lib.nn.ReLU(), 3)),
}


@requires_torch
@pytest.mark.parametrize("name", list(SEQUENTIAL_SCENARIOS))
def test_sequential_indexing_as_pytorch(name):
    outcomes = [SEQUENTIAL_SCENARIOS[name](lib, _sequential(lib)) for lib in (mt, torch)]
    assert outcomes[0] == outcomes[1]


def test_sliced_sequential_runs_the_first_layers():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    x = mt.randn(5, 3)
    assert mt.equal(model[0:2](x), model[1](model[0](x)))
    assert mt.equal(model[:](x), model(x))
