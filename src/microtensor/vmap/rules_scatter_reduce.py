"""Batching rule of ``scatter_reduce``: gather/scatter's (every tensor argument batched,
unbatched ones expanded, ``dim`` shifted past the batch dim)."""
from microtensor.vmap.rules import dimwise_index, rule

rule("scatter_reduce", "scatter_reduce_")(dimwise_index)
