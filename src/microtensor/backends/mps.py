"""``torch.backends.mps``: Apple's Metal backend, which microtensor does not have (programs
ask ``is_available()`` to choose their device)."""


def is_available():
    return False


def is_built():
    return False
