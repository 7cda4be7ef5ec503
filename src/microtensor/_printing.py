"""``repr`` of tensors in PyTorch's style: ``tensor([1.5000, 2.0000], grad_fn=<MulBackward0>)``.

The rules are PyTorch's, under its print options (``set_printoptions``; by default 4
digits after the point, lines of at most 80 characters, and tensors of more than 1000
elements summarized by their first and last 3 entries along each dim).  One width, chosen from all the (summarized) values,
right-aligns every entry, and one notation serves the whole tensor: integers with a
trailing ``.`` when every float is whole, scientific when the magnitudes span more than
1000x or leave [1e-4, 1e8], fixed-point otherwise.  A complex tensor prints each entry as
its real part and its imaginary part, each part formatted by the rule above over all
the tensor's parts of its kind (``tensor([1.5000+2.0000e+00j, -3.2500-1.0000e-05j])``).
"""
import math

import numpy as np

from microtensor._C.tensor import bool_, get_default_dtype, int64
from microtensor._dtype import default_complex_dtype

PRECISION = 4
LINE_WIDTH = 80
THRESHOLD = 1000
EDGE_ITEMS = 3
SCI_MODE = None   # True or False forces scientific notation on or off

_PROFILES = {"default": dict(precision=4, threshold=1000, edgeitems=3, linewidth=80),
             "short": dict(precision=2, threshold=1000, edgeitems=2, linewidth=80),
             "full": dict(precision=4, threshold=math.inf, edgeitems=3, linewidth=80)}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None):
    """Set how tensors print, as ``torch.set_printoptions``: ``precision`` (digits after
    the point), ``threshold`` (more elements than this are summarized), ``edgeitems``
    (entries shown at each end of a summarized dim), ``linewidth`` (characters per line),
    ``profile`` ("default", "short" or "full": all four at once, the others then override
    it) and ``sci_mode`` (True or False forces scientific notation on or off; None, as
    every call without it, chooses it per tensor)."""
    global PRECISION, THRESHOLD, EDGE_ITEMS, LINE_WIDTH, SCI_MODE
    options = {}
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"set_printoptions: profile must be one of "
                             f"{', '.join(map(repr, _PROFILES))}, but got {profile!r}")
        options.update(_PROFILES[profile])
    options.update({name: value for name, value in dict(
        precision=precision, threshold=threshold, edgeitems=edgeitems,
        linewidth=linewidth).items() if value is not None})
    PRECISION = options.get("precision", PRECISION)
    THRESHOLD = options.get("threshold", THRESHOLD)
    EDGE_ITEMS = options.get("edgeitems", EDGE_ITEMS)
    LINE_WIDTH = options.get("linewidth", LINE_WIDTH)
    SCI_MODE = sci_mode


class _Formatter:
    """Turns one element into text of the width shared by all elements of a tensor."""

    def __init__(self, values, is_float):
        self.is_float = is_float
        self.whole = True
        self.scientific = False
        self.width = 1
        if not is_float:
            self.width = max((len(self._plain(v)) for v in values.ravel().tolist()), default=1)
            return
        finite = values[np.isfinite(values) & (values != 0)].astype(np.float64)
        if finite.size == 0:
            return
        magnitudes = np.abs(finite)
        smallest, largest = magnitudes.min(), magnitudes.max()
        self.whole = bool(np.all(finite == np.ceil(finite)))
        spread = largest / smallest > 1000.0 or largest > 1.0e8
        self.scientific = spread if self.whole else spread or smallest < 1.0e-4
        if SCI_MODE is not None:
            self.scientific = SCI_MODE
        if self.scientific:
            self.width = max(len(f"{v:.{PRECISION}e}") for v in finite.tolist())
        elif self.whole:
            self.width = max(len(f"{v:.0f}") + 1 for v in finite.tolist())
        else:
            self.width = max(len(f"{v:.{PRECISION}f}") for v in finite.tolist())

    @staticmethod
    def _plain(value):
        return str(value)

    def format(self, value):
        if not self.is_float:
            text = self._plain(value)
        elif self.scientific:
            text = f"{value:{self.width}.{PRECISION}e}"
        elif self.whole:
            text = f"{value:.0f}" + ("" if math.isinf(value) or math.isnan(value) else ".")
        else:
            text = f"{value:.{PRECISION}f}"
        return text.rjust(self.width)


