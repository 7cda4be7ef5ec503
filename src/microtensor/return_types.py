"""The named tuples some ops return, as ``torch.return_types``: ``max``, ``min``, ``sort``,
``topk``, ``kthvalue``, ``median``, ``mode``, ``cummax`` and ``cummin`` give
``(values, indices)``; ``histogram`` and ``histogramdd`` give ``(hist, bin_edges)``."""
from microtensor.ops.reduction import ReturnMax as max  # noqa: A001
from microtensor.ops.reduction import ReturnMin as min  # noqa: A001
from microtensor.ops.selection import ReturnCummax as cummax
from microtensor.ops.selection import ReturnCummin as cummin
from microtensor.ops.selection import ReturnKthvalue as kthvalue
from microtensor.ops.selection import ReturnMedian as median
from microtensor.ops.selection import ReturnMode as mode
from microtensor.ops.selection import ReturnSort as sort
from microtensor.ops.selection import ReturnTopk as topk

__all__ = ["cummax", "cummin", "kthvalue", "max", "median", "min", "mode", "sort", "topk"]
from microtensor.ops.histogram import ReturnHistogram as histogram  # noqa: E402
from microtensor.ops.histogram import ReturnHistogramdd as histogramdd  # noqa: E402
__all__ += ["histogram", "histogramdd"]
