"""Every op of microtensor, declared once (see ``registry``).  Importing this package
registers them all."""
from microtensor.ops import (copy, factory, indexing, linalg, loss, norm, pointwise,  # noqa: F401
                             pooling, reduction, shape, view)
from microtensor.ops.registry import REGISTRY

__all__ = ["REGISTRY"]
