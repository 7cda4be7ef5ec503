"""Every op of microtensor, declared once (see ``registry``).  Importing this package
registers them all."""
from microtensor.ops import (activation, contraction, conv, copy, embedding,  # noqa: F401
                             embedding_bag, factory, indexing, layout, linalg, linalg_decomp,
                             loss, norm, pointwise, pooling, reduction, scatter_reduce,
                             selection, shape, view)
from microtensor.ops import dropout  # noqa: F401
from microtensor.ops import grid_sample  # noqa: F401
from microtensor.ops import pooling_more  # noqa: F401
from microtensor.ops import histogram  # noqa: F401
from microtensor.ops import special  # noqa: F401
from microtensor.ops import complex  # noqa: F401
from microtensor.ops import fft  # noqa: F401
from microtensor.ops import sampling  # noqa: F401
from microtensor.ops import inplace_functions  # noqa: F401  (after every declaration)
from microtensor.ops.registry import REGISTRY

__all__ = ["REGISTRY"]