class _ComplexFormatter:
    """Formats a complex entry as PyTorch does: the real part, then the imaginary part
    with its sign (``+`` added when it has none) and a ``j``."""

    def __init__(self, values):
        self.real = _Formatter(values.real, True)
        self.imag = _Formatter(values.imag, True)
        self.width = self.real.width + self.imag.width + 1

    def format(self, value):
        imag = (self.imag.format(value.imag) + "j").lstrip()
        return self.real.format(value.real) + (imag if imag[0] in "+-" else "+" + imag)


def _summarized(t):
    """The entries a summarized print shows, the first and last EDGE_ITEMS along each dim,
    read from the storage through ``t``'s strides: the others are never touched (a
    broadcast tensor may have 2**62 of them, more than an ndarray can describe)."""
    keep = [np.r_[0:EDGE_ITEMS, n - EDGE_ITEMS:n] if n > 2 * EDGE_ITEMS else np.arange(n)
            for n in t._sizes]
    offsets = t._offset + sum(index * stride
                              for index, stride in zip(np.ix_(*keep), t._strides))
    return t._storage.data[offsets]


def _vector(arr, cut, indent, formatter):
    """One row; ``cut``: ``arr`` holds the row's first and last EDGE_ITEMS entries only."""
    per_line = max(1, (LINE_WIDTH - indent) // (formatter.width + 2))
    entries = [formatter.format(v) for v in arr.tolist()]
    if cut:
        entries.insert(EDGE_ITEMS, " ...")
    lines = [", ".join(entries[i:i + per_line]) for i in range(0, len(entries), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(arr, shape, indent, summarize, formatter):
    """``arr``: the shown entries of a tensor of ``shape`` (all of them unless summarizing)."""
    if arr.ndim == 0:
        return formatter.format(arr.item())
    cut = summarize and shape[0] > 2 * EDGE_ITEMS
    if arr.ndim == 1:
        return _vector(arr, cut, indent, formatter)
    parts = [_nested(row, shape[1:], indent + 1, summarize, formatter) for row in arr]
    if cut:
        parts.insert(EDGE_ITEMS, "...")
    return "[" + ("," + "\n" * (arr.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def _body(t, indent):
    summarize = t._numel > THRESHOLD
    shown = _summarized(t) if summarize else t._array()
    formatter = _ComplexFormatter(shown) if t._dtype.is_complex else \
        _Formatter(shown, t._dtype.is_floating_point)
    return _nested(shown, t._sizes, indent, summarize, formatter)


def _with_suffixes(text, suffixes, indent):
    """Append ``, key=value`` parts, wrapping one onto a new line when it would pass 80."""
    pieces = [text]
    line_length = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if line_length + len(suffix) + 2 > LINE_WIDTH:
            pieces.append(",\n" + " " * indent + suffix)
            line_length = indent + len(suffix)
        else:
            pieces.append(", " + suffix)
            line_length += len(suffix) + 2
    return "".join(pieces) + ")"


def tensor_repr(t):
    prefix = "tensor("
    suffixes = []
    if t.device.type != "cpu":
        suffixes.append(f"device='{t.device}'")
    if t.is_meta:   # no values to print: PyTorch prints the size instead
        suffixes.append(f"size={tuple(t.shape)}")
        if t.dtype is not get_default_dtype():   # no values show an integer dtype
            suffixes.append(f"dtype={t.dtype!r}")
        return _with_suffixes(prefix + "...", suffixes + _grad_suffixes(t), len(prefix))
    values = t.detach().cpu()
    if t._numel == 0:
        if t.dim() != 1:
            suffixes.append(f"size={tuple(t.shape)}")
        if t.dtype is not get_default_dtype():
            suffixes.append(f"dtype={t.dtype!r}")
        body = "[]"
    else:
        if t.dtype not in (get_default_dtype(), default_complex_dtype(), int64, bool_):
            suffixes.append(f"dtype={t.dtype!r}")
        body = _body(values, len(prefix))
    return _with_suffixes(prefix + body, suffixes + _grad_suffixes(t), len(prefix))


def _grad_suffixes(t):
    fn = t.grad_fn
    if fn is not None:
        suffixes = [f"grad_fn=<{fn.name()}>"]
    else:
        suffixes = ["requires_grad=True"] if t.requires_grad else []
    from microtensor.autograd import forward_ad
    tangent = forward_ad.tangent_for_printing(t)
    if tangent is not None:          # a dual tensor, as PyTorch prints it
        suffixes.append(f"tangent={tensor_repr(tangent)}")
    return suffixes
