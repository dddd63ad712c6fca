"""DDP communication hooks over Tide's compressed collectives."""
import torch
import torch.distributed as dist

from ._C import Compressor, ProcessGroupTide


def compression_hook(codec="int8", block_size=0, topk_ratio=0.0, error_feedback=True,
                     stochastic_rounding=False, seed=0, inter_node_only=True):
    """A hook for ``DistributedDataParallel.register_comm_hook(state, hook)``.

    Each gradient bucket goes through Tide's compressed All-Reduce (average)
    with ``codec`` ("fp16", "bf16", "int8", "int4", "topk", "auto" or "none").
    One compressor per bucket keeps its error-feedback residual across steps
    (a bucket that changes size, as DDP's first rebuild does, gets a fresh
    one). ``state`` is the process group (a "tide" group) or None for the
    default group. The hook's ``compressors`` dict holds the compressors, e.g.
    for checkpointing their ``state()``. ``inter_node_only`` (default
    True): on several nodes, compress only the phase between nodes; the
    phases inside a node (shared memory) stay exact fp32. False compresses
    every phase. On one node every phase is compressed either way.
    """
    compressors = {}

    def hook(state, bucket):
        group = state if state is not None else dist.group.WORLD
        if not isinstance(group, ProcessGroupTide):
            raise RuntimeError("tide_torch.compression_hook needs a \"tide\" process group, not "
                               + type(group).__name__)
        tensor = bucket.buffer()
        key = (id(group), bucket.index())
        entry = compressors.get(key)
        if entry is None or entry[0] != tensor.numel():
            entry = (tensor.numel(),
                     Compressor(group, codec, block_size, topk_ratio, error_feedback,
                                stochastic_rounding, seed + bucket.index(), inter_node_only))
            compressors[key] = entry
        fut = entry[1].allreduce(tensor, average=True).get_future()
        return fut.then(lambda f: f.value()[0])

    hook.compressors = compressors
    return hook
