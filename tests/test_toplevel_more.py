"""PyTorch's remaining top-level names: settings and queries (threads, determinism,
matmul precision, warn-always, denormals, anomaly and inference mode, ``typename``,
``compile``, ``autocast``), factories (``asarray``, ``frombuffer``, ``randint_like``,
``range``, ``empty_permuted``), functions (``msort``, ``row_stack``, ``gradient``,
``histogram``, ``histogramdd``, ``constant_pad_nd``) and the aten-signature aliases of
nn.functional's ops; against torch where PyTorch is installed."""
import warnings

import numpy as np
import pytest

import microtensor as mt
from microtensor import _settings

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional "
                                                       "test oracle)")


def outcome(fn):
    """What a call does: ("ok", value) or (exception type name, message)."""
    try:
        return "ok", fn()
    except Exception as exc:   # noqa: BLE001  (compared with PyTorch's)
        return type(exc).__name__, str(exc)


def same_outcome(mt_call, torch_call, compare_message=True):
    ours, theirs = outcome(mt_call), outcome(torch_call)
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] != "ok" and compare_message:
        assert ours[1] == theirs[1]
    return ours


# ---------------------------------------------------------------- settings and queries

@pytest.fixture
def restore_settings():
    """Put the global settings (microtensor's and PyTorch's) back after a test."""
    saved = (dict(_settings._threads), dict(_settings._deterministic),
             dict(_settings._matmul_precision), dict(_settings._warn_always),
             dict(_settings._autocast_dtypes), dict(_settings._autocast_cache),
             mt.get_default_dtype())
    torch_saved = torch and (torch.get_num_threads(), torch.get_float32_matmul_precision(),
                             torch.is_warn_always_enabled(), torch.get_default_dtype())
    yield
    for target, value in zip((_settings._threads, _settings._deterministic,
                              _settings._matmul_precision, _settings._warn_always,
                              _settings._autocast_dtypes, _settings._autocast_cache), saved):
        target.clear()
        target.update(value)
    mt.set_default_dtype(saved[-1])
    mt.set_default_device(None)
    mt.set_anomaly_enabled(False)
    mt.set_flush_denormal(False)
    if torch is not None:
        torch.set_num_threads(torch_saved[0])
        torch.set_float32_matmul_precision(torch_saved[1])
        torch.set_warn_always(torch_saved[2])
        torch.set_default_dtype(torch_saved[3])
        torch.use_deterministic_algorithms(False)
        torch.set_anomaly_enabled(False)
        torch.set_flush_denormal(False)


@needs_torch
@pytest.mark.parametrize("value", [3, 1, 0, -2, 2.0, "2", True])
def test_set_num_threads_as_pytorch(restore_settings, value):
    ours = same_outcome(lambda: mt.set_num_threads(value), lambda: torch.set_num_threads(value))
    if ours[0] == "ok":
        assert mt.get_num_threads() == torch.get_num_threads() == value


def test_interop_threads_are_set_once(restore_settings):
    _settings._threads["interop"] = None
    with pytest.raises(RuntimeError, match="positive integer"):
        mt.set_num_interop_threads(0)
    mt.set_num_interop_threads(3)
    assert mt.get_num_interop_threads() == 3
    with pytest.raises(RuntimeError, match="cannot set number of interop threads"):
        mt.set_num_interop_threads(2)
    assert mt.get_num_interop_threads() == 3


def test_default_thread_count_follows_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert _settings._default_threads() == 5
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")
    assert _settings._default_threads() >= 1


@needs_torch
@pytest.mark.parametrize("steps", [
    [("use", True, False)], [("use", True, True)], [("use", 1, False)],
    [("debug", "warn")], [("debug", "error")], [("debug", 2), ("debug", "default")],
    [("debug", "bad")], [("debug", 3)], [("debug", 1.0)], [("debug", True)],
])
def test_deterministic_settings_as_pytorch(restore_settings, steps):
    for lib in (mt, torch):
        lib.use_deterministic_algorithms(False)
    for step in steps:
        if step[0] == "use":
            same_outcome(lambda: mt.use_deterministic_algorithms(step[1], warn_only=step[2]),
                         lambda: torch.use_deterministic_algorithms(step[1], warn_only=step[2]),
                         compare_message=False)
        else:
            same_outcome(lambda: mt.set_deterministic_debug_mode(step[1]),
                         lambda: torch.set_deterministic_debug_mode(step[1]))
        for query in ("are_deterministic_algorithms_enabled",
                      "is_deterministic_algorithms_warn_only_enabled",
                      "get_deterministic_debug_mode"):
            assert getattr(mt, query)() == getattr(torch, query)(), query


def test_deterministic_mode_changes_no_result(restore_settings):
    index = mt.tensor([0, 1, 0, 2, 1, 0])
    source = mt.arange(6.0)
    before = mt.zeros(3).index_add(0, index, source)
    mt.use_deterministic_algorithms(True)
    assert mt.equal(mt.zeros(3).index_add(0, index, source), before)


@needs_torch
@pytest.mark.parametrize("precision", ["high", "medium", "highest", "foo"])
def test_float32_matmul_precision_as_pytorch(restore_settings, precision):
    mt.set_float32_matmul_precision("high")
    torch.set_float32_matmul_precision("high")
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        mt.set_float32_matmul_precision(precision)
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        torch.set_float32_matmul_precision(precision)
    assert mt.get_float32_matmul_precision() == torch.get_float32_matmul_precision()
    assert len(ours) == len(theirs)
    if ours:
        # the gist (PyTorch's message lacks a space after "current")
        assert str(ours[0].message).split(";")[0] == str(theirs[0].message).split(";")[0]


@needs_torch
@pytest.mark.parametrize("value", [True, False, 1])
def test_warn_always_as_pytorch(restore_settings, value):
    same_outcome(lambda: mt.set_warn_always(value), lambda: torch.set_warn_always(value))
    assert mt.is_warn_always_enabled() == torch.is_warn_always_enabled()


@needs_torch
def test_flush_denormal_flushes_on_this_thread(restore_settings):
    tiny = np.float32(1e-39)                 # a float32 denormal
    x, t = mt.tensor([tiny]), torch.tensor([tiny])
    assert (x * 1.0).item() != 0.0
    supported = mt.set_flush_denormal(True)
    assert supported == torch.set_flush_denormal(True)
    if supported:
        assert (x * 1.0).item() == 0.0 == (t * 1.0).item()
    assert mt.set_flush_denormal(False) == supported
    assert (x * 1.0).item() == pytest.approx(1e-39, rel=1e-6)
    same_outcome(lambda: mt.set_flush_denormal(1), lambda: torch.set_flush_denormal(1))


