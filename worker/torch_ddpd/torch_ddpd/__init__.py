"""ddpd as a torch.distributed backend.

    import torch_ddpd  # registers the backend "ddpd"
    torch.distributed.init_process_group("ddpd")

Ranks and world size come from torch (RANK, WORLD_SIZE, as ddp-run and torchrun set them);
ddpd's endpoint and the job from DDP_COORDINATOR and DDP_JOB, as for C programs.
"""
import atexit

import torch.distributed as dist

from torch_ddpd import _C

__all__ = ["BACKEND"]

BACKEND = "ddpd"


def _create(store, rank, world_size, timeout):
    return _C.create_process_group(store, rank, world_size, timeout)


dist.Backend.register_backend(BACKEND, _create)
# torch keeps the default group in a global it may never free: leave the job at exit, so
# that ddpd hears a Leave rather than a process that vanished.
atexit.register(_C.shutdown)
