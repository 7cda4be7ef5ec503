"""Function transforms (``torch.func``): ``vmap`` now; ``grad``, ``vjp``, ``jacrev`` ...
join it here."""
from microtensor.vmap import vmap

__all__ = ["vmap"]