@needs_torch
def test_set_anomaly_enabled_as_pytorch(restore_settings):
    for args in [(True,), (True, False), (False,)]:
        mt.set_anomaly_enabled(*args)
        torch.set_anomaly_enabled(*args)
        assert (mt.is_anomaly_enabled(), mt.is_anomaly_check_nan_enabled()) == \
            (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
    same_outcome(lambda: mt.set_anomaly_enabled(1), lambda: torch.set_anomaly_enabled(1))
    assert not mt.is_anomaly_enabled()


def test_set_anomaly_enabled_records_forward_traces(restore_settings):
    mt.set_anomaly_enabled(True)
    x = mt.ones(2, requires_grad=True)
    y = (x * 2).sum()
    assert "traceback_" in y.grad_fn.metadata
    mt.set_anomaly_enabled(False)
    assert "traceback_" not in (x * 2).sum().grad_fn.metadata


@needs_torch
def test_is_inference_mode_enabled_as_pytorch():
    def states(lib):
        seen = [lib.is_inference_mode_enabled()]
        with lib.inference_mode():
            seen.append((lib.is_inference_mode_enabled(), lib.is_grad_enabled()))
            with lib.inference_mode(False):
                seen.append((lib.is_inference_mode_enabled(), lib.is_grad_enabled()))
            with lib.no_grad():
                seen.append(lib.is_inference_mode_enabled())
            seen.append(lib.is_inference_mode_enabled())
        seen.append(lib.is_inference_mode_enabled())
        seen.append(lib.inference_mode()(lib.is_inference_mode_enabled)())
        return seen
    assert states(mt) == states(torch)


@needs_torch
def test_typename_and_is_storage_as_pytorch():
    cases = [(lambda lib: lib.zeros(2), "FloatTensor"),
             (lambda lib: lib.zeros(2, dtype=lib.int64), "LongTensor"),
             (lambda lib: lib.nn.Parameter(lib.zeros(2)), "FloatTensor")]
    for make, name in cases:
        assert mt.typename(make(mt)) == "microtensor." + name
        assert torch.typename(make(torch)) == "torch." + name
    for obj in (3, None, "s", [1], warnings.catch_warnings):
        assert mt.typename(obj) == torch.typename(obj)
    assert mt.typename(mt.nn.Linear(2, 2)) == mt.nn.Linear.__module__ + ".Linear"
    assert mt.is_storage(mt.zeros(2).untyped_storage())
    assert not mt.is_storage(mt.zeros(2)) and not mt.is_storage(3)


@needs_torch
@pytest.mark.parametrize("name", ["torch.DoubleTensor", "FloatTensor", "torch.LongTensor"])
def test_set_default_tensor_type_as_pytorch(restore_settings, name):
    """A name or a typed constructor; a non-floating type is refused and changes nothing."""
    mt.set_default_dtype(mt.float32)
    torch.set_default_dtype(torch.float32)
    ours_arg, torch_arg = (name, name) if "." in name else (getattr(mt, name),
                                                            getattr(torch, name))
    with pytest.warns(UserWarning, match="set_default_tensor_type\\(\\) is deprecated"):
        ours = outcome(lambda: mt.set_default_tensor_type(ours_arg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = outcome(lambda: torch.set_default_tensor_type(torch_arg))
    assert ours == theirs
    assert mt.zeros(1).dtype.name == str(torch.zeros(1).dtype).split(".")[1]


def test_compile_returns_the_callable():
    def f(x):
        return x * 2
    assert mt.compile(f) is f
    assert mt.compile(f, backend="eager", fullgraph=True, dynamic=False) is f
    decorated = mt.compile(mode="max-autotune")(f)
    assert decorated is f

    @mt.compile
    def g(x):
        return x + 1
    assert g(mt.ones(1)).item() == 2.0
    model = mt.nn.Linear(2, 2)
    assert mt.compile(model) is model
    with pytest.raises(RuntimeError, match="Either mode or options"):
        mt.compile(f, mode="default", options={})
    with pytest.raises(RuntimeError, match="Unrecognized mode=foo"):
        mt.compile(f, mode="foo")
    with pytest.raises(AssertionError, match="A callable function is expected"):
        mt.compile(1)
    with pytest.raises(TypeError):
        mt.compile(f, "eager")


@needs_torch
def test_compile_refuses_what_pytorch_refuses():
    for kwargs in ({"mode": "default", "options": {}}, {"mode": "foo"}):
        same_outcome(lambda: mt.compile(lambda x: x, **kwargs),
                     lambda: torch.compile(lambda x: x, **kwargs))


def test_autocast_warns_and_changes_nothing():
    x = mt.ones(2, 2)
    with pytest.warns(UserWarning, match="no autocasting.*Disabling autocast"):
        context = mt.autocast("cpu")
    with context:
        assert not mt.is_autocast_enabled("cpu")
        assert (x @ x).dtype is mt.float32
    assert context.fast_dtype is mt.bfloat16
    with pytest.warns(UserWarning, match="Disabling autocast"):
        @mt.autocast(device_type="cuda", dtype=mt.float16)
        def f(a):
            return a @ a
    assert f(x).dtype is mt.float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with mt.autocast("cpu", enabled=False):   # disabled: nothing to warn about
            pass


@needs_torch
@pytest.mark.parametrize("call", [
    lambda lib: lib.autocast("foo"), lambda lib: lib.autocast(device_type=1),
    lambda lib: lib.is_autocast_enabled("foo"), lambda lib: lib.is_autocast_enabled(),
    lambda lib: lib.is_autocast_enabled("cpu"), lambda lib: lib.is_autocast_cache_enabled(),
])
def test_autocast_queries_as_pytorch(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = outcome(lambda: call(mt)), outcome(lambda: call(torch))
    assert ours[0] == theirs[0] and (ours[0] != "ok" and ours[1] == theirs[1] or
                                     ours[0] == "ok" and (isinstance(ours[1], mt.autocast)
                                                          or ours[1] == theirs[1]))


@needs_torch
def test_autocast_dtypes_as_pytorch(restore_settings):
    for device_type in ("cpu", "cuda"):
        assert str(mt.get_autocast_dtype(device_type)).split(".")[1] == \
            str(torch.get_autocast_dtype(device_type)).split(".")[1]
    with pytest.warns(DeprecationWarning, match="get_autocast_dtype\\('cpu'\\)"):
        assert mt.get_autocast_cpu_dtype() is mt.bfloat16
    mt.set_autocast_dtype("cpu", mt.float16)
    assert mt.get_autocast_dtype("cpu") is mt.float16
    with pytest.warns(UserWarning, match="Disabling autocast"):
        mt.set_autocast_enabled("cpu", True)
    assert not mt.is_autocast_enabled("cpu")


# ---------------------------------------------------------------- factories

def pair(data):
    """The same array for microtensor and PyTorch (separate memory)."""
    return np.array(data), np.array(data)


@needs_torch
@pytest.mark.parametrize("kwargs", [
    {}, {"copy": True}, {"copy": False}, {"dtype": "float32"}, {"dtype": "float64"},
    {"dtype": "float32", "copy": False}, {"requires_grad": True}, {"copy": True,
                                                                   "requires_grad": True},
])
def test_asarray_of_a_numpy_array_as_pytorch(kwargs):
    ours_arr, torch_arr = pair(np.arange(6.0).reshape(2, 3))
    ours_kw = {k: getattr(mt, v) if k == "dtype" else v for k, v in kwargs.items()}
    torch_kw = {k: getattr(torch, v) if k == "dtype" else v for k, v in kwargs.items()}
    ours = outcome(lambda: mt.asarray(ours_arr, **ours_kw))
    theirs = outcome(lambda: torch.asarray(torch_arr, **torch_kw))
    assert ours[0] == theirs[0]
    if ours[0] != "ok":
        assert ours[1] == theirs[1]
        return
    x, t = ours[1], theirs[1]
    assert x.dtype.name == str(t.dtype).split(".")[1] and x.stride() == t.stride()
    assert x.requires_grad == t.requires_grad
    ours_arr[0, 0] = torch_arr[0, 0] = 42.0        # shared memory shows the write
    np.testing.assert_array_equal(x.detach().numpy(), t.detach().numpy())


@needs_torch
@pytest.mark.parametrize("kwargs", [
    {}, {"copy": True}, {"copy": False}, {"dtype": "float64"}, {"dtype": "float32"},
    {"dtype": "float64", "copy": False}, {"requires_grad": False},
    {"requires_grad": False, "copy": True}, {"dtype": "float64", "requires_grad": True},
])
@pytest.mark.parametrize("source_requires_grad", [True, False])
def test_asarray_of_a_tensor_as_pytorch(kwargs, source_requires_grad):
    ours_kw = {k: getattr(mt, v) if k == "dtype" else v for k, v in kwargs.items()}
    torch_kw = {k: getattr(torch, v) if k == "dtype" else v for k, v in kwargs.items()}
    x = mt.arange(4.0)[1:].requires_grad_(source_requires_grad)
    t = torch.arange(4.0)[1:].requires_grad_(source_requires_grad)
    with warnings.catch_warnings(record=True) as ours_warnings:
        warnings.simplefilter("always")
        ours = outcome(lambda: mt.asarray(x, **ours_kw))
    with warnings.catch_warnings(record=True) as torch_warnings:
        warnings.simplefilter("always")
        theirs = outcome(lambda: torch.asarray(t, **torch_kw))
    assert ours[0] == theirs[0]
    assert len(ours_warnings) == len(torch_warnings)
    if ours[0] != "ok":
        assert ours[1] == theirs[1]
        return
    y, u = ours[1], theirs[1]
    assert (y is x) == (u is t)
    assert (y.data_ptr() == x.data_ptr()) == (u.data_ptr() == t.data_ptr())
    assert (y.requires_grad, y.is_leaf, x.requires_grad) == \
        (u.requires_grad, u.is_leaf, t.requires_grad)
    assert y.storage_offset() == u.storage_offset() and y.dtype.name == \
        str(u.dtype).split(".")[1]
    nonleaf_x, nonleaf_t = x * 1, t * 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # the warning is compared above
        ours, theirs = mt.asarray(nonleaf_x, **ours_kw), torch.asarray(nonleaf_t, **torch_kw)
    assert (ours is nonleaf_x, ours.requires_grad, ours.is_leaf) == \
        (theirs is nonleaf_t, theirs.requires_grad, theirs.is_leaf)
    if u.requires_grad and not u.is_leaf:       # a copy stays differentiable
        y.sum().backward()
        u.sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())


@needs_torch
@pytest.mark.parametrize("obj", [
    [1, 2, 3], [1.0, 2, 3], 3.5, (1, 2.5), [[1, 2], [3, 4]], np.float64(2.0), True,
    [[1, 2], [3]],
])
@pytest.mark.parametrize("copy", [None, False])
def test_asarray_of_python_data_as_pytorch(obj, copy):
    ours, theirs = outcome(lambda: mt.asarray(obj, copy=copy)), \
        outcome(lambda: torch.asarray(obj, copy=copy))
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] == "ok":
        np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())
        assert ours[1].dtype.name == str(theirs[1].dtype).split(".")[1]
    else:
        assert ours[1] == theirs[1]


@needs_torch
def test_asarray_of_a_buffer_shares_memory():
    import array
    for make in (lambda: bytearray(range(8)), lambda: array.array("f", [1.0, 2.5]),
                 lambda: memoryview(bytearray(range(8)))):
        for dtype in (None, "int16", "uint8"):
            ours_buffer, torch_buffer = make(), make()
            x = mt.asarray(ours_buffer, dtype=dtype and getattr(mt, dtype))
            t = torch.asarray(torch_buffer, dtype=dtype and getattr(torch, dtype))
            np.testing.assert_array_equal(x.numpy(), t.numpy())
            x[0] = 3
            assert bytes(ours_buffer) != bytes(make())   # written through


def test_asarray_keeps_a_tensor_and_refuses_a_device_change():
    x = mt.ones(2)
    assert mt.asarray(x) is x
    assert mt.asarray(x, device="cpu") is x
    with pytest.raises(ValueError, match="can't alias tensor from device 'cpu' to 'meta'"):
        mt.asarray(x, device="meta", copy=False)
    assert mt.asarray(x, device="meta").is_meta


@needs_torch
@pytest.mark.parametrize("kwargs", [
    {"dtype": "int32"}, {"dtype": "int32", "count": 2, "offset": 4},
    {"dtype": "int32", "count": 5}, {"dtype": "int32", "offset": 3},
    {"dtype": "int32", "offset": 16}, {"dtype": "int32", "offset": -1},
    {"dtype": "int32", "count": 0}, {"dtype": "int32", "count": -2},
    {"dtype": "float64", "offset": 8}, {"dtype": "float32", "requires_grad": True},
    {"dtype": "uint8", "count": 3, "offset": 13}, {"dtype": "int16", "count": 1, "offset": 15},
])
def test_frombuffer_as_pytorch(kwargs):
    ours_kw = {k: getattr(mt, v) if k == "dtype" else v for k, v in kwargs.items()}
    torch_kw = {k: getattr(torch, v) if k == "dtype" else v for k, v in kwargs.items()}
    ours_buffer, torch_buffer = bytearray(range(16)), bytearray(range(16))
    ours = outcome(lambda: mt.frombuffer(ours_buffer, **ours_kw))
    theirs = outcome(lambda: torch.frombuffer(torch_buffer, **torch_kw))
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] != "ok":
        assert ours[1] == theirs[1]
        return
    x, t = ours[1], theirs[1]
    np.testing.assert_array_equal(x.detach().numpy(), t.detach().numpy())
    assert x.requires_grad == t.requires_grad
    ours_buffer[kwargs.get("offset", 0)] = torch_buffer[kwargs.get("offset", 0)] = 200
    np.testing.assert_array_equal(x.detach().numpy(), t.detach().numpy())


