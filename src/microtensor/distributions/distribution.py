"""``Distribution``, the base class of every distribution (PyTorch's
``torch.distributions.Distribution``): batch and event shapes, argument and sample
validation, and the interface (sample/rsample/log_prob/entropy/mean/...) subclasses fill.

Everything is written in microtensor ops, so autograd, ``vmap`` and per-sample gradients
go through a distribution's methods as through any other code."""
import warnings

import microtensor as mt
from microtensor.distributions import constraints
from microtensor.distributions.utils import is_all_true, lazy_property

__all__ = ["Distribution"]


class Distribution:
    """The abstract base class for probability distributions.

    ``batch_shape``: the shape over which parameters are batched; ``event_shape``: the
    shape of one sample; ``validate_args``: whether to check arguments and values
    (``None``: the class default, see ``set_default_validate_args``)."""

    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value):
        """Turn argument validation on or off for every distribution (default: on, as
        Python's ``assert``, i.e. off under ``python -O``)."""
        if value not in [True, False]:
            raise ValueError
        Distribution._validate_args = value

    def __init__(self, batch_shape=mt.Size(), event_shape=mt.Size(), validate_args=None):
        self._batch_shape = mt.Size(batch_shape)
        self._event_shape = mt.Size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            try:
                arg_constraints = self.arg_constraints
            except NotImplementedError:
                arg_constraints = {}
                warnings.warn(f"{self.__class__} does not define `arg_constraints`. Please set "
                              "`arg_constraints = {}` or initialize the distribution with "
                              "`validate_args=False` to turn off validation.", stacklevel=2)
            for param, constraint in arg_constraints.items():
                if constraints.is_dependent(constraint):
                    continue   # cannot be checked
                if param not in self.__dict__ and isinstance(getattr(type(self), param),
                                                             lazy_property):
                    continue   # derived lazily from a checked parameter
                value = getattr(self, param)
                if not is_all_true(constraint.check(value)):
                    raise ValueError(
                        f"Expected parameter {param} ({type(value).__name__} of shape "
                        f"{tuple(value.shape)}) of distribution {self!r} to satisfy the "
                        f"constraint {constraint!r}, but found invalid values:\n{value}")
        super().__init__()

    def expand(self, batch_shape, _instance=None):
        """A new distribution with batch shape ``batch_shape``: its parameters are
        ``expand``-ed views (no copy, no new validation)."""
        raise NotImplementedError

    @property
    def batch_shape(self):
        return self._batch_shape

    @property
    def event_shape(self):
        return self._event_shape

    @property
    def arg_constraints(self):
        """A dict from argument names to the ``Constraint`` each must satisfy."""
        raise NotImplementedError

    @property
    def support(self):
        """The ``Constraint`` of the distribution's support."""
        raise NotImplementedError

    @property
    def mean(self):
        raise NotImplementedError

    @property
    def mode(self):
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError

    @property
    def stddev(self):
        return self.variance.sqrt()

    def sample(self, sample_shape=mt.Size()):
        """A ``sample_shape + batch_shape + event_shape`` sample, outside autograd."""
        with mt.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=mt.Size()):
        """A reparameterized sample: gradients flow to the parameters."""
        raise NotImplementedError

    def sample_n(self, n):
        """``sample((n,))`` (deprecated)."""
        warnings.warn("`sample_n(n)` will be deprecated. Use `sample((n,))` instead.",
                      FutureWarning, stacklevel=2)
        return self.sample(mt.Size((n,)))

    def log_prob(self, value):
        """The log of the density or mass function at ``value``."""
        raise NotImplementedError

    def cdf(self, value):
        """The cumulative distribution function at ``value``."""
        raise NotImplementedError

    def icdf(self, value):
        """The inverse cumulative distribution function at ``value``."""
        raise NotImplementedError

    def enumerate_support(self, expand=True):
        """Every value of a discrete distribution's support along dim 0:
        ``(cardinality,) + batch_shape + event_shape`` (batch dims of size 1 unless
        ``expand``)."""
        raise NotImplementedError

    def entropy(self):
        """The entropy, of shape ``batch_shape``."""
        raise NotImplementedError

    def perplexity(self):
        return mt.exp(self.entropy())

    def _extended_shape(self, sample_shape=mt.Size()):
        """``sample_shape + batch_shape + event_shape``."""
        return mt.Size(tuple(sample_shape) + tuple(self._batch_shape)
                       + tuple(self._event_shape))

    def _validate_sample(self, value):
        """Refuse a ``value`` whose rightmost dims do not match the event shape, which
        does not broadcast with ``batch_shape + event_shape``, or which lies outside the
        support (PyTorch's ValueErrors)."""
        if not isinstance(value, mt.Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        event_dim_start = len(value.size()) - len(self._event_shape)
        if value.size()[event_dim_start:] != self._event_shape:
            raise ValueError(f"The right-most size of value must match event_shape: "
                             f"{value.size()} vs {self._event_shape}.")
        actual_shape = value.size()
        expected_shape = mt.Size(self._batch_shape + self._event_shape)
        for i, j in zip(reversed(actual_shape), reversed(expected_shape)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: "
                                 f"{actual_shape} vs {expected_shape}.")
        try:
            support = self.support
        except NotImplementedError:
            warnings.warn(f"{self.__class__} does not define `support` to enable sample "
                          "validation. Please initialize the distribution with "
                          "`validate_args=False` to turn off validation.", stacklevel=2)
            return
        if not is_all_true(support.check(value)):
            raise ValueError(
                f"Expected value argument ({type(value).__name__} of shape "
                f"{tuple(value.shape)}) to be within the support ({support!r}) of the "
                f"distribution {self!r}, but found invalid values:\n{value}")

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(
                f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a custom "
                "__init__ method must also define a custom .expand() method.")
        return self.__new__(type(self)) if _instance is None else _instance

    def _expanded(self, cls, batch_shape, _instance, names, param_event_shape=()):
        """``expand``'s common body: a ``cls`` instance whose parameters ``names`` (those
        this instance holds) are expanded to ``batch_shape + param_event_shape``."""
        new = self._get_checked_instance(cls, _instance)
        batch_shape = mt.Size(batch_shape)
        for name in names:
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name].expand(
                    tuple(batch_shape) + tuple(param_event_shape)))
        if "_param" in self.__dict__:   # the parameter given (probs or logits)
            new._param = new.__dict__["logits" if "logits" in new.__dict__ else "probs"]
        Distribution.__init__(new, batch_shape, self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def __repr__(self):
        params = [(k, self.__dict__[k]) for k in self.arg_constraints if k in self.__dict__]
        args_string = ", ".join(f"{name}: {value if value.numel() == 1 else value.size()}"
                                for name, value in params)
        return self.__class__.__name__ + "(" + args_string + ")"
