"""A group made again on a store that outlived the last one (torchrun's agent store across
a restart; destroy_process_group resets torch's group prefixes): the new group must wait
for its own job's name, not join the ended job under the name the old one left. Rank 0
comes late, so that the others read the store first; made as torch makes a backend's
group, through the function it registered."""
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    import torch_ddpd
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, rank == 0,
                          timeout=timedelta(seconds=60))
    for incarnation in range(2):
        if rank == 0:
            time.sleep(1)
        pg = torch_ddpd._create(dist.PrefixStore("group/", store), rank, world, timedelta(seconds=10))
        t = torch.full((3,), float(incarnation + 1))
        pg.allreduce([t]).wait()
        assert t.tolist() == [float(world * (incarnation + 1))] * 3, t
        pg.barrier().wait()
        del pg  # leaves the job
        print("rank %d: incarnation %d done" % (rank, incarnation), flush=True)


if __name__ == "__main__":
    main()
