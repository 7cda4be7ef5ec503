"""Every op of microtensor, declared once (see ``registry``).  Importing this package
registers them all."""
from microtensor.ops import (activation, contraction, conv, copy, factory,  # noqa: F401
                             indexing, layout, linalg, linalg_decomp, loss, norm, pointwise,
                             pooling, reduction, selection, shape, view)
from microtensor.ops import embedding_bag, scatter_reduce  # noqa: F401,E402
from microtensor.ops.registry import REGISTRY

__all__ = ["REGISTRY"]
