"""Composite top-level functions built from registered ops, so autograd, vmap and the
``randomness`` setting of vmap apply to them through their parts: ``meshgrid``,
``broadcast_tensors``, and the random ops ``bernoulli``, ``normal``, ``multinomial``
(with the in-place ``bernoulli_``, ``normal_``, ``uniform_``)."""
from microtensor._C.tensor import TensorBase
from microtensor.ops.loops import _type_name


def _tensors(name, tensors):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    for i, t in enumerate(tensors):
        if not isinstance(t, TensorBase):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got "
                            f"{type(t).__name__}")
    return tuple(tensors)


def broadcast_tensors(*tensors):
    """Views of ``tensors`` expanded to their common broadcast shape."""
    tensors = _tensors("broadcast_tensors", tensors)
    ndim = max((t.dim() for t in tensors), default=0)
    out = [1] * ndim
    for k, t in enumerate(tensors):
        for i, n in enumerate(t.shape):
            j = ndim - t.dim() + i
            if n == out[j] or n == 1:
                continue
            if out[j] == 1:
                out[j] = n
                continue
            raise RuntimeError(f"The size of tensor a ({out[j]}) must match the size of tensor "
                               f"b ({n}) at non-singleton dimension {j}")
    return tuple(t if t.shape == tuple(out) else t.expand(out) for t in tensors)


def meshgrid(*tensors, indexing=None):
    """Coordinate grids from 1-D (or 0-D) tensors, as views (``expand`` of ``reshape``)."""
    tensors = _tensors("meshgrid", tensors)
    if indexing is None:
        import warnings
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the "
                      "indexing argument.", UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but "
                           f"received: {indexing}")
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    for t in tensors:
        if t.dim() > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list "
                               f"but got: {t}")
    for t in tensors[1:]:
        if t.dtype != tensors[0].dtype:
            raise RuntimeError("torch.meshgrid: Expected all tensors in the tensor list to "
                               "have the same dtype.")
    order = list(tensors)
    swap = indexing == "xy" and len(tensors) >= 2
    if swap:
        order[0], order[1] = order[1], order[0]
    sizes = [t.numel() for t in order]
    n = len(order)
    grids = []
    for i, t in enumerate(order):
        shape = [1] * n
        shape[i] = -1
        grids.append(t.reshape(*shape).expand(*sizes))
    if swap:
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


# --------------------------------------------------------------------------- random
def _any(cond):
    """``bool(cond.any())``, or False under vmap (value checks there would be data-dependent
    control flow, which vmap refuses)."""
    from microtensor.vmap.batched import active_levels
    if active_levels() or not cond.numel():
        return False
    return bool(cond.any())


def _rand_like(t, dtype=None, generator=None):
    from microtensor.ops.factory import rand_like
    return rand_like(t, dtype=dtype, generator=generator)


def bernoulli(input, p=None, *, generator=None, out=None):
    """Draws of 0/1 with probability ``input`` (or ``p``), in ``input``'s dtype."""
    from microtensor.autograd.grad_mode import no_grad
    if not isinstance(input, TensorBase):
        raise TypeError(f"bernoulli(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    if not input.is_floating_point():
        raise NotImplementedError(f"\"bernoulli_tensor_cpu_p_\" not implemented for "
                           f"'{_type_name(input.dtype)}'")
    with no_grad():
        if p is None:
            prob = input.detach()
            if _any(prob < 0) or _any(prob > 1):
                raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
        else:
            prob = p
            if not 0 <= float(p) <= 1:
                raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
        result = (_rand_like(input, generator=generator) < prob).to(input.dtype)
    if out is not None:
        return out.copy_(result)
    return result


def bernoulli_(self, p=0.5, *, generator=None):
    """Fill ``self`` with draws of 0/1 with probability ``p`` (a float or a tensor)."""
    from microtensor.autograd.grad_mode import no_grad
    with no_grad():
        if isinstance(p, TensorBase):
            prob = p.to(self.dtype) if p.is_floating_point() else p
            if _any(prob < 0) or _any(prob > 1):
                raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
        else:
            if not 0 <= p <= 1:
                raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
            prob = p
        u = _rand_like(self, dtype=None if self.is_floating_point() else _default_float(),
                       generator=generator)
        values = (u < prob).to(self.dtype)
    return self.copy_(values)   # tracked: a leaf that requires grad is refused, as in torch


def _default_float():
    from microtensor._C.tensor import get_default_dtype
    return get_default_dtype()


def uniform_(self, a=0.0, b=1.0, *, generator=None):
    """Fill ``self`` with draws from U(a, b)."""
    from microtensor.autograd.grad_mode import no_grad
    if not self.is_floating_point():
        raise NotImplementedError(f"\"check_uniform_bounds\" not implemented for "
                           f"'{_type_name(self.dtype)}'")
    if a > b:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={a} "
                           f"> to={b}")
    with no_grad():
        values = _rand_like(self, generator=generator) * (b - a) + a
    return self.copy_(values)