@needs_torch
def test_frombuffer_refusals_as_pytorch():
    for call in (lambda lib: lib.frombuffer([1, 2], dtype=lib.int32),
                 lambda lib: lib.frombuffer(bytearray(), dtype=lib.int32),
                 lambda lib: lib.frombuffer(bytearray(3), dtype=lib.int32),
                 lambda lib: lib.frombuffer(memoryview(bytearray(8))[::2], dtype=lib.uint8),
                 lambda lib: lib.frombuffer(bytearray(8), dtype=lib.int32,
                                            requires_grad=True)):
        ours, theirs = outcome(lambda: call(mt)), outcome(lambda: call(torch))
        assert ours[0] == theirs[0] and ours[1].lower() == theirs[1].lower()
    with pytest.raises(TypeError):
        mt.frombuffer(bytearray(8))


def test_frombuffer_of_a_read_only_buffer_warns_and_refuses_writes():
    with pytest.warns(UserWarning, match="not writable"):
        x = mt.frombuffer(b"\x01\x00\x02\x00", dtype=mt.int16)
    assert x.tolist() == [1, 2]
    with pytest.raises(Exception):
        x[0] = 5


@needs_torch
@pytest.mark.parametrize("args, kwargs", [
    ((1, 4), {}), ((1, 4, 0.5), {}), ((0, 1, 0.3), {}), ((4, 1, -1), {}), ((4, 1), {}),
    ((1, 4, 0), {}), ((1, 4), {"dtype": "int64"}), ((1, 1), {}), ((0, float("inf")), {}),
    ((1, 4), {"dtype": "bool"}), ((0, 0.9999999, 0.1), {}), ((1, 4), {"dtype": "float64"}),
    ((-3, 3, 2), {"requires_grad": True}),
])
def test_range_as_pytorch(args, kwargs):
    ours_kw = {k: getattr(mt, v) if k == "dtype" else v for k, v in kwargs.items()}
    torch_kw = {k: getattr(torch, v) if k == "dtype" else v for k, v in kwargs.items()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = outcome(lambda: mt.range(*args, **ours_kw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = outcome(lambda: torch.range(*args, **torch_kw))
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] != "ok":
        assert ours[1] == theirs[1]
        return
    assert any("torch.range is deprecated" in str(w.message) and w.category is UserWarning
               for w in caught)
    x, t = ours[1], theirs[1]
    np.testing.assert_allclose(x.detach().numpy(), t.detach().numpy(), rtol=1e-7)
    assert x.dtype.name == str(t.dtype).split(".")[1] and x.requires_grad == t.requires_grad
    assert mt.range.__name__ == "range"


@needs_torch
@pytest.mark.parametrize("size, layout", [
    ((2, 3, 4, 5), (0, 2, 3, 1)), ((2, 3), (1, 0)), ((2, 3), (1,)), ((2, 3), (1, 1)),
    ((2, 3), (0, 2)), ((2, 3), (0, -1)), ((2, -3), (0, 1)), ((2, 0, 3), (2, 1, 0)), ((), ()),
    (2, (0,)), ([4, 2, 3], [2, 0, 1]),
])
def test_empty_permuted_as_pytorch(size, layout):
    ours = same_outcome(lambda: mt.empty_permuted(size, layout),
                        lambda: torch.empty_permuted(size, layout))
    if ours[0] == "ok":
        t = torch.empty_permuted(size, layout)
        assert ours[1].shape == t.shape and ours[1].stride() == t.stride()


def test_empty_permuted_takes_the_factory_options():
    x = mt.empty_permuted((2, 3), (1, 0), dtype=mt.int64, requires_grad=False)
    assert x.dtype is mt.int64 and x.stride() == (1, 2) and not x.requires_grad
    y = mt.empty_permuted((2, 3), (1, 0), requires_grad=True)
    assert y.requires_grad and y.dtype is mt.float32 and y.is_leaf


@needs_torch
@pytest.mark.parametrize("args, kwargs", [
    ((5,), {}), ((3, 5), {}), ((5, 5), {}), ((), {"low": 2, "high": 5}), ((), {"high": 5}),
    ((5,), {"dtype": "int64"}), ((-5, 0), {"dtype": "uint8"}), ((300,), {"dtype": "uint8"}),
    ((5,), {"dtype": "bool"}), ((2,), {"dtype": "bool"}), ((5,), {"requires_grad": True}),
    ((2.5,), {}), ((-128, 128), {"dtype": "int8"}), ((-128, 127), {"dtype": "int8"}),
])
def test_randint_like_as_pytorch(args, kwargs):
    ours_kw = {k: getattr(mt, v) if k == "dtype" else v for k, v in kwargs.items()}
    torch_kw = {k: getattr(torch, v) if k == "dtype" else v for k, v in kwargs.items()}
    ours = outcome(lambda: mt.randint_like(mt.zeros(40, 30).t(), *args, **ours_kw))
    theirs = outcome(lambda: torch.randint_like(torch.zeros(40, 30).t(), *args, **torch_kw))
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] != "ok":
        if ours[0] == "RuntimeError":
            assert ours[1] == theirs[1]
        return
    x, t = ours[1], theirs[1]
    assert x.shape == t.shape and x.stride() == t.stride() and x.requires_grad == \
        t.requires_grad and x.dtype.name == str(t.dtype).split(".")[1]
    values = x.detach().numpy().astype(np.int64)
    low, high = (0, args[0]) if len(args) == 1 else args or (kwargs.get("low", 0),
                                                              kwargs["high"])
    assert values.min() >= low and values.max() < high
    assert set(np.unique(values)) == set(range(low, high)) or high - low > 50


def test_randint_like_follows_the_generator_and_vmap_randomness():
    g = mt.Generator().manual_seed(3)
    a = mt.randint_like(mt.zeros(5), 100, generator=g)
    g.manual_seed(3)
    assert mt.equal(a, mt.randint_like(mt.zeros(5), 100, generator=g))
    same = mt.vmap(lambda x: mt.randint_like(x, 10 ** 6), randomness="same")(mt.zeros(3, 8))
    assert all(mt.equal(same[0], row) for row in same)
    different = mt.vmap(lambda x: mt.randint_like(x, 10 ** 6),
                        randomness="different")(mt.zeros(3, 8))
    assert not mt.equal(different[0], different[1])


# ---------------------------------------------------------------- aten-signature aliases

def _arrays(rng, *shapes):
    return [rng.standard_normal(shape) for shape in shapes]


class Fixed:
    """An array argument that does not require grad (microtensor's loss weights cannot)."""

    def __init__(self, array):
        self.array = array


def _alias_cases():
    rng = np.random.default_rng(7)
    a, b, c = _arrays(rng, (4, 3), (4, 3), (4, 3))
    probs = rng.uniform(0.1, 0.9, (4, 3))
    signs = np.array([1.0, -1.0, 1.0, -1.0])
    image, image3 = rng.standard_normal((2, 3, 5, 5)), rng.standard_normal((1, 2, 4, 4, 4))
    seq = rng.standard_normal((2, 3, 7))
    grid, grid3 = rng.uniform(-1, 1, (2, 3, 4, 2)), rng.uniform(-1, 1, (1, 2, 2, 3, 3))
    cases = []
    for reduction in (0, 1, 2, 7):
        cases += [
            ("kl_div", (a, probs, reduction), {}),
            ("kl_div", (a, b, reduction), {"log_target": True}),
            ("binary_cross_entropy_with_logits", (a, probs, None, None, reduction), {}),
            ("binary_cross_entropy_with_logits",
             (a, probs, Fixed(np.abs(c[0])), Fixed(np.abs(c[1])), reduction), {}),
            ("cosine_embedding_loss", (a, b, signs, 0.2, reduction), {}),
            ("hinge_embedding_loss", (a, np.sign(b), 0.5, reduction), {}),
            ("margin_ranking_loss", (a[:, 0], b[:, 0], signs, 0.1, reduction), {}),
            ("poisson_nll_loss", (a, np.abs(b), True, False, 1e-8, reduction), {}),
            ("poisson_nll_loss", (np.abs(a) + 0.1, np.abs(b), False, True, 1e-8, reduction),
             {}),
            ("triplet_margin_loss", (a, b, c, 0.5, 1.0, 1e-6, True, reduction), {}),
        ]
    cases += [
        ("kl_div", (a, probs), {}), ("hinge_embedding_loss", (a, np.sign(b)), {}),
        ("margin_ranking_loss", (a[:, 0], b[:, 0], signs), {}),
        ("cosine_embedding_loss", (a, b, signs), {}), ("triplet_margin_loss", (a, b, c), {}),
        ("binary_cross_entropy_with_logits", (a, probs), {}),
        ("instance_norm", (seq, None, None, None, None, True, 0.1, 1e-5, False), {}),
        ("instance_norm", (seq, np.abs(a[0]), c[1], None, None, True, 0.1, 1e-5, True), {}),
        ("max_pool1d", (seq, 2), {}), ("max_pool1d", (seq, 3, [], 1, 1, True), {}),
        ("max_pool2d", (image, 2), {}), ("max_pool2d", (image, (2, 3), 1, 1, 2, False), {}),
        ("max_pool2d", (image, 3), {"stride": [], "ceil_mode": True}),
        ("max_pool3d", (image3, 2), {}), ("max_pool3d", (image3, 2, [1, 2, 1], 1), {}),
        ("pixel_shuffle", (rng.standard_normal((1, 8, 2, 3)), 2), {}),
        ("pixel_unshuffle", (rng.standard_normal((1, 2, 4, 6)), 2), {}),
        ("grid_sampler_2d", (rng.standard_normal((2, 2, 4, 5)), grid, 0, 0, False), {}),
        ("grid_sampler_2d", (rng.standard_normal((2, 2, 4, 5)), grid, 1, 1, True), {}),
        ("grid_sampler_2d", (rng.standard_normal((2, 2, 4, 5)), grid, 2, 2, False), {}),
        ("grid_sampler_3d", (rng.standard_normal((1, 2, 3, 4, 3)), grid3, 0, 2, True), {}),
        ("frobenius_norm", (rng.standard_normal((2, 3, 4)), (1, 2)), {}),
        ("frobenius_norm", (rng.standard_normal((3, 4)), 1, True), {}),
        ("nuclear_norm", (rng.standard_normal((3, 4)),), {}),
        ("nuclear_norm", (rng.standard_normal((3, 4)), True), {}),
        ("nuclear_norm", (rng.standard_normal((2, 3, 4)), (0, 2)), {"keepdim": True}),
    ]
    return cases


ALIAS_CASES = _alias_cases()


def _convert(lib, value, requires_grad):
    if isinstance(value, Fixed):
        return lib.tensor(value.array)
    if isinstance(value, np.ndarray):
        t = lib.tensor(value)
        return t.requires_grad_() if requires_grad and t.is_floating_point() else t
    return value


@needs_torch
@pytest.mark.parametrize("case", range(len(ALIAS_CASES)),
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(ALIAS_CASES)])
def test_aten_alias_matches_pytorch(case):
    """Values and every input's gradient as PyTorch's, and the same op as nn.functional's
    (the gradient comes from the op's own derivative)."""
    name, args, kwargs = ALIAS_CASES[case]
    ours_args = [_convert(mt, a, True) for a in args]
    torch_args = [_convert(torch, a, True) for a in args]
    with warnings.catch_warnings(record=True) as ours_warnings:
        warnings.simplefilter("always")
        ours = getattr(mt, name)(*ours_args, **kwargs)
    with warnings.catch_warnings(record=True) as torch_warnings:
        warnings.simplefilter("always")
        theirs = getattr(torch, name)(*torch_args, **kwargs)
    if name in ("frobenius_norm", "nuclear_norm"):     # PyTorch warns once a process
        assert [w.category for w in ours_warnings] == [UserWarning]
        assert "deprecated" in str(ours_warnings[0].message)
    else:
        assert [w.category for w in ours_warnings] == [w.category for w in torch_warnings]
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-6,
                               atol=1e-9)
    weights = np.random.default_rng(case).standard_normal(tuple(ours.shape))
    (ours * mt.tensor(weights)).sum().backward()
    (theirs * torch.tensor(weights)).sum().backward()
    for x, t in zip(ours_args, torch_args):
        if getattr(t, "grad", None) is not None:
            np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-9)


