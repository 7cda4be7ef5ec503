"""``torch.backends.mha``: whether PyTorch's fast inference path of TransformerEncoder is
on.  microtensor computes the same math on every path; the switch decides only whether the
encoder's padded outputs are zeros, as that path's are (see nn.attention's
TransformerEncoder)."""
_is_fastpath_enabled = True


def get_fastpath_enabled():
    return _is_fastpath_enabled


def set_fastpath_enabled(value):
    global _is_fastpath_enabled
    _is_fastpath_enabled = value
