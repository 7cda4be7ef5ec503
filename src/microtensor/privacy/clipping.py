"""Per-sample clipping: ``clipped_grad_sum`` (here through ``vmap(grad)`` only)."""
import microtensor as mt
from microtensor.func import grad, vmap


def clipped_grad_sum(loss_fn, params, *batch, max_grad_norm, method="ghost"):
    """``(summed, norms)``: the sum over the batch of each sample's gradient of
    ``loss_fn(params, *sample)`` scaled by ``min(1, max_grad_norm / (norm + 1e-6))``, and
    each sample's gradient norm over all parameters (shape ``[B]``)."""
    if method != "vmap":
        raise NotImplementedError(f"clipped_grad_sum: method={method!r} is not available "
                                  "in this build, only method='vmap'")
    grads = vmap(grad(loss_fn), in_dims=(None,) + (0,) * len(batch))(params, *batch)
    size = batch[0].shape[0]
    norms = sum((g.reshape(size, -1) ** 2).sum(1) for g in grads.values()).sqrt()
    factors = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
    summed = {name: mt.tensordot(factors, g, dims=1) for name, g in grads.items()}
    return summed, norms
