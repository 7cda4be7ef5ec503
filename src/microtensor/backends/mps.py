"""``backends.mps``: Apple's Metal backend, which microtensor does not have; programs ask
``is_available()`` when they pick a device."""


def is_available():
    """False: microtensor has no Metal backend."""
    return False


def is_built():
    """False: microtensor is not built with Metal."""
    return False