@needs_torch
@pytest.mark.parametrize("call", [
    lambda lib: lib.kl_div(lib.zeros(2), lib.ones(2), "mean"),
    lambda lib: lib.margin_ranking_loss(lib.zeros(2), lib.ones(2), lib.ones(2), 0.0, 1.5),
    lambda lib: lib.poisson_nll_loss(lib.zeros(2), lib.ones(2), True, False),
    lambda lib: lib.max_pool2d(lib.zeros(1, 1, 2, 2), 3),
    lambda lib: lib.dropout(lib.zeros(2), 1.5, True),
    lambda lib: lib.dropout(lib.zeros(2), 0.5),
    lambda lib: lib.native_dropout(lib.zeros(2), -0.5, True),
    lambda lib: lib.native_group_norm(lib.zeros(2, 6, 5), None, None, 2, 6, 4, 3, 1e-5),
    lambda lib: lib.frobenius_norm(lib.zeros(3, 4)),
    lambda lib: lib.constant_pad_nd(lib.zeros(2, 2), [1]),
    lambda lib: lib.constant_pad_nd(lib.zeros(2, 2), [-3, 0]),
])
def test_aten_alias_refusals_as_pytorch(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = outcome(lambda: call(mt)), outcome(lambda: call(torch))
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] in ("RuntimeError", "ValueError"):
        assert ours[1].split("(Could")[0].strip() == theirs[1].split("(Could")[0].strip()


