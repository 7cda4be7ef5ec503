"""PyTorch's top-level names for ``nn.functional``'s ops under their aten signatures
(``torch.kl_div(input, target, reduction=0)``, ``torch.max_pool2d(input, kernel_size,
stride=[])``, ``torch.instance_norm(input, weight, bias, ...)`` ...): positional
arguments in aten's order, a loss's ``reduction`` as an int (0 none, 1 mean, 2 sum), and
no ``inplace``/``return_indices``.  Each calls the same op as ``nn.functional`` (so
autograd and vmap follow it); only the arguments are translated.

The losses' ``reduction`` defaults to 0 (no reduction): the aten schemas say 1, but
PyTorch's Python functions reduce nothing unless given one, and code ported from them
counts on that.
"""
import warnings

from microtensor import linalg
from microtensor._C.tensor import TensorBase
from microtensor.nn import functional as F
from microtensor.ops.registry import REGISTRY

__all__ = ["kl_div", "binary_cross_entropy_with_logits", "cosine_embedding_loss",
           "hinge_embedding_loss", "margin_ranking_loss", "poisson_nll_loss",
           "triplet_margin_loss", "instance_norm", "max_pool1d", "max_pool2d", "max_pool3d",
           "pixel_shuffle", "pixel_unshuffle", "grid_sampler_2d", "grid_sampler_3d",
           "frobenius_norm", "nuclear_norm"]

_REDUCTIONS = {1: "mean", 2: "sum"}   # at::Reduction; any other int reduces nothing


def _reduction(function, value, position):
    if not isinstance(value, int):
        raise TypeError(f"{function}(): argument 'reduction' (position {position}) must be "
                        f"int, not {type(value).__name__}")
    return _REDUCTIONS.get(value, "none")


# --------------------------------------------------------------------------- losses

def kl_div(input, target, reduction=0, *, log_target=False):
    return F.kl_div(input, target, reduction=_reduction("kl_div", reduction, 3),
                    log_target=log_target)


def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None,
                                     reduction=0):
    return F.binary_cross_entropy_with_logits(
        input, target, weight, pos_weight=pos_weight,
        reduction=_reduction("binary_cross_entropy_with_logits", reduction, 5))


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=0):
    return F.cosine_embedding_loss(
        input1, input2, target, margin,
        reduction=_reduction("cosine_embedding_loss", reduction, 5))


def hinge_embedding_loss(input, target, margin=1.0, reduction=0):
    return F.hinge_embedding_loss(input, target, margin,
                                  reduction=_reduction("hinge_embedding_loss", reduction, 4))


def margin_ranking_loss(input1, input2, target, margin=0.0, reduction=0):
    return F.margin_ranking_loss(input1, input2, target, margin,
                                 reduction=_reduction("margin_ranking_loss", reduction, 5))


def poisson_nll_loss(input, target, log_input, full, eps, reduction):
    return F.poisson_nll_loss(input, target, log_input, full, eps=eps,
                              reduction=_reduction("poisson_nll_loss", reduction, 6))


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False,
                        reduction=0):
    return F.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap,
                                 reduction=_reduction("triplet_margin_loss", reduction, 8))


# --------------------------------------------------------------------------- layers

def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum,
                  eps, cudnn_enabled):
    """``nn.functional.instance_norm`` (``cudnn_enabled``: accepted, unused)."""
    return F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats,
                           momentum, eps)


def _max_pool(function):
    def pool(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        # aten's empty ``stride`` means "the kernel size", nn.functional's None
        if not isinstance(stride, TensorBase) and stride is not None and \
                not isinstance(stride, int) and len(stride) == 0:
            stride = None
        return function(input, kernel_size, stride, padding, dilation, ceil_mode)
    pool.__name__ = pool.__qualname__ = function.__name__
    pool.__doc__ = f"``nn.functional.{function.__name__}`` without ``return_indices``."
    return pool


max_pool1d = _max_pool(F.max_pool1d)
max_pool2d = _max_pool(F.max_pool2d)
max_pool3d = _max_pool(F.max_pool3d)
pixel_shuffle = F.pixel_shuffle
pixel_unshuffle = F.pixel_unshuffle


def _grid_sampler(name, ndim):
    def sampler(input, grid, interpolation_mode, padding_mode, align_corners):
        if input.dim() != ndim:
            raise RuntimeError(f"{name}(): expected {ndim}D input and grid with same batch "
                               f"size, but got input with sizes {list(input.shape)} and grid "
                               f"with sizes {list(grid.shape)}")
        return REGISTRY["grid_sampler"](input, grid, interpolation_mode, padding_mode,
                                        align_corners)
    sampler.__name__ = sampler.__qualname__ = name
    sampler.__doc__ = (f"``grid_sampler`` of a {ndim}-D input (modes as ints: interpolation "
                       f"0 bilinear, 1 nearest, 2 bicubic; padding 0 zeros, 1 border, 2 "
                       f"reflection).")
    return sampler


grid_sampler_2d = _grid_sampler("grid_sampler_2d", 4)
grid_sampler_3d = _grid_sampler("grid_sampler_3d", 5)


# --------------------------------------------------------------------------- norms

def frobenius_norm(input, dim, keepdim=False):
    """Deprecated (as in PyTorch): ``linalg.vector_norm(input, 2, dim, keepdim)``."""
    warnings.warn("at::frobenius_norm is deprecated and it is just left for JIT compatibility. "
                  "It will be removed in a future PyTorch release. Please use "
                  "`linalg.vector_norm(A, 2., dim, keepdim)` instead", UserWarning,
                  stacklevel=2)
    return linalg.vector_norm(input, 2, dim, keepdim)


def nuclear_norm(input, dim=(-2, -1), keepdim=False):
    """Deprecated (as in PyTorch): ``linalg.matrix_norm(input, "nuc", dim, keepdim)``;
    ``nuclear_norm(input, keepdim)`` also works, as PyTorch's other overload."""
    warnings.warn("at::nuclear_norm is deprecated and it is just left for JIT compatibility. "
                  "It will be removed in a future PyTorch release. Please use "
                  "`linalg.matrix_norm(A, 'nuc', dim, keepdim)` instead", UserWarning,
                  stacklevel=2)
    if isinstance(dim, bool):
        dim, keepdim = (-2, -1), dim
    return linalg.matrix_norm(input, "nuc", dim, keepdim)
