"""Random draws with tensor parameters: ``poisson(rates)`` and ``binomial(count, prob)``.

Each draws one value per element with the NumPy generator behind microtensor's generator
(vectorised over the whole tensor; a GPU tensor's draws are made on the host).  Under vmap
their rule (``_sampling_rule``) lays every vmap level out physically at once, draws per
sample or shares the draws as each level's ``randomness`` says, and wraps the result back.
As in PyTorch, ``poisson``'s gradient is zero and ``binomial`` has none.
"""
import numpy as np

from microtensor._C.tensor import TensorBase, from_array
from microtensor.ops.factory import _fill_from_host, default_generator
from microtensor.ops.loops import _type_name
from microtensor.ops.registry import Sample, op
from microtensor.ops.shape import broadcast_shapes
from microtensor.vmap.batched import active_levels, wrap
from microtensor.vmap.helpers import every_level_in_front

__all__ = ["poisson", "binomial"]

# NumPy's Poisson sampler refuses larger rates (and int64 bounds binomial counts): beyond,
# the normal approximation, exact to far below a float's resolution of the result
_NUMPY_MAX_RATE = 1e18


def _host(t):
    return np.asarray(t.cpu()._array(), dtype=np.float64)


def _result_like(values, like):
    """``values`` (float64, host) as a new tensor of ``like``'s dtype and device."""
    out = like.new_empty(values.shape)
    if out._numel:
        _fill_from_host(out, values)
    return out


def _require_tensor(value, fn, name, position):
    if not isinstance(value, TensorBase):
        raise TypeError(f"{fn}(): argument '{name}' (position {position}) must be Tensor, "
                        f"not {type(value).__name__}")


def _poisson_draws(rng, rates):
    small = rates <= _NUMPY_MAX_RATE
    draws = np.asarray(rng.poisson(np.where(small, rates, 0.0)), dtype=np.float64)
    if not small.all():
        big = rates[~small]
        draws[~small] = np.round(big + np.sqrt(big) * rng.standard_normal(big.shape))
    return draws


def _poisson_samples(make):
    return [Sample(make(3, 4, low=0.0, high=5.0)), Sample(make(5, low=0.0, high=30.0)),
            Sample(make(low=0.5, high=2.0))]


@op(inputs=("input",), method=False, random=True, samples=_poisson_samples)
def poisson(input, generator=None):
    """Draws from Poisson(``input``): the number of events at each element's rate, in
    ``input``'s (floating) dtype."""
    _require_tensor(input, "poisson", "input", 1)
    if not input.is_floating_point():
        raise NotImplementedError(f"\"poisson_cpu\" not implemented for "
                                  f"'{_type_name(input.dtype)}'")
    rates = _host(input)
    if not (rates >= 0).all():      # NaN too
        raise RuntimeError("invalid Poisson rate, expected rate to be non-negative")
    return _result_like(_poisson_draws((generator or default_generator)._rng, rates), input)


@poisson.def_derivative("input")
def poisson(grad):
    # PyTorch's convention: no gradient flows through the draw
    return grad.new_zeros(grad.shape)


def _binomial_draws(rng, counts, probs):
    trials = np.floor(np.nan_to_num(counts, nan=0.0, posinf=0.0)).clip(0, None)
    chances = np.nan_to_num(probs, nan=0.0).clip(0.0, 1.0)
    exact = trials <= _NUMPY_MAX_RATE
    draws = np.asarray(rng.binomial(np.where(exact, trials, 0).astype(np.int64), chances),
                       dtype=np.float64)
    if not exact.all():
        n, p = trials[~exact], chances[~exact]
        draws[~exact] = np.round(n * p + np.sqrt(n * p * (1 - p)) *
                                 rng.standard_normal(n.shape)).clip(0, n)
    draws[np.isnan(counts) | np.isnan(probs)] = np.nan
    return draws


def _binomial_samples(make):
    return [Sample(make(3, 4, low=0.0, high=20.0).floor(), make(3, 4, low=0.0, high=1.0)),
            Sample(make(5, low=1.0, high=9.0).floor(), make(5, low=0.0, high=1.0))]


@op(inputs=("count", "prob"), method=False, random=True, differentiable=False,
    samples=_binomial_samples)
def binomial(count, prob, generator=None):
    """Draws from Binomial(``count``, ``prob``): the successes in ``floor(count)`` trials
    of success chance ``prob`` (clipped to [0, 1]), in ``count``'s (float32 or float64)
    dtype; the two broadcast."""
    _require_tensor(count, "binomial", "count", 1)
    _require_tensor(prob, "binomial", "prob", 2)
    for name, t in (("count", count), ("prob", prob)):
        if not t.is_floating_point():
            raise ValueError(f"binomial only supports floating-point dtypes for {name}, got: "
                             f"{_type_name(t.dtype)}")
    if count.dtype is not prob.dtype:
        raise RuntimeError(f"Found dtype {_type_name(prob.dtype)} but expected "
                           f"{_type_name(count.dtype)}")
    if count.dtype.itemsize < 4:
        raise NotImplementedError(f"\"binomial_cpu\" not implemented for "
                                  f"'{_type_name(count.dtype)}'")
    shape = broadcast_shapes(count.shape, prob.shape)
    draws = _binomial_draws((generator or default_generator)._rng,
                            _host(count.expand(shape)), _host(prob.expand(shape)))
    return _result_like(draws, count)


# --------------------------------------------------------------------------- vmap

_SAME_BATCHED = ("Vmap does not currently support same randomness with a batched tensor "
                 "input. Please file an issue with functorch")


def _sampling_rule(op, level, args, kwargs):
    """Every tensor parameter laid out with a leading dim per vmap level, its per-sample
    dims right-aligned; one draw over the broadcast whole (a level of ``"different"``
    randomness gets its own draws, one of ``"same"`` shares them and refuses a batched
    parameter, as PyTorch); the result wrapped back level by level."""
    levels = active_levels()
    bound = op.bind(args, kwargs)
    names = [name for name in op.inputs if isinstance(bound.get(name), TensorBase)]
    rank = max(bound[name].dim() for name in names)
    for name in names:
        logical_rank = bound[name].dim()
        value, batched = every_level_in_front(bound[name], levels)
        if any(b and lv.randomness == "same" for b, lv in zip(batched, levels)):
            raise RuntimeError(_SAME_BATCHED)
        sizes = value._sizes
        bound[name] = value.view(sizes[:len(levels)] + (1,) * (rank - logical_rank) +
                                 sizes[len(levels):])
    lead = tuple(lv.size if lv.randomness == "different" else 1 for lv in levels)
    shape = np.broadcast_shapes(*(tuple(bound[name].shape) for name in names))
    for name in names:
        bound[name] = bound[name].expand(lead + shape[len(levels):])
    result = op.kernel(**bound)
    for lv in levels:                    # outermost first: each wraps the ones before
        result = wrap(result, 0, lv.number) if lv.randomness == "different" else \
            result.squeeze(0)
    return result


poisson.def_batch_rule(_sampling_rule)
binomial.def_batch_rule(_sampling_rule)