@needs_torch
def test_grid_sampler_2d_refuses_a_volume():
    with pytest.raises(RuntimeError, match="expected 4D input"):
        mt.grid_sampler_2d(mt.zeros(1, 1, 2, 2, 2), mt.zeros(1, 2, 2, 2, 3), 0, 0, False)
    with pytest.raises(RuntimeError):
        torch.grid_sampler_2d(torch.zeros(1, 1, 2, 2, 2), torch.zeros(1, 2, 2, 2, 3), 0, 0,
                              False)


def test_aten_aliases_are_nn_functional_ops_under_vmap():
    """Batched like nn.functional's calls (no loop fallback: a fallback warns)."""
    x = mt.randn(3, 4, 5)
    target = mt.rand(3, 4, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batched = mt.vmap(lambda a, b: mt.kl_div(a, b, 2))(x, target)
        pooled = mt.vmap(lambda a: mt.max_pool1d(a, 2))(x)
    loop = mt.stack([mt.nn.functional.kl_div(a, b, reduction="sum") for a, b in zip(x, target)])
    assert mt.allclose(batched, loop)
    assert mt.allclose(pooled, mt.stack([mt.nn.functional.max_pool1d(a, 2) for a in x]))


@needs_torch
def test_dropout_and_native_dropout_draws():
    x = mt.ones(2000, dtype=mt.float64)
    out = mt.dropout(x, 0.25, True)
    kept = out != 0
    assert mt.allclose(out[kept], mt.full((int(kept.sum()),), 1 / 0.75, dtype=mt.float64))
    assert abs(kept.double().mean().item() - 0.75) < 0.05
    assert mt.dropout(x, 0.25, False) is x
    out, mask = mt.native_dropout(x, 0.25, None)
    assert mask.dtype is mt.bool and mt.equal(out != 0, mask)
    assert abs(mask.double().mean().item() - 0.75) < 0.05
    out, mask = mt.native_dropout(x, 0.25, False)
    assert out is not x and mt.equal(out, x) and bool(mask.all())
    # the draw follows vmap's randomness setting
    same = mt.vmap(lambda a: mt.dropout(a, 0.5, True), randomness="same")(mt.ones(3, 50))
    assert all(mt.equal(same[0], row) for row in same)


@needs_torch
@pytest.mark.parametrize("name, args", [
    ("native_layer_norm", lambda lib, x: (x, [4], None, None, 1e-5)),
    ("native_batch_norm", lambda lib, x: (x, None, None, lib.zeros(3, dtype=x.dtype),
                                          lib.ones(3, dtype=x.dtype), True, 0.1, 1e-5)),
    ("native_batch_norm", lambda lib, x: (x, None, None, lib.zeros(3, dtype=x.dtype),
                                          lib.ones(3, dtype=x.dtype), False, 0.1, 1e-5)),
    ("native_group_norm", lambda lib, x: (x, None, None, 2, 3, 4, 3, 1e-5)),
])
def test_native_norms_statistics_as_pytorch(name, args):
    data = np.random.default_rng(0).standard_normal((2, 3, 4))
    ours = getattr(mt, name)(*args(mt, mt.tensor(data)))
    theirs = getattr(torch, name)(*args(torch, torch.tensor(data)))
    for x, t in zip(ours, theirs):
        assert tuple(x.shape) == tuple(t.shape)
        np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-6, atol=1e-12)


