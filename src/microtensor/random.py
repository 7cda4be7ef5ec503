"""``microtensor.random``: PyTorch's ``torch.random`` namespace.

The seeding and state functions are the top-level ones (``mt.manual_seed is
mt.random.manual_seed``); ``fork_rng`` restores the default generator's state on exit.
Every device draws from that one generator (a GPU tensor's random numbers are drawn on the
host), so forking it forks the random numbers of every device.
"""
import contextlib

from microtensor.ops.factory import (get_rng_state, initial_seed, manual_seed, seed,
                                     set_rng_state)

__all__ = ["set_rng_state", "get_rng_state", "manual_seed", "seed", "initial_seed",
           "fork_rng"]


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices",
             device_type=None):
    """Run the block with the generator forked: on exit (even by an exception) its state
    is what it was on entry.  ``devices`` is accepted for PyTorch's signature (one generator
    serves every device here); ``enabled=False`` forks nothing."""
    if not enabled or device_type == "meta":
        yield
        return
    if devices is not None:
        list(devices)   # an iterator is consumed, as PyTorch does
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)
