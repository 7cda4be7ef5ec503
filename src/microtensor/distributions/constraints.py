"""Constraints (PyTorch's ``torch.distributions.constraints``): objects naming the region
where a parameter or a sample is valid. ``check(value)`` gives a boolean tensor of the
batch shape (the rightmost ``event_dim`` dimensions folded); distributions use them in
``arg_constraints`` and ``support`` to validate their arguments."""
import microtensor as mt

__all__ = ["Constraint", "boolean", "cat", "corr_cholesky", "dependent", "dependent_property",
           "greater_than", "greater_than_eq", "independent", "integer_interval", "interval",
           "half_open_interval", "is_dependent", "less_than", "lower_cholesky",
           "lower_triangular", "MixtureSameFamilyConstraint", "multinomial", "nonnegative",
           "nonnegative_integer", "one_hot", "positive", "positive_semidefinite",
           "positive_definite", "positive_integer", "real", "real_vector", "simplex", "square",
           "stack", "symmetric", "unit_interval"]


class Constraint:
    """A region over which a variable is valid. ``is_discrete``: whether the region is
    discrete; ``event_dim``: how many rightmost dimensions make one event (``check``
    folds them)."""

    is_discrete = False
    event_dim = 0

    def check(self, value):
        """A boolean tensor of ``sample_shape + batch_shape``: whether each event of
        ``value`` satisfies the constraint."""
        raise NotImplementedError

    def __repr__(self):
        return self.__class__.__name__[1:] + "()"


class _Dependent(Constraint):
    """A placeholder for variables whose support depends on other variables: it cannot
    be checked. ``is_discrete`` and ``event_dim`` may be given when known statically."""

    def __init__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        self._is_discrete = is_discrete
        self._event_dim = event_dim
        super().__init__()

    @property
    def is_discrete(self):
        if self._is_discrete is NotImplemented:
            raise NotImplementedError(".is_discrete cannot be determined statically")
        return self._is_discrete

    @property
    def event_dim(self):
        if self._event_dim is NotImplemented:
            raise NotImplementedError(".event_dim cannot be determined statically")
        return self._event_dim

    def __call__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        """``constraints.dependent(is_discrete=True, event_dim=1)``"""
        if is_discrete is NotImplemented:
            is_discrete = self._is_discrete
        if event_dim is NotImplemented:
            event_dim = self._event_dim
        return _Dependent(is_discrete=is_discrete, event_dim=event_dim)

    def check(self, x):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint):
    """Whether ``constraint`` is a dependent (uncheckable) one."""
    return isinstance(constraint, _Dependent)


