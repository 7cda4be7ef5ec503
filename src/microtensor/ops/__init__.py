"""Every op of microtensor, declared once (see ``registry``).  Importing this package
registers them all."""
from microtensor.ops import (activation, contraction, conv, copy, factory, indexing, linalg,  # noqa: F401
                             loss, norm, pointwise, pooling, reduction, shape, view)
from microtensor.ops.registry import REGISTRY

__all__ = ["REGISTRY"]
