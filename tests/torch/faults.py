"""What a PyTorch job on ddpd sees when things go wrong: a RuntimeError with libddp's
account (who, which pid on which host), never a hang.
  faults.py loop       all-reduce until one fails; print the error and how long after the
                       last all-reduce that succeeded it came (a peer is killed meanwhile)
  faults.py mismatch   rank r all-reduces 4 + r elements: every rank must raise
  faults.py timeout    a group with a 6 s timeout; rank 1 waits where rank 0 all-reduces,
                       and calls only once the test saw ddpd end the job (FAULTS_GO_FILE
                       appears), while rank 0, which caught its timeout, goes on
  faults.py torch      torch fails on rank 1 only, after a broadcast (its second tensor takes
                       another shape once the call is posted): the others raise at their
                       next call, naming it"""
import os
import sys
import time
from datetime import timedelta

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


def timeout(rank):
    for _ in range(5):
        dist.all_reduce(torch.ones(8))  # five calls done: ddpctl status shows step 5
    print("rank %d did 5 all-reduces" % rank, flush=True)
    if rank == 1:
        # alive (its control thread answers ddpd) but not calling, until the test saw ddpd
        # end the job: rank 0 gave up (and went on)
        go = os.environ["FAULTS_GO_FILE"]
        deadline = time.monotonic() + 60
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.05)
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(8))
    except RuntimeError as e:
        print("rank %d raised after %.1f s: %s" % (rank, time.monotonic() - t0, e), flush=True)
        if rank == 0:  # it caught the error and goes on (alive) until the test is done with it
            time.sleep(60)
        sys.exit(1)
    print("rank %d: no error" % rank, flush=True)


def torch_error(rank):
    # A list of two shapes is refused before anything is sent: rank 1 reshapes its second
    # tensor after posting, while the root, which sends only once it has, holds the call
    # on rank 1's comm thread; the copy into it then fails there.
    store = dist.distributed_c10d._get_default_store()
    tensors = [torch.zeros(2, 3), torch.zeros(2, 3)]
    try:
        if rank == 0:
            store.wait(["faults/reshaped"])
        work = dist.broadcast_multigpu(tensors, src=0, async_op=True)
        if rank == 1:
            tensors[1].resize_(3, 2)
            store.set("faults/reshaped", "1")
        work.wait()
        print("rank %d: broadcast done" % rank, flush=True)
        t0 = time.monotonic()
        dist.all_reduce(torch.ones(8))
    except RuntimeError as e:
        print("rank %d raised: %s" % (rank, e), flush=True)
        if rank == 1:
            time.sleep(2)  # ddp-run stops the others when it exits: let them raise first
        sys.exit(1)
    print("rank %d: no error" % rank, flush=True)


if __name__ == "__main__":
    import torch_ddpd  # noqa: F401  registers the backend "ddpd"
    mode = sys.argv[1]
    dist.init_process_group("ddpd", timeout=timedelta(seconds=6 if mode == "timeout" else 1800))
    {"loop": loop, "mismatch": mismatch, "timeout": timeout, "torch": torch_error}[mode](dist.get_rank())