# ---------------------------------------------------------------- gradient

def _coords(lib, *values):
    return lib.tensor(values, dtype=lib.float64)


GRADIENT_CASES = [
    ((3, 4), lambda lib: {}), ((5,), lambda lib: {"spacing": 2.0}),
    ((3, 4), lambda lib: {"spacing": [0.5, 2]}),
    ((3, 4), lambda lib: {"dim": 1}), ((3, 4), lambda lib: {"dim": [-1]}),
    ((3, 4, 5), lambda lib: {"dim": (2, 0), "spacing": [3.0, 0.25], "edge_order": 2}),
    ((3, 4), lambda lib: {"edge_order": 2}),
    ((3, 4), lambda lib: {"spacing": lib.tensor(2.0)}),
    ((4, 3), lambda lib: {"spacing": (_coords(lib, 0.0, 0.5, 2.0, 2.5),), "dim": 0}),
    ((3, 4), lambda lib: {"spacing": (_coords(lib, 0.0, 1.0, 3.0),
                                      _coords(lib, -1.0, 0.0, 0.5, 2.0))}),
    ((3, 4), lambda lib: {"spacing": [_coords(lib, 0.0, 1.0, 3.0),
                                      _coords(lib, -1.0, 0.0, 0.5, 2.0)], "edge_order": 2}),
    ((2, 5), lambda lib: {"spacing": (_coords(lib, 0.0, 0.1, 0.3, 0.4, 1.0),), "dim": -1,
                          "edge_order": 2}),
    ((2, 3), lambda lib: {}), ((), lambda lib: {}),
    # refusals
    ((3, 4), lambda lib: {"spacing": [2.0]}), ((3, 4), lambda lib: {"spacing": [1.0],
                                                                    "dim": (0, 1)}),
    ((3, 4), lambda lib: {"edge_order": 3}), ((2, 4), lambda lib: {"edge_order": 2}),
    ((3, 4), lambda lib: {"dim": 2}), ((3, 4), lambda lib: {"dim": [0, 0]}),
    ((3, 4), lambda lib: {"spacing": [lib.tensor(2.0), lib.tensor(1.0)]}),
    ((3, 4), lambda lib: {"spacing": (lib.ones(1, 3), lib.ones(4))}),
    ((1, 4), lambda lib: {}),
]


@needs_torch
@pytest.mark.parametrize("case", range(len(GRADIENT_CASES)))
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_gradient_as_pytorch(case, dtype):
    shape, options = GRADIENT_CASES[case]
    data = np.random.default_rng(case).standard_normal(shape) * 10
    ours = outcome(lambda: mt.gradient(mt.tensor(data).to(getattr(mt, dtype)), **options(mt)))
    theirs = outcome(lambda: torch.gradient(torch.tensor(data).to(getattr(torch, dtype)),
                                            **options(torch)))
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] != "ok":
        assert ours[1] == theirs[1]
        return
    assert isinstance(ours[1], tuple) and len(ours[1]) == len(theirs[1])
    for x, t in zip(ours[1], theirs[1]):
        assert x.dtype.name == str(t.dtype).split(".")[1] and tuple(x.shape) == tuple(t.shape)
        np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-5 if dtype == "float32"
                                   else 1e-12, atol=1e-5 if dtype == "float32" else 1e-12)


@needs_torch
def test_gradient_is_differentiable_in_input_and_coordinates_as_pytorch():
    data = np.random.default_rng(0).standard_normal((3, 5))
    coords = np.array([0.0, 0.3, 1.0, 1.2, 2.0])
    results = []
    for lib in (mt, torch):
        x = lib.tensor(data, requires_grad=True)
        c = lib.tensor(coords, requires_grad=True)
        parts = lib.gradient(x, spacing=(c,), dim=1, edge_order=2) + lib.gradient(x, dim=0)
        sum((p * p).sum() for p in parts).backward()
        results.append((x.grad.numpy(), c.grad.numpy()))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10)


def test_gradient_matches_numpy():
    data = np.random.default_rng(1).standard_normal((4, 6))
    x = np.array([0.0, 0.2, 0.9, 1.0, 1.7, 3.0])
    for edge_order in (1, 2):
        ours = mt.gradient(mt.tensor(data), spacing=(mt.tensor(x),), dim=1,
                           edge_order=edge_order)[0]
        np.testing.assert_allclose(ours.numpy(), np.gradient(data, x, axis=1,
                                                             edge_order=edge_order))


# ---------------------------------------------------------------- histogram, histogramdd

def _to(lib, value, dtype):
    if isinstance(value, np.ndarray):
        return lib.tensor(value).to(getattr(lib, dtype))
    if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
        return [lib.tensor(v).to(getattr(lib, dtype)) for v in value]
    return value


