"""Dropout's random variants as composites, each PyTorch's ``_dropout_impl``:
``feature_dropout`` (whole channels zeroed), ``alpha_dropout`` and
``feature_alpha_dropout`` (dropped values set to SELU's negative saturation, then scaled
and shifted to keep zero mean and unit variance).

The noise is ``rand(...) >= p`` (as ``nn.functional.dropout`` draws it), over the whole
input or, for the feature variants, one draw per (sample, channel); the result is
``input * noise`` (plus the alpha shift), so gradients and vmap come from ``mul`` and
``add``, and vmap's ``randomness`` ("different", "same", "error") applies through
``rand``'s random-op rule.  ``inplace_dropout`` is the same computation written into the
input, for ``nn.functional``'s ``inplace=True``.

The registry samples are the deterministic cases (not training, p = 0, p = 1), which the
registry sweeps compare with PyTorch; the random draws are tested in
tests/test_nn_missing_modules.py.
"""
import math

from microtensor._C.tensor import bool_
from microtensor.ops.factory import ones_like, rand, zeros_like
from microtensor.ops.loops import _type_name
from microtensor.ops.registry import Sample, op

# SELU's negative saturation value, -scale * alpha (PyTorch's constant)
_ALPHA = 1.7580993408473766


def _check_p(p):
    if not 0 <= p <= 1:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {p}")


def _noise_shape(input, feature):
    """The shape of the noise: the input's, or (N, C, 1, ...) for feature dropout."""
    if not feature:
        return tuple(input.shape)
    if input.dim() < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    return tuple(input.shape[:2]) + (1,) * (input.dim() - 2)


def _dropout(input, p, train, feature, alpha, inplace):
    """PyTorch's ``_dropout_impl``: ``input`` itself when nothing is dropped, zeros for
    p = 1 (no alpha shift there either), else ``input`` times the noise (alpha variants:
    plus the shift ``b``); in place into ``input`` when ``inplace``."""
    _check_p(p)
    if p == 0 or not train or input.numel() == 0:
        return input
    if p == 1:
        zero = input.new_zeros(())     # (of the input's dtype: a bool input stays bool)
        return input.mul_(zero) if inplace else input * zero
    shape = _noise_shape(input, feature)
    if not input.is_floating_point():
        # PyTorch's noise has the input's dtype: dividing it by 1 - p fails so
        raise RuntimeError(f"result type Float can't be cast to the desired output type "
                           f"{_type_name(input.dtype)}")
    noise = (rand(shape, dtype=input.dtype, device=input.device) >= p).to(input.dtype)
    if not alpha:
        noise = noise / (1 - p)
        return input.mul_(noise) if inplace else input * noise
    a = 1 / math.sqrt((_ALPHA * _ALPHA * p + 1) * (1 - p))
    shift = (noise - 1) * (_ALPHA * a) + _ALPHA * a * p
    noise = noise * a
    return input.mul_(noise).add_(shift) if inplace else input * noise + shift


def inplace_dropout(input, p, train, feature, alpha):
    """The dropout variant chosen by ``feature`` and ``alpha``, written into ``input``."""
    return _dropout(input, p, train, feature, alpha, inplace=True)


def _deterministic_samples(make):
    return [Sample(make(2, 3, 4), 0.5, False), Sample(make(3, 4), 0.0, True),
            Sample(make(2, 3, 2, 2), 1.0, True), Sample(make(4, 3).t(), 0.3, False),
            Sample(make(0, 3), 0.5, True)]


@op(kind="composite", method=False, inputs=("input",), samples=_deterministic_samples)
def feature_dropout(input, p, train):
    """Each channel (dim 1) of each sample zeroed with probability ``p``, the kept ones
    scaled by ``1 / (1 - p)``."""
    return _dropout(input, p, train, True, False, False)


@op(kind="composite", method=False, inputs=("input",), samples=_deterministic_samples)
def alpha_dropout(input, p, train):
    """Each element set with probability ``p`` to SELU's negative saturation, then all
    scaled and shifted to keep the mean and variance."""
    return _dropout(input, p, train, False, True, False)


@op(kind="composite", method=False, inputs=("input",), samples=_deterministic_samples)
def feature_alpha_dropout(input, p, train):
    """``alpha_dropout`` with one draw per (sample, channel)."""
    return _dropout(input, p, train, True, True, False)


__all__ = ["feature_dropout", "alpha_dropout", "feature_alpha_dropout"]


# --------------------------------------------------------------------------- top-level in-place
# ``torch.dropout`` and the in-place functions of the four variants: ``input`` itself,
# written into only when something is dropped (as PyTorch, whose version counter then
# moves), through ``mul_``/``add_``, so a leaf that requires grad is refused.

@op(kind="composite", method=False, inputs=("input",), samples=_deterministic_samples)
def dropout(input, p, train):
    """Each element zeroed with probability ``p``, the kept ones scaled by ``1 / (1 - p)``."""
    return _dropout(input, p, train, False, False, False)


def _inplace(name, feature, alpha):
    def kernel(input, p, train):
        return inplace_dropout(input, p, train, feature, alpha)
    kernel.__name__ = name
    kernel.__doc__ = f"``{name[:-1]}`` written into ``input``."
    return op(name, kind="composite", method=False, inputs=("input",))(kernel)


dropout_ = _inplace("dropout_", False, False)
feature_dropout_ = _inplace("feature_dropout_", True, False)
alpha_dropout_ = _inplace("alpha_dropout_", False, True)
feature_alpha_dropout_ = _inplace("feature_alpha_dropout_", True, True)

__all__ += ["dropout", "dropout_", "feature_dropout_", "alpha_dropout_",
            "feature_alpha_dropout_"]


# ``torch.native_dropout(input, p, train)``: the aten form that also returns the mask

def _native_dropout_samples(make):
    return [Sample(make(2, 3), 0.5, False), Sample(make(3, 4), 0.0, True),
            Sample(make(2, 3), 1.0, True)]


@op(kind="composite", method=False, inputs=("input",), samples=_native_dropout_samples)
def native_dropout(input, p, train):
    """``(output, mask)``: the kept elements (``mask``, bool) scaled by ``1 / (1 - p)``,
    the others zeroed; not ``train`` (``False``; None means training): a copy of ``input``
    and an all-True mask."""
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={1 - p}")
    if train is not False and input._dtype.kind < 2:     # (neither floating nor complex)
        raise RuntimeError(f"result type Float can't be cast to the desired output type "
                           f"{_type_name(input._dtype)}")
    if train is False or p == 0:
        return input.clone(), ones_like(input, dtype=bool_)
    if p == 1:
        return input * 0, zeros_like(input, dtype=bool_)
    mask = rand(tuple(input.shape), dtype=input.dtype, device=input.device) >= p
    return input * mask * (1 / (1 - p)), mask


__all__ += ["native_dropout"]
