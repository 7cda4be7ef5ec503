"""The named tuples some ops return, as ``torch.return_types``: ``max`` and ``min`` with
``dim`` give ``(values, indices)``."""
from microtensor.ops.reduction import ReturnMax as max  # noqa: A001
from microtensor.ops.reduction import ReturnMin as min  # noqa: A001

__all__ = ["max", "min"]
