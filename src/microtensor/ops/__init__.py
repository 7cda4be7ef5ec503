"""Every op of microtensor, declared once (see ``registry``).  Importing this package
registers them all."""
from microtensor.ops import (activation, copy, factory, indexing, linalg, loss,  # noqa: F401
                             norm, pointwise, pooling, reduction, shape, view)
from microtensor.ops.registry import REGISTRY

__all__ = ["REGISTRY"]
