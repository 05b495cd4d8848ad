"""What a PyTorch job on ddpd sees when things go wrong: a RuntimeError with libddp's
account (who, which pid on which host), never a hang.
  faults.py loop       all-reduce until one fails; print the error and how long after the
                       last all-reduce that succeeded it came (a peer is killed meanwhile)
  faults.py mismatch   rank r all-reduces 4 + r elements: every rank must raise"""
import sys
import time

import torch
import torch.distributed as dist


def loop(rank):
    t = torch.ones(1000)
    last_ok = time.monotonic()
    n = 0
    while True:
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            print("rank %d raised %.2f s after its last all-reduce: %s" % (rank, time.monotonic() - last_ok, e),
                  flush=True)
            sys.exit(1)
        last_ok = time.monotonic()
        n += 1
        if n == 10:
            print("rank %d is looping" % rank, flush=True)
        t.fill_(1.0)


def mismatch(rank):
    try:
        dist.all_reduce(torch.ones(4 + rank))
    except RuntimeError as e:
        print("rank %d raised: %s" % (rank, e), flush=True)
        sys.exit(1)
    print("rank %d: no error" % rank, flush=True)


if __name__ == "__main__":
    import torch_ddpd  # noqa: F401  registers the backend "ddpd"
    dist.init_process_group("ddpd")
    {"loop": loop, "mismatch": mismatch}[sys.argv[1]](dist.get_rank())
