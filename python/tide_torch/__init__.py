"""Tide as a torch.distributed backend.

``import tide_torch`` registers the backend ``"tide"``; then

    torch.distributed.init_process_group("tide", ...)

works with the ``env://`` (torchrun's or tiderun's variables), ``tcp://`` and
``file://`` init methods. Tide's communicator meets through the c10d store
torch.distributed gives the group, so no port beyond the store's is needed.
See docs/pytorch.md.
"""
import torch
import torch.distributed as dist

from ._C import Compressor, ProcessGroupTide
from .hooks import compression_hook

__all__ = ["ProcessGroupTide", "Compressor", "compression_hook", "BACKEND"]

BACKEND = "tide"


def _create_process_group(store, rank, world_size, timeout):
    return ProcessGroupTide(store, rank, world_size, timeout)


if not hasattr(dist.Backend, BACKEND.upper()):
    dist.Backend.register_backend(BACKEND, _create_process_group)
