"""Privacy accounting for DP-SGD: the ε spent by steps of the Poisson-subsampled Gaussian
mechanism, through Google's ``dp-accounting`` package (the ``privacy`` extra).

``get_epsilon`` answers for one setting, ``get_noise_multiplier`` finds the σ that reaches a
target ε, and ``RDPAccountant`` / ``PRVAccountant`` keep the history of a training run as
Opacus's accountants do.  ``"rdp"`` is Rényi DP over Opacus's orders, converted to (ε, δ)
as Opacus converts it, so both give the same figures; ``"prv"`` is the tight numerical
answer, computed here by dp-accounting's privacy loss distribution (PLD) accountant where
Opacus uses its privacy random variable (PRV) accountant: two discretisations of the same
privacy loss, which agree to about 1%.
"""
import math

# Opacus's RDPAccountant.DEFAULT_ALPHAS: the orders the RDP curve is evaluated at.
RDP_ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))
# Opacus's get_noise_multiplier gives up above this σ.
MAX_SIGMA = 1e6
# Width of the PLD's grid of privacy-loss values: finer is slower and changes ε by < 0.5%.
_PLD_DISCRETIZATION = 1e-3


def _dp_accounting():
    try:
        import dp_accounting
    except ImportError as exc:
        raise ImportError("privacy accounting needs Google's dp-accounting package: "
                          "pip install 'microtensor[privacy]' (or pip install dp-accounting)"
                          ) from exc
    return dp_accounting


def _check_step(noise_multiplier, sample_rate, steps):
    if not noise_multiplier >= 0:
        raise ValueError(f"noise_multiplier must be >= 0, but got {noise_multiplier}")
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], but got {sample_rate}")
    if steps < 0 or steps != int(steps):
        raise ValueError(f"steps must be a non-negative integer, but got {steps}")


def _epsilon_of(history, delta, accountant):
    """ε at ``delta`` after the steps of ``history``: ``[(noise_multiplier, sample_rate,
    steps), ...]``."""
    if accountant not in ("rdp", "prv"):
        raise ValueError(f"accountant must be 'rdp' or 'prv', but got {accountant!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), but got {delta}")
    for noise_multiplier, sample_rate, steps in history:
        _check_step(noise_multiplier, sample_rate, steps)
    history = [h for h in history if h[2] > 0]
    if not history:
        return 0.0
    if any(noise_multiplier == 0 for noise_multiplier, _, _ in history):
        return math.inf
    dpa = _dp_accounting()
    if accountant == "rdp":
        engine = dpa.rdp.RdpAccountant(orders=RDP_ORDERS)
    else:
        engine = dpa.pld.PLDAccountant(value_discretization_interval=_PLD_DISCRETIZATION)
    for noise_multiplier, sample_rate, steps in history:
        event = dpa.PoissonSampledDpEvent(sample_rate, dpa.GaussianDpEvent(noise_multiplier))
        engine.compose(event, int(steps))
    return float(engine.get_epsilon(delta))


def compute_rdp(*, noise_multiplier, sample_rate, steps, orders=RDP_ORDERS):
    """The Rényi DP of ``steps`` steps of the Poisson-subsampled Gaussian mechanism at each
    of ``orders`` (a list of floats), as Opacus's ``compute_rdp``."""
    _check_step(noise_multiplier, sample_rate, steps)
    dpa = _dp_accounting()
    engine = dpa.rdp.RdpAccountant(orders=orders)
    event = dpa.PoissonSampledDpEvent(sample_rate, dpa.GaussianDpEvent(noise_multiplier))
    engine.compose(event, int(steps))
    # dp-accounting keeps the curve in ``_rdp`` (its own tests read it there)
    return [float(r) for r in engine._rdp]


def get_epsilon(*, noise_multiplier, sample_rate, steps, delta, accountant="rdp"):
    """The ε of ``steps`` steps of DP-SGD, each adding Gaussian noise of std
    ``noise_multiplier`` × the clip norm to the clipped sum of a batch drawn by Poisson
    sampling at ``sample_rate``, for the given ``delta`` (add-or-remove-one neighbours)."""
    return _epsilon_of([(noise_multiplier, sample_rate, steps)], delta, accountant)


def get_noise_multiplier(*, target_epsilon, target_delta, sample_rate, epochs=None,
                         steps=None, accountant="rdp", epsilon_tolerance=0.01):
    """The smallest σ (found by bisection, to within ``epsilon_tolerance`` of ε) whose ε
    after ``steps`` steps (or ``epochs`` epochs of ``1 / sample_rate`` steps) is at most
    ``target_epsilon``, as Opacus's ``get_noise_multiplier``."""
    if (steps is None) == (epochs is None):
        raise ValueError("get_noise_multiplier takes as input EITHER a number of steps or "
                         "a number of epochs")
    if not target_epsilon > 0:
        raise ValueError(f"target_epsilon must be > 0, but got {target_epsilon}")
    if steps is None:
        steps = int(epochs / sample_rate)

    def epsilon(sigma):
        return get_epsilon(noise_multiplier=sigma, sample_rate=sample_rate, steps=steps,
                           delta=target_delta, accountant=accountant)

    sigma_low, sigma_high, eps_high = 0.0, 10.0, epsilon(10.0)
    while eps_high > target_epsilon:
        sigma_low, sigma_high = sigma_high, 2 * sigma_high
        if sigma_high > MAX_SIGMA:
            raise ValueError(f"The privacy budget is too low: target_epsilon="
                             f"{target_epsilon} needs a noise_multiplier above {MAX_SIGMA}")
        eps_high = epsilon(sigma_high)
    while target_epsilon - eps_high > epsilon_tolerance:
        sigma = (sigma_low + sigma_high) / 2
        eps = epsilon(sigma)
        if eps < target_epsilon:
            sigma_high, eps_high = sigma, eps
        else:
            sigma_low = sigma
    return sigma_high


class _Accountant:
    """The history of a training run, ``[(noise_multiplier, sample_rate, steps), ...]``
    (consecutive steps with the same settings merged), and the ε it has spent."""

    def __init__(self):
        self.history = []

    def step(self, *, noise_multiplier, sample_rate):
        """Counts one step with these settings."""
        _check_step(noise_multiplier, sample_rate, 1)
        if self.history and self.history[-1][:2] == (noise_multiplier, sample_rate):
            self.history[-1] = (noise_multiplier, sample_rate, self.history[-1][2] + 1)
        else:
            self.history.append((noise_multiplier, sample_rate, 1))

    def get_epsilon(self, delta):
        """The ε spent so far, at ``delta``."""
        return _epsilon_of(self.history, delta, self.mechanism())

    def __len__(self):
        return len(self.history)

    def state_dict(self):
        return {"history": list(self.history)}

    def load_state_dict(self, state_dict):
        self.history = list(state_dict["history"])


class RDPAccountant(_Accountant):
    """Rényi DP accounting, as Opacus's ``RDPAccountant``."""

    @classmethod
    def mechanism(cls):
        return "rdp"


class PRVAccountant(_Accountant):
    """Tight numerical accounting (``"prv"``, as Opacus's default ``PRVAccountant``),
    computed by dp-accounting's PLD accountant."""

    @classmethod
    def mechanism(cls):
        return "prv"


def create_accountant(mechanism):
    """A fresh accountant for ``"rdp"`` or ``"prv"``."""
    accountants = {"rdp": RDPAccountant, "prv": PRVAccountant}
    if mechanism not in accountants:
        raise ValueError(f"Unexpected accounting mechanism: {mechanism!r} (expected 'rdp' "
                         "or 'prv')")
    return accountants[mechanism]()
