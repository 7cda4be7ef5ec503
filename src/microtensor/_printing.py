"""``repr`` of tensors in PyTorch's style: ``tensor([1.5000, 2.0000], grad_fn=<MulBackward0>)``."""
import numpy as np

from microtensor._C.tensor import float32, get_default_dtype, int64


def _format_array(arr, indent):
    if arr.dtype.kind == "f":
        finite = arr[np.isfinite(arr)]
        if finite.size and np.all(finite == np.round(finite)) and np.abs(finite).max() < 1e8:
            formatter = {"float_kind": lambda v: f"{v:.0f}." if np.isfinite(v) else str(v)}
        elif finite.size and (np.abs(finite).max() >= 1e8 or
                              np.abs(finite[finite != 0]).min(initial=1) < 1e-4):
            formatter = {"float_kind": lambda v: f"{v:.4e}"}
        else:
            formatter = {"float_kind": lambda v: f"{v:.4f}"}
    elif arr.dtype.kind == "b":
        formatter = {"bool": lambda v: "True" if v else "False"}
    else:
        formatter = None
    return np.array2string(arr, separator=", ", prefix=" " * indent, formatter=formatter,
                           threshold=1000, edgeitems=3, max_line_width=80)


def tensor_repr(t):
    prefix = "tensor("
    arr = t.detach().cpu()._array()
    body = "[]" if t._numel == 0 and t.dim() == 1 else _format_array(arr, len(prefix))
    extras = []
    if t.device.type != "cpu":
        extras.append(f"device='{t.device}'")
    if t._numel == 0 and t.dim() != 1:
        extras.append(f"size={tuple(t.shape)}")
    default_shown = (float32 if get_default_dtype() is float32 else get_default_dtype(), int64)
    if t.dtype not in default_shown and t.dtype.name != "bool" or \
            (t._numel == 0 and t.dtype is not get_default_dtype()):
        extras.append(f"dtype={t.dtype!r}")
    fn = t.grad_fn
    if fn is not None:
        extras.append(f"grad_fn=<{fn.name()}>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    return prefix + body + "".join(", " + e for e in extras) + ")"
