"""The integer arguments ops take (sizes, strides, dims, single ints), parsed once, with
PyTorch's rules: NumPy integers and integer one-element tensors are integers; floats and
bools are a TypeError naming the argument, a value past int64 a ValueError for an int
argument and a TypeError in a list of ints."""
import operator

_INT64 = 2 ** 63


def int_arg(value, name):
    """``value`` as a Python int."""
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"argument '{name}' must be int, not {type(value).__name__}") from None
    if not -_INT64 <= value < _INT64:
        # PyTorch's type: a ValueError ("Overflow when unpacking long long")
        raise ValueError(f"argument '{name}' must fit in 64 bits (Overflow when unpacking "
                         f"long long), got {value}")
    return value


def int_tuple(values, name="size"):
    """``values`` (a sequence) as a tuple of Python ints."""
    result = []
    for value in values:
        if type(value) is not int:  # the common case skips the slower checks
            try:
                if isinstance(value, bool):
                    raise TypeError
                value = operator.index(value)
            except TypeError:
                raise TypeError(f"argument '{name}' must be tuple of ints, but found element "
                                f"of type {type(value).__name__}") from None
        if not -_INT64 <= value < _INT64:
            raise TypeError(f"argument '{name}' must be tuple of ints, but {value} does not "
                            f"fit in 64 bits")
        result.append(value)
    return tuple(result)


def ints_arg(value, name):
    """A PyTorch ``int[]`` argument given as one int or as a sequence, as a tuple of Python
    ints: one int past int64 is a ValueError (as an int argument), one in a list a
    TypeError."""
    if isinstance(value, (tuple, list)):
        return int_tuple(value, name)
    return (int_arg(value, name),)


def size_arg(args, name="size", required=True):
    """The sizes (or dims) of a call written either way: ``f(2, 3)``, ``f((2, 3))`` and
    ``f([2, 3])`` all give ``args`` meaning (2, 3).  ``args`` is the ``*args`` tuple as
    received; with ``required``, an empty one is PyTorch's missing-argument TypeError."""
    if not args and required:
        raise TypeError(f"missing 1 required positional argument: '{name}'")
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = args[0]
    return int_tuple(args, name)
