"""Small porting names, compared with PyTorch where it is importable: ``finfo``/``iinfo``,
``Tensor.type``, top-level ``is_anomaly_enabled``, and RNN/GRU refusing ``proj_size``."""
import pytest

import microtensor as mt
from microtensor import nn

try:
    import torch
except ImportError:     # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")


def _error(fn):
    try:
        fn()
    except Exception as e:      # noqa: BLE001
        return type(e), str(e)
    return None


@pytest.mark.parametrize("cls", ["RNN", "GRU"])
@pytest.mark.parametrize("proj", [0, 2])
def test_rnn_gru_refuse_proj_size(cls, proj):
    with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM, not "
                                         "RNN or GRU"):
        getattr(nn, cls)(3, 4, proj_size=proj)
    if torch is not None:
        assert _error(lambda: getattr(nn, cls)(3, 4, proj_size=proj)) == \
            _error(lambda: getattr(torch.nn, cls)(3, 4, proj_size=proj))


def test_lstm_still_takes_proj_size_zero():
    assert nn.LSTM(3, 4, proj_size=0).proj_size == 0


def test_is_anomaly_enabled_at_top_level():
    assert mt.is_anomaly_enabled() is False
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"), \
            mt.autograd.detect_anomaly():
        assert mt.is_anomaly_enabled() is True
    assert mt.is_anomaly_enabled() is False
    if torch is not None:
        assert mt.is_anomaly_enabled() == torch.is_anomaly_enabled()


def _torch_dtype(dt):
    return getattr(torch, dt.name)


def _swap_prefix(message):
    return message.replace("microtensor.", "torch.").replace("microtensor", "torch")


@pytest.mark.parametrize("dt", [mt.float32, mt.float64])
def test_finfo_matches_torch(dt):
    info = mt.finfo(dt)
    assert info.dtype == dt.name
    assert info.bits == 8 * dt.itemsize
    assert info.tiny == info.smallest_normal > 0
    one = mt.ones((), dtype=dt)
    assert (one + info.eps).item() != 1.0 and (one + info.eps / 2).item() == 1.0
    if torch is not None:
        ref = torch.finfo(_torch_dtype(dt))
        for name in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution",
                     "dtype"):
            assert getattr(info, name) == getattr(ref, name), name
            assert type(getattr(info, name)) is type(getattr(ref, name)), name
        assert repr(info) == repr(ref)


def test_finfo_without_argument_is_the_default_dtype():
    assert mt.finfo().dtype == mt.get_default_dtype().name
    previous = mt.get_default_dtype()
    try:
        mt.set_default_dtype(mt.float64)
        assert mt.finfo().eps == mt.finfo(mt.float64).eps
    finally:
        mt.set_default_dtype(previous)


@pytest.mark.parametrize("dt", [mt.int32, mt.int64])
def test_iinfo_matches_torch(dt):
    info = mt.iinfo(dt)
    assert (info.min, info.max) == (-2 ** (8 * dt.itemsize - 1), 2 ** (8 * dt.itemsize - 1) - 1)
    if torch is not None:
        ref = torch.iinfo(_torch_dtype(dt))
        for name in ("bits", "max", "min", "dtype"):
            assert getattr(info, name) == getattr(ref, name), name
            assert type(getattr(info, name)) is type(getattr(ref, name)), name
        assert repr(info) == repr(ref)


@pytest.mark.parametrize("fn, arg", [("finfo", "int32"), ("finfo", "bool"), ("finfo", "int64"),
                                     ("iinfo", "float32"), ("iinfo", "bool"),
                                     ("iinfo", "float64")])
def test_info_of_the_wrong_kind_raises_as_torch(fn, arg):
    with pytest.raises(TypeError):
        getattr(mt, fn)(getattr(mt, arg))
    if torch is not None:
        kind, message = _error(lambda: getattr(mt, fn)(getattr(mt, arg)))
        assert (kind, _swap_prefix(message)) == _error(lambda: getattr(torch, fn)(
            getattr(torch, arg)))


@pytest.mark.parametrize("fn", ["finfo", "iinfo"])
def test_info_refuses_a_non_dtype(fn):
    with pytest.raises(TypeError, match="must be microtensor.dtype, not str"):
        getattr(mt, fn)("float32")
    with pytest.raises(TypeError):
        mt.iinfo()


_LEGACY_NAMES = ["FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "BoolTensor"]


@pytest.mark.parametrize("dt", [mt.float32, mt.float64, mt.int64, mt.int32, mt.bool])
def test_tensor_type_names_its_legacy_type(dt):
    t = mt.zeros(2, dtype=dt)
    assert t.type().startswith("microtensor.") and t.type()[12:] in _LEGACY_NAMES
    assert isinstance(t, getattr(mt, t.type()[12:]))
    if torch is not None:
        assert _swap_prefix(t.type()) == torch.zeros(2, dtype=_torch_dtype(dt)).type()


@pytest.mark.parametrize("name", _LEGACY_NAMES)
@pytest.mark.parametrize("prefix", ["torch.", "microtensor."])
def test_tensor_type_converts_by_name_constructor_and_dtype(name, prefix):
    t = mt.tensor([1.5, 0.0, -2.0])
    by_name = t.type(prefix + name)
    assert by_name.type() == "microtensor." + name
    assert by_name.dtype is getattr(mt, name).dtype
    assert t.type(getattr(mt, name)).dtype is by_name.dtype
    assert t.type(dtype=by_name.dtype).dtype is by_name.dtype
    if torch is not None:
        ref = torch.tensor([1.5, 0.0, -2.0]).type("torch." + name)
        assert by_name.tolist() == ref.tolist()


def test_tensor_type_of_its_own_type_returns_itself():
    t = mt.ones(2)
    assert t.type(mt.float32) is t
    assert t.type("torch.FloatTensor") is t
    assert t.type(mt.FloatTensor) is t


@pytest.mark.parametrize("bad", ["torch.FooTensor", "DoubleTensor", "float64", "numpy.FloatTensor",
                                 5, 2.0])
def test_tensor_type_refuses_as_torch(bad):
    kind, message = _error(lambda: mt.ones(2).type(bad))
    assert kind in (ValueError, TypeError)
    if torch is not None:
        assert (kind, message) == _error(lambda: torch.ones(2).type(bad))


def test_module_type_takes_a_legacy_name():
    model = nn.Linear(2, 2).type("torch.DoubleTensor")
    assert model.weight.dtype is mt.float64 and model.bias.dtype is mt.float64