class _DependentProperty(property, _Dependent):
    """A property on an instance (``Uniform(0, 1).support``), a dependent constraint on
    the class (``Uniform.support``)."""

    def __init__(self, fn=None, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        property.__init__(self, fn)
        self._is_discrete = is_discrete
        self._event_dim = event_dim

    def __call__(self, fn):
        """``@constraints.dependent_property(is_discrete=True, event_dim=1)``"""
        return _DependentProperty(fn, is_discrete=self._is_discrete,
                                  event_dim=self._event_dim)


class _IndependentConstraint(Constraint):
    """``base_constraint`` with ``reinterpreted_batch_ndims`` more dimensions folded into
    each event: an event is valid when all its entries are."""

    def __init__(self, base_constraint, reinterpreted_batch_ndims):
        if not isinstance(base_constraint, Constraint):
            raise AssertionError(f"base_constraint must be a Constraint, got "
                                 f"{type(base_constraint).__name__}")
        if not isinstance(reinterpreted_batch_ndims, int):
            raise AssertionError(f"reinterpreted_batch_ndims must be an int, got "
                                 f"{type(reinterpreted_batch_ndims).__name__}")
        if reinterpreted_batch_ndims < 0:
            raise AssertionError(f"reinterpreted_batch_ndims must be >= 0, got "
                                 f"{reinterpreted_batch_ndims}")
        self.base_constraint = base_constraint
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims
        super().__init__()

    @property
    def is_discrete(self):
        return self.base_constraint.is_discrete

    @property
    def event_dim(self):
        return self.base_constraint.event_dim + self.reinterpreted_batch_ndims

    def check(self, value):
        result = self.base_constraint.check(value)
        if result.dim() < self.reinterpreted_batch_ndims:
            expected = self.base_constraint.event_dim + self.reinterpreted_batch_ndims
            raise ValueError(f"Expected value.dim() >= {expected} but got {value.dim()}")
        kept = tuple(result.shape[:result.dim() - self.reinterpreted_batch_ndims])
        return result.reshape(kept + (-1,)).all(-1)

    def __repr__(self):
        return (f"{self.__class__.__name__[1:]}({self.base_constraint!r}, "
                f"{self.reinterpreted_batch_ndims})")


class MixtureSameFamilyConstraint(Constraint):
    """The support of a ``MixtureSameFamily``: a value is valid when it lies in the
    support of every component (the component dim is added back before checking)."""

    def __init__(self, base_constraint):
        if not isinstance(base_constraint, Constraint):
            raise AssertionError(f"base_constraint must be a Constraint, got "
                                 f"{type(base_constraint).__name__}")
        self.base_constraint = base_constraint
        super().__init__()

    @property
    def is_discrete(self):
        return self.base_constraint.is_discrete

    @property
    def event_dim(self):
        return self.base_constraint.event_dim

    def check(self, value):
        result = self.base_constraint.check(value.unsqueeze(-1 - self.event_dim))
        if value.dim() < self.event_dim:
            raise ValueError(f"Expected value.dim() >= {self.event_dim} but got {value.dim()}")
        kept = tuple(result.shape[:value.dim() - self.event_dim])
        return result.reshape(kept + (-1,)).all(-1)

    def __repr__(self):
        return f"{self.__class__.__name__}({self.base_constraint!r})"


class _Boolean(Constraint):
    """The two values ``{0, 1}``."""

    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _OneHot(Constraint):
    """One-hot vectors."""

    is_discrete = True
    event_dim = 1

    def check(self, value):
        is_boolean = (value == 0) | (value == 1)
        return is_boolean.all(-1) & value.sum(-1).eq(1)


def _bounds_repr(constraint, **bounds):
    return (constraint.__class__.__name__[1:] + "("
            + ", ".join(f"{name}={value}" for name, value in bounds.items()) + ")")


class _IntegerInterval(Constraint):
    """Integers in ``[lower_bound, upper_bound]``."""

    is_discrete = True

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound = lower_bound
        self.upper_bound = upper_bound
        super().__init__()

    def check(self, value):
        return (value % 1 == 0) & (self.lower_bound <= value) & (value <= self.upper_bound)

    def __repr__(self):
        return _bounds_repr(self, lower_bound=self.lower_bound, upper_bound=self.upper_bound)


class _IntegerGreaterThan(Constraint):
    """Integers ``>= lower_bound``."""

    is_discrete = True

    def __init__(self, lower_bound):
        self.lower_bound = lower_bound
        super().__init__()

    def check(self, value):
        return (value % 1 == 0) & (value >= self.lower_bound)

    def __repr__(self):
        return _bounds_repr(self, lower_bound=self.lower_bound)


class _Real(Constraint):
    """The extended real line (NaN excluded)."""

    def check(self, value):
        return value == value


class _GreaterThan(Constraint):
    """Reals ``> lower_bound``."""

    def __init__(self, lower_bound):
        self.lower_bound = lower_bound
        super().__init__()

    def check(self, value):
        return self.lower_bound < value

    def __repr__(self):
        return _bounds_repr(self, lower_bound=self.lower_bound)


class _GreaterThanEq(_GreaterThan):
    """Reals ``>= lower_bound``."""

    def check(self, value):
        return self.lower_bound <= value


class _LessThan(Constraint):
    """Reals ``< upper_bound``."""

    def __init__(self, upper_bound):
        self.upper_bound = upper_bound
        super().__init__()

    def check(self, value):
        return value < self.upper_bound

    def __repr__(self):
        return _bounds_repr(self, upper_bound=self.upper_bound)


class _Interval(Constraint):
    """Reals in ``[lower_bound, upper_bound]``."""

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound = lower_bound
        self.upper_bound = upper_bound
        super().__init__()

    def check(self, value):
        return (self.lower_bound <= value) & (value <= self.upper_bound)

    def __repr__(self):
        return _bounds_repr(self, lower_bound=self.lower_bound, upper_bound=self.upper_bound)


class _HalfOpenInterval(_Interval):
    """Reals in ``[lower_bound, upper_bound)``."""

    def check(self, value):
        return (self.lower_bound <= value) & (value < self.upper_bound)


class _Simplex(Constraint):
    """Nonnegative vectors along the last dimension that sum to 1."""

    event_dim = 1

    def check(self, value):
        return mt.all(value >= 0, dim=-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _Multinomial(Constraint):
    """Nonnegative integer vectors summing to at most ``upper_bound``."""

    is_discrete = True
    event_dim = 1

    def __init__(self, upper_bound):
        self.upper_bound = upper_bound
        super().__init__()

    def check(self, x):
        return (x >= 0).all(dim=-1) & (x.sum(dim=-1) <= self.upper_bound)


def _is_lower_triangular(value):
    return (value.tril() == value).reshape(tuple(value.shape[:-2]) + (-1,)).all(-1)


class _LowerTriangular(Constraint):
    """Lower-triangular square matrices."""

    event_dim = 2

    def check(self, value):
        return _is_lower_triangular(value)


class _LowerCholesky(Constraint):
    """Lower-triangular square matrices with a positive diagonal."""

    event_dim = 2

    def check(self, value):
        positive_diagonal = (value.diagonal(dim1=-2, dim2=-1) > 0).all(-1)
        return _is_lower_triangular(value) & positive_diagonal


class _CorrCholesky(Constraint):
    """Lower-Cholesky factors of correlation matrices: rows of unit length."""

    event_dim = 2

    def check(self, value):
        tol = mt.finfo(value.dtype).eps * value.size(-1) * 10   # an adjustable fudge factor
        row_norm = mt.linalg.norm(value.detach(), dim=-1)
        unit_row_norm = (row_norm - 1.0).abs().le(tol).all(dim=-1)
        return _LowerCholesky().check(value) & unit_row_norm


class _Square(Constraint):
    """Square matrices."""

    event_dim = 2

    def check(self, value):
        return mt.full(tuple(value.shape[:-2]), value.shape[-2] == value.shape[-1],
                       dtype=mt.bool, device=value.device)


class _Symmetric(_Square):
    """Symmetric square matrices."""

    def check(self, value):
        square_check = super().check(value)
        if not square_check.all():
            return square_check
        return mt.isclose(value, value.mT, atol=1e-6).all(-2).all(-1)


class _SignedSpectrum(_Symmetric):
    """Symmetric matrices whose eigenvalues are all > 0 (``strict``) or >= 0."""

    strict = False

    def check(self, value):
        sym_check = super().check(value)
        if not sym_check.all():
            return sym_check
        eigenvalues = mt.linalg.eigvalsh(value)
        return (eigenvalues.gt(0) if self.strict else eigenvalues.ge(0)).all(-1)


class _PositiveSemidefinite(_SignedSpectrum):
    """Positive semidefinite matrices."""


class _PositiveDefinite(_SignedSpectrum):
    """Positive definite matrices."""

    strict = True


class _Cat(Constraint):
    """``cseq[i]`` on consecutive pieces of ``lengths[i]`` entries along ``dim``."""

    def __init__(self, cseq, dim=0, lengths=None):
        if not all(isinstance(c, Constraint) for c in cseq):
            raise AssertionError("All elements of cseq must be Constraint instances")
        self.cseq = list(cseq)
        self.lengths = list([1] * len(self.cseq) if lengths is None else lengths)
        if len(self.lengths) != len(self.cseq):
            raise AssertionError(f"lengths ({len(self.lengths)}) must match cseq "
                                 f"({len(self.cseq)})")
        self.dim = dim
        super().__init__()

    @property
    def is_discrete(self):
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self):
        return max(c.event_dim for c in self.cseq)

    def check(self, value):
        _check_dim(self.dim, value, "value")
        checks, start = [], 0
        for constr, length in zip(self.cseq, self.lengths):
            checks.append(constr.check(value.narrow(self.dim, start, length)))
            start = start + length
        return mt.cat(checks, self.dim)


class _Stack(Constraint):
    """``cseq[i]`` on the ``i``-th slice along ``dim``."""

    def __init__(self, cseq, dim=0):
        if not all(isinstance(c, Constraint) for c in cseq):
            raise AssertionError("All elements of cseq must be Constraint instances")
        self.cseq = list(cseq)
        self.dim = dim
        super().__init__()

    @property
    def is_discrete(self):
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self):
        dim = max(c.event_dim for c in self.cseq)
        if self.dim + dim < 0:
            dim += 1
        return dim

    def check(self, value):
        _check_dim(self.dim, value, "value")
        slices = [value.select(self.dim, i) for i in range(value.size(self.dim))]
        return mt.stack([constr.check(v) for v, constr in zip(slices, self.cseq)], self.dim)


def _check_dim(dim, value, name):
    if not -value.dim() <= dim < value.dim():
        raise AssertionError(f"dim {dim} out of range for {name} with {value.dim()} "
                             f"dimensions")


dependent = _Dependent()
dependent_property = _DependentProperty
independent = _IndependentConstraint
boolean = _Boolean()
one_hot = _OneHot()
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
integer_interval = _IntegerInterval
real = _Real()
real_vector = independent(real, 1)
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
less_than = _LessThan
multinomial = _Multinomial
unit_interval = _Interval(0.0, 1.0)
interval = _Interval
half_open_interval = _HalfOpenInterval
simplex = _Simplex()
lower_triangular = _LowerTriangular()
corr_cholesky = _CorrCholesky()
lower_cholesky = _LowerCholesky()
square = _Square()
symmetric = _Symmetric()
positive_semidefinite = _PositiveSemidefinite()
positive_definite = _PositiveDefinite()
cat = _Cat
stack = _Stack
