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