def normal_(self, mean=0.0, std=1.0, *, generator=None):
    """Fill ``self`` with draws from N(mean, std²)."""
    from microtensor.autograd.grad_mode import no_grad
    from microtensor.ops.factory import randn_like
    if not self.is_floating_point():
        raise NotImplementedError(f"\"normal_kernel_cpu\" not implemented for "
                           f"'{_type_name(self.dtype)}'")
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    with no_grad():
        values = randn_like(self, generator=generator) * std + mean
    return self.copy_(values)


def normal(mean, std=1.0, size=None, *, generator=None, out=None, dtype=None, device=None,
           requires_grad=False):
    """Draws from N(mean, std²): ``mean`` and ``std`` tensors or floats (broadcast), or
    floats and a ``size``.  Differentiable in a tensor ``mean`` and ``std``."""
    from microtensor.ops.factory import randn, randn_like
    mt_, st_ = isinstance(mean, TensorBase), isinstance(std, TensorBase)
    if size is not None:
        if mt_ or st_:
            raise TypeError("normal() received an invalid combination of arguments")
        if std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
        result = randn(size, generator=generator, dtype=dtype, device=device) * std + mean
        result.requires_grad_(requires_grad)
    elif not mt_ and not st_:
        raise TypeError("normal() received an invalid combination of arguments - got "
                        f"({type(mean).__name__}, {type(std).__name__}), but expected one of: "
                        "(Tensor mean, Tensor std), (Tensor mean, float std), "
                        "(float mean, Tensor std), (float mean, float std, tuple of ints size)")
    else:
        if st_:
            if _any(std.detach() < 0):
                raise RuntimeError("normal expects all elements of std >= 0.0")
        elif std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
        if mt_ and not mean.is_floating_point():
            raise NotImplementedError(f"\"normal_kernel_cpu\" not implemented for "
                               f"'{_type_name(mean.dtype)}'")
        if mt_ and st_:
            m, s = broadcast_tensors(mean, std)
            base = m
        else:
            base = mean if mt_ else std
        noise = randn_like(base.detach(), generator=generator)
        result = noise * std + mean
    if out is not None:
        return out.copy_(result)
    return result


def multinomial(input, num_samples, replacement=False, *, generator=None, out=None):
    """``num_samples`` category indices per row of the (unnormalised) weights ``input``."""
    from microtensor._C.tensor import int64
    from microtensor.autograd.grad_mode import no_grad
    if not isinstance(input, TensorBase):
        raise TypeError(f"multinomial(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    if input.dim() not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not input.is_floating_point():
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{_type_name(input.dtype)}")
    from microtensor.ops.arguments import int_arg
    if int_arg(num_samples, "num_samples") <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    n_cat = input.shape[-1]
    if not replacement and num_samples > n_cat:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    with no_grad():
        w = input.detach()
        w2 = w if w.dim() == 2 else w.unsqueeze(0)
        if _any(w2 < 0) or _any(~w2.isfinite()):
            raise RuntimeError("probability tensor contains either `inf`, `nan` or "
                               "element < 0")
        if _any(w2.sum(-1) <= 0):
            raise RuntimeError("invalid multinomial distribution (sum of probabilities "
                               "<= 0)")
        if replacement:
            cdf = w2.cumsum(-1)
            cdf = cdf / cdf[:, -1:]
            u = _rand_like(w2[:, :1].expand(w2.shape[0], num_samples).contiguous(),
                           generator=generator)
            # index = number of cdf entries <= u (cdf entries below u), capped to the last.
            idx = (cdf.unsqueeze(1) <= u.unsqueeze(2)).to(int64).sum(-1)
            idx = idx.clamp(max=n_cat - 1)
        else:
            # Gumbel top-k: keys log(u) / w; the largest num_samples keys are a draw without
            # replacement proportional to w (zero weights never chosen).
            u = _rand_like(w2, generator=generator)
            keys = u.log() / w2
            idx = keys.topk(num_samples, dim=-1).indices
        if w.dim() == 1:
            idx = idx.squeeze(0)
    if out is not None:
        return out.copy_(idx)
    return idx


# --------------------------------------------------------------------------- random fills
# PyTorch's in-place draws from other distributions, each a transform of ``rand_like`` (or
# ``randint``/``randn_like``) written with ``copy_``: a leaf that requires grad is refused,
# the version counter moves once, and under vmap the draws follow ``randomness``
# ("error" refuses them) through the random ops they call.

_MANTISSA_DIGITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def _refuse_discrete(self, distribution, dtype_name):
    """PyTorch's refusal of a continuous distribution's fill of an integer tensor (its
    messages name the dtype differently: ``dtype_name`` gives it)."""
    if not self.is_floating_point():
        raise RuntimeError(f"{distribution} distribution is a continuous probability "
                           f"distribution. dtype must be a floating point but you specified "
                           f"{dtype_name(self.dtype)}")


def _uniform_open(self, generator):
    """Draws in (0, 1], in ``self``'s dtype when floating (float64 otherwise)."""
    from microtensor._C.tensor import float64
    u = _rand_like(self, dtype=None if self.is_floating_point() else float64,
                   generator=generator)
    return 1 - u


def _random_bounds(self, low, high):
    """``random_``'s range [low, high): the defaults and the dtype's bounds as PyTorch."""
    from microtensor._dtype import info, iinfo
    name = self.dtype.name
    if name == "bool":
        top = 1
    elif self.is_floating_point():
        top = 2 ** _MANTISSA_DIGITS[name]
    else:
        top = iinfo(self.dtype).max
    if high is None:
        high = top + 1
    elif not self.is_floating_point() and name != "bool":
        bounds = iinfo(self.dtype)
        if not bounds.min <= low <= bounds.max:
            raise RuntimeError(f"from is out of bounds for {info(self.dtype).cpp_name}")
        if not bounds.min <= high - 1 <= bounds.max:
            raise RuntimeError(f"to - 1 is out of bounds for {info(self.dtype).cpp_name}")
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} "
                           f">= to={high}")
    return low, high


