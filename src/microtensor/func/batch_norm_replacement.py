"""``replace_all_batch_norm_modules_``: batch-norm modules that stop tracking running
statistics, so that ``vmap`` over a model does not write one shared buffer per sample."""


def _without_running_stats(module):
    # microtensor has no BatchNorm layer yet: any module with batch norm's running-stats
    # attributes (a user's own batch norm) is treated as PyTorch treats ``_BatchNorm``.
    if getattr(module, "track_running_stats", False) and hasattr(module, "running_mean") \
            and hasattr(module, "running_var"):
        module.running_mean = None
        module.running_var = None
        module.num_batches_tracked = None
        module.track_running_stats = False


def replace_all_batch_norm_modules_(root):
    """In place, for every batch-norm module in ``root`` (itself included) that tracks
    running statistics: set ``running_mean``, ``running_var`` and ``num_batches_tracked``
    to None and ``track_running_stats`` to False.  Returns ``root``.

    A batch-norm module is one with ``running_mean``, ``running_var`` and
    ``track_running_stats`` attributes (microtensor has no ``BatchNorm`` class of its own
    yet, so the check is by these attributes, not by class)."""
    for module in root.modules():
        _without_running_stats(module)
    return root