HISTOGRAM_CASES = [
    (lambda r: (r.standard_normal(50), 7), {}),
    (lambda r: (r.standard_normal((4, 5)), 3), {"range": (-0.5, 0.5)}),
    (lambda r: (r.standard_normal(30), np.array([-1.0, -0.2, 0.0, 0.7, 1.0])), {}),
    (lambda r: (r.standard_normal(30), 5), {"weight": "w", "density": True}),
    (lambda r: (r.standard_normal(30), np.array([-3.0, -1.0, 0.5, 3.0])), {"density": True}),
    (lambda r: (np.ones(3), 2), {}), (lambda r: (np.zeros(0), 2), {}),
    (lambda r: (np.array([1.0, 2, 1, 4, 2.5]), 3), {"range": (2.0, 2.0)}),
    (lambda r: (np.array([0.1, 0.2, 0.3]), np.array([0.1, 0.2, 0.3])), {}),
    (lambda r: (np.round(r.standard_normal(40), 1), 10), {}),   # values on the edges
    (lambda r: (r.standard_normal(20),), {}),                     # bins=100
    # refusals
    (lambda r: (r.standard_normal(5), 3), {"range": (3.0, 0.0)}),
    (lambda r: (r.standard_normal(5), 0), {}), (lambda r: (r.standard_normal(5), -1), {}),
    (lambda r: (np.array([1.0, np.nan]), 2), {}), (lambda r: (np.array([1.0, np.inf]), 2), {}),
    (lambda r: (r.standard_normal(5), np.array([[0.0, 2.0, 1.0]])), {}),
    (lambda r: (r.standard_normal(5), np.array([1.0])), {}),
    (lambda r: (r.standard_normal(5), 2), {"range": (0, 1, 2)}),
    (lambda r: (r.standard_normal(5), 2), {"range": (float("nan"), 1.0)}),
    (lambda r: (r.standard_normal(5), 2), {"weight": "short"}),
]


@needs_torch
@pytest.mark.parametrize("case", range(len(HISTOGRAM_CASES)))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_histogram_as_pytorch(case, dtype):
    rng = np.random.default_rng(case)
    make, options = HISTOGRAM_CASES[case]
    args = make(rng)
    weights = {"w": rng.uniform(0, 1, args[0].shape), "short": np.ones(4)}

    def run(lib):
        kwargs = {k: (_to(lib, weights[v], dtype) if k == "weight" else v)
                  for k, v in options.items()}
        return lib.histogram(*[_to(lib, a, dtype) for a in args], **kwargs)
    ours, theirs = outcome(lambda: run(mt)), outcome(lambda: run(torch))
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] != "ok":
        assert ours[1] == theirs[1]
        return
    assert isinstance(ours[1], mt.return_types.histogram) and ours[1].hist is ours[1][0]
    for x, t in zip(ours[1], theirs[1]):
        assert x.dtype.name == str(t.dtype).split(".")[1] and tuple(x.shape) == tuple(t.shape)
        np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-6, atol=1e-7)


@needs_torch
def test_histogram_refuses_integers_and_mixed_dtypes_as_pytorch():
    for call in (lambda lib: lib.histogram(lib.tensor([1, 2]), 2),
                 lambda lib: lib.histogram(lib.ones(3), lib.tensor([0.0, 2.0],
                                                                    dtype=lib.float64)),
                 lambda lib: lib.histogram(lib.ones(3), 2, weight=lib.ones(3,
                                                                          dtype=lib.float64))):
        same_outcome(lambda: call(mt), lambda: call(torch))


HISTOGRAMDD_CASES = [
    ((20, 2), [3, 4], {}), ((20, 2), 2, {}), ((5, 4, 3), [2, 3, 2], {}),
    ((20, 2), (2, 3), {"range": [-1.0, 1.0, -0.5, 0.5]}),
    ((20, 2), [np.array([-2.0, 0.0, 1.0, 2.0]), np.array([-1.0, 1.0])], {}),
    ((20, 2), [2, 2], {"weight": True, "density": True}),
    ((6, 1), [4], {}), ((4, 0), [], {}),
    ((20, 2), [2], {}), ((20, 2), [2, 2], {"range": [0.0, 1.0]}), ((4,), [2], {}),
    ((20, 2), [2, 2], {"weight": "bad"}),
]


@needs_torch
@pytest.mark.parametrize("case", range(len(HISTOGRAMDD_CASES)))
def test_histogramdd_as_pytorch(case):
    rng = np.random.default_rng(case)
    shape, bins, options = HISTOGRAMDD_CASES[case]
    points = rng.standard_normal(shape)
    weights = {True: rng.uniform(0, 1, shape[:-1]), "bad": np.ones(shape[:-1] + (1,))}

    def run(lib):
        kwargs = {k: (lib.tensor(weights[v]) if k == "weight" else v)
                  for k, v in options.items()}
        return lib.histogramdd(lib.tensor(points), _to(lib, bins, "float64"), **kwargs)
    ours, theirs = outcome(lambda: run(mt)), outcome(lambda: run(torch))
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] != "ok":
        assert ours[1] == theirs[1]
        return
    assert isinstance(ours[1], mt.return_types.histogramdd)
    assert isinstance(ours[1].bin_edges, tuple)
    np.testing.assert_allclose(ours[1].hist.numpy(), theirs[1].hist.numpy(), rtol=1e-12)
    assert len(ours[1].bin_edges) == len(theirs[1].bin_edges)
    for x, t in zip(ours[1].bin_edges, theirs[1].bin_edges):
        np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-12)