def random_(self, *bounds, generator=None, **named):
    """Fill ``self`` with integers drawn uniformly from [from, to): ``random_(to)`` is
    [0, to), ``random_(from, to)`` (``to`` None: no upper bound); with no bound, up to the
    largest integer of the dtype (for floats, the largest of the contiguous integers its
    mantissa holds), inclusive."""
    from microtensor.autograd.grad_mode import no_grad
    from microtensor.ops.factory import randint
    unknown = set(named) - {"from", "to"}
    if unknown or len(bounds) > 2:
        raise TypeError(f"random_() received an invalid combination of arguments - got "
                        f"{len(bounds)} positional and {sorted(named)} keyword arguments")
    if len(bounds) == 1 and not named:
        low, high = 0, bounds[0]                      # random_(to)
    else:
        low, high = tuple(bounds) + (0, None)[len(bounds):]
    low, high = _random_bounds(self, named.get("from", low), named.get("to", high))
    with no_grad():
        values = randint(low, high, tuple(self.shape), generator=generator,
                         dtype=self.dtype, device=self.device)
    return self.copy_(values)


def exponential_(self, lambd=1.0, *, generator=None):
    """Fill ``self`` with draws from Exp(``lambd``): ``-log(u) / lambd``, u in (0, 1]."""
    from microtensor.autograd.grad_mode import no_grad
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    _refuse_discrete(self, "Exponential", _type_name)
    with no_grad():
        values = _uniform_open(self, generator).log() * (-1.0 / lambd)
    return self.copy_(values)


def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """Fill ``self`` with draws from Cauchy(``median``, ``sigma``):
    ``median + sigma * tan(pi * (u - 1/2))``."""
    import math
    from microtensor._dtype import info
    from microtensor.autograd.grad_mode import no_grad
    if not sigma > 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma}")
    _refuse_discrete(self, "Cauchy", lambda dtype: info(dtype).cpp_name)
    with no_grad():
        values = ((_uniform_open(self, generator) - 0.5) * math.pi).tan() * sigma + median
    return self.copy_(values)


def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """Fill ``self`` with ``exp`` of draws from N(``mean``, ``std``²)."""
    from microtensor.autograd.grad_mode import no_grad
    from microtensor.ops.factory import randn_like
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std}")
    if not self.is_floating_point():
        raise NotImplementedError(f"\"log_normal_cpu\" not implemented for "
                                  f"'{_type_name(self.dtype)}'")
    with no_grad():
        values = (randn_like(self, generator=generator) * std + mean).exp()
    return self.copy_(values)


def geometric_(self, p, *, generator=None):
    """Fill ``self`` with draws from Geometric(``p``): the number of trials up to the first
    success, ``ceil(log(u) / log(1 - p))`` (at least 1), for any numeric dtype."""
    import math
    from microtensor.autograd.grad_mode import no_grad
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    if self.dtype.name == "bool":
        raise NotImplementedError("\"geometric_cpu\" not implemented for 'Bool'")
    with no_grad():
        trials = (_uniform_open(self, generator).log() / math.log1p(-p)).ceil().clamp_min(1)
    return self.copy_(trials)


def install(tensor_class, namespace):
    for name in ("broadcast_tensors", "meshgrid", "bernoulli", "normal", "multinomial"):
        namespace[name] = globals()[name]
    tensor_class.bernoulli = lambda self, p=None, *, generator=None: bernoulli(
        self, p, generator=generator)
    tensor_class.bernoulli_ = bernoulli_
    tensor_class.normal_ = normal_
    tensor_class.uniform_ = uniform_
    for fill in (random_, exponential_, cauchy_, log_normal_, geometric_):
        setattr(tensor_class, fill.__name__, fill)
    tensor_class.multinomial = lambda self, num_samples, replacement=False, *, generator=None: \
        multinomial(self, num_samples, replacement, generator=generator)
