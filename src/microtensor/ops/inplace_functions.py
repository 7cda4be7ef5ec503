"""PyTorch's in-place ops that are top-level functions too (``torch.exp_(x)``): each
``microtensor.<name>`` below is the registry's in-place op that the Tensor method calls,
so version counters, autograd and vmap are the method's own."""
from microtensor.ops.registry import REGISTRY

TOPLEVEL_INPLACE = (
    "abs_", "acos_", "acosh_", "addmv_", "asin_", "asinh_", "atan_", "atanh_", "ceil_",
    "clamp_", "clamp_max_", "clamp_min_", "clip_", "cos_", "cosh_", "deg2rad_", "erf_",
    "erfc_", "exp2_", "exp_", "expm1_", "floor_", "frac_", "gcd_", "i0_", "index_put_",
    "lcm_", "log10_", "log1p_", "log2_", "log_", "logit_", "nan_to_num_", "neg_", "rad2deg_",
    "reciprocal_", "relu_", "round_", "rsqrt_", "sigmoid_", "sin_", "sinc_", "sinh_", "sqrt_",
    "square_", "tan_", "tanh_", "threshold_", "trunc_", "xlogy_",
)

for _name in TOPLEVEL_INPLACE:
    REGISTRY[_name].function = True
