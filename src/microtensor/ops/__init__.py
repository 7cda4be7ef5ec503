"""Every op of microtensor, declared once (see ``registry``).  Importing this package
registers them all."""
from microtensor.ops import (copy, factory, pointwise, reduction, view)  # noqa: F401
from microtensor.ops.registry import REGISTRY

__all__ = ["REGISTRY"]
