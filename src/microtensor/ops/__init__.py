"""Every op of microtensor, declared once (see ``registry``).  Importing this package
registers them all."""
from microtensor.ops import (copy, factory, indexing, linalg, pointwise, reduction,  # noqa: F401
                             shape, view)
from microtensor.ops.registry import REGISTRY

__all__ = ["REGISTRY"]
