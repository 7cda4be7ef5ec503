"""Every op of microtensor, declared once (see ``registry``).  Importing this package
registers them all."""
from microtensor.ops import (conv, copy, factory, indexing, linalg, loss, pointwise,  # noqa: F401
                             reduction, shape, view)
from microtensor.ops.registry import REGISTRY

__all__ = ["REGISTRY"]