def test_histograms_under_vmap_match_the_loop():
    """Each sample's own edges (``bins=int`` spans each sample's extent), in one call:
    no loop fallback (it would warn)."""
    x = mt.randn(4, 30)
    edges = mt.sort(mt.randn(4, 5), -1).values
    weight = mt.rand(30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        counted = mt.vmap(lambda a: mt.histogram(a, 6, weight=weight, density=True))(x)
        given = mt.vmap(lambda a, e: mt.histogram(a, e))(x, edges)
        shared = mt.vmap(lambda a: mt.histogram(a, edges[0]))(x)
        points = mt.vmap(lambda p: mt.histogramdd(p, [3, 2]))(x.reshape(4, 15, 2))
        nested = mt.vmap(mt.vmap(lambda a: mt.histogram(a, 3).hist))(x.reshape(2, 2, 30))
    for i in range(4):
        loop = mt.histogram(x[i], 6, weight=weight, density=True)
        assert mt.allclose(counted.hist[i], loop.hist)
        assert mt.allclose(counted.bin_edges[i], loop.bin_edges)
        assert mt.equal(given.hist[i], mt.histogram(x[i], edges[i]).hist)
        assert mt.equal(shared.hist[i], mt.histogram(x[i], edges[0]).hist)
        assert mt.equal(shared.bin_edges[i], edges[0])
        loop_dd = mt.histogramdd(x[i].reshape(15, 2), [3, 2])
        assert mt.equal(points.hist[i], loop_dd.hist)
        assert all(mt.equal(e[i], f) for e, f in zip(points.bin_edges, loop_dd.bin_edges))
        assert mt.equal(nested[i // 2, i % 2], mt.histogram(x[i], 3).hist)


def test_histogram_is_not_differentiable():
    x = mt.randn(10, requires_grad=True)
    result = mt.histogram(x, 3)
    assert not result.hist.requires_grad and not result.bin_edges.requires_grad
    assert mt.equal(x.histogram(3).hist, result.hist)


# ---------------------------------------------------------------- from_file

@needs_torch
@pytest.mark.parametrize("shared", [None, False, True])
@pytest.mark.parametrize("size, dtype", [(0, None), (4, None), (4, "float64"), (11, None),
                                         (3, "int64"), (-1, None)])
def test_from_file_as_pytorch(tmp_path, shared, size, dtype):
    values = np.arange(10, dtype=np.float32)
    ours_path, torch_path = str(tmp_path / "ours.bin"), str(tmp_path / "theirs.bin")
    values.tofile(ours_path)
    values.tofile(torch_path)
    ours = outcome(lambda: mt.from_file(ours_path, shared, size,
                                        dtype=dtype and getattr(mt, dtype)))
    theirs = outcome(lambda: torch.from_file(torch_path, shared, size,
                                             dtype=dtype and getattr(torch, dtype)))
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] != "ok":
        assert ours[1].replace(ours_path, "F") == theirs[1].replace(torch_path, "F")
        return
    x, t = ours[1], theirs[1]
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    assert x.dtype.name == str(t.dtype).split(".")[1]
    if size > 0:
        x[0] = t[0] = 42
        np.testing.assert_array_equal(np.fromfile(ours_path, np.float32),
                                      np.fromfile(torch_path, np.float32))
        assert np.array_equal(np.fromfile(ours_path, np.float32), values) == (not shared)


@needs_torch
def test_from_file_shared_creates_the_file_and_refuses_a_missing_one(tmp_path):
    path = str(tmp_path / "new.bin")
    with pytest.raises(RuntimeError, match="unable to open file"):
        mt.from_file(path, size=2)
    x = mt.from_file(path, shared=True, size=2, requires_grad=True)
    assert x.tolist() == [0.0, 0.0] and x.requires_grad
    import os
    assert os.path.getsize(path) == 8


# ---------------------------------------------------------------- segment_reduce

SEGMENT_CASES = [
    ((6,), "sum", {"lengths": [2, 0, 3, 1]}), ((6,), "mean", {"lengths": [2, 0, 3, 1]}),
    ((6,), "max", {"lengths": [2, 0, 3, 1]}), ((6,), "min", {"lengths": [2, 0, 3, 1]}),
    ((6,), "prod", {"lengths": [2, 0, 3, 1]}), ((6,), "amax", {"lengths": [6]}),
    ((6,), "max", {"lengths": [2, 0, 3, 1], "initial": 0.0}),
    ((6,), "mean", {"lengths": [2, 0, 3, 1], "initial": 10.0}),
    ((6,), "prod", {"lengths": [2, 0, 3, 1], "initial": 2.0}),
    ((6,), "sum", {"offsets": [0, 2, 2, 5, 6]}),
    ((3, 2), "sum", {"lengths": [1, 2]}), ((3, 2, 2), "mean", {"lengths": [2, 1]}),
    ((2, 3), "sum", {"lengths": [[1, 2], [3, 0]], "axis": 1}),
    ((2, 3), "max", {"offsets": [[0, 1, 3], [0, 0, 3]], "axis": -1}),
    # refusals
    ((6,), "foo", {"lengths": [2, 0, 3, 1]}), ((6,), "sum", {"lengths": [2, 2]}),
    ((6,), "sum", {}), ((6,), "sum", {"lengths": [2, -1, 5]}),
    ((2, 3), "sum", {"lengths": [1, 2], "axis": 1}),
    ((6,), "sum", {"indices": [0, 0, 2, 2, 2, 3]}),
    ((6,), "sum", {"lengths": [2, 2], "unsafe": True}),
]


@needs_torch
@pytest.mark.parametrize("case", range(len(SEGMENT_CASES)))
def test_segment_reduce_as_pytorch(case):
    shape, reduce, options = SEGMENT_CASES[case]
    data = np.random.default_rng(case).standard_normal(shape)

    def run(lib):
        x = lib.tensor(data, requires_grad=True)
        kwargs = {k: lib.tensor(v) if isinstance(v, list) else v for k, v in options.items()}
        return x, lib.segment_reduce(x, reduce, **kwargs)
    ours, theirs = outcome(lambda: run(mt)), outcome(lambda: run(torch))
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] != "ok":
        assert ours[1] == theirs[1]
        return
    (x, y), (t, u) = ours[1], theirs[1]
    np.testing.assert_allclose(y.detach().numpy(), u.detach().numpy(), rtol=1e-12)
    weights = np.random.default_rng(0).standard_normal(tuple(y.shape))
    (y.nan_to_num(0.0, 0.0, 0.0) * mt.tensor(weights)).sum().backward()
    (u.nan_to_num(0.0, 0.0, 0.0) * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


@needs_torch
def test_segment_reduce_refuses_integers_as_pytorch():
    same_outcome(lambda: mt.segment_reduce(mt.arange(4), "sum", lengths=mt.tensor([4])),
                 lambda: torch.segment_reduce(torch.arange(4), "sum", lengths=torch.tensor([4])))


# ---------------------------------------------------------------- *_copy

COPY_CASES = [
    ("alias_copy", ()), ("detach_copy", ()), ("diagonal_copy", ()),
    ("diagonal_copy", (1, 1, 2)), ("narrow_copy", (1, 0, 2)), ("select_copy", (1, 0)),
    ("slice_copy", (2, 1, None, 2)), ("split_copy", (2, 2)),
    ("split_with_sizes_copy", ([1, 3], 2)), ("squeeze_copy", ()), ("transpose_copy", (0, 2)),
    ("unbind_copy", (1,)), ("unfold_copy", (2, 2, 1)), ("unsqueeze_copy", (0,)),
    ("expand_copy", ((2, 2, 3, 4),)), ("permute_copy", ((2, 0, 1),)), ("view_copy", ((6, 4),)),
    ("as_strided_copy", ((2, 2), (1, 2), 1)),
]


@needs_torch
@pytest.mark.parametrize("name, args", COPY_CASES, ids=[c[0] for c in COPY_CASES])
def test_copy_functions_as_pytorch(name, args):
    """Fresh contiguous tensors with the view's values; the copy shares no memory and,
    except for detach_copy, carries the view's gradient."""
    data = np.random.default_rng(0).standard_normal((2, 3, 4))
    x = mt.tensor(data).permute(0, 2, 1).permute(0, 2, 1).requires_grad_()
    t = torch.tensor(data).permute(0, 2, 1).permute(0, 2, 1).requires_grad_()
    ours, theirs = getattr(mt, name)(x, *args), getattr(torch, name)(t, *args)
    pairs = list(zip(ours, theirs)) if isinstance(theirs, (tuple, list)) else [(ours, theirs)]
    assert isinstance(ours, tuple) == isinstance(theirs, (tuple, list))
    for y, u in pairs:
        assert tuple(y.shape) == tuple(u.shape) and y.stride() == u.stride()
        np.testing.assert_array_equal(y.detach().numpy(), u.detach().numpy())
        assert y.untyped_storage() is not x.untyped_storage()
        # PyTorch's detach_copy requires grad with a grad_fn that refuses; ours does not
        assert y.requires_grad == (u.requires_grad and name != "detach_copy")
    if name != "detach_copy":
        sum((y * y).sum() for y, _ in pairs).backward()
        sum((u * u).sum() for _, u in pairs).backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy())
