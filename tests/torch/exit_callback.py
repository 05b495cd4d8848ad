"""A process that exits while a callback of one of its group's futures still runs, and the
callback holds the group's last reference: leaving the job at exit (torch_ddpd's atexit)
waits for that callback, whose end destroys the group. Neither may wait for the other."""
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
    pg = torch_ddpd._create(dist.PrefixStore("exit/", store), rank, world, timedelta(seconds=10))
    t = torch.ones(4)

    def slow(fut, group=pg):  # the callback's closure holds the group
        time.sleep(1)  # still running when the main thread leaves the job at exit
        return fut.value()

    pg.allreduce([t]).get_future().then(slow)
    del pg  # the callback now holds the last reference
    print("rank %d: exiting with a callback in flight" % rank, flush=True)


if __name__ == "__main__":
    main()
