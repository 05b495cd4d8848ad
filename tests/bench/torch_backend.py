#!/usr/bin/python3
"""PyTorch on a torch.distributed backend, for tests/bench/torch_backend.sh: run it under
ddp-run, which gives every rank RANK, WORLD_SIZE and the rest.
  torch_backend.py BACKEND train EPOCHS     the seed's DDP training (mlp 784-512-256-10 on
                                            Fashion-MNIST, global batch 128, SGD lr 0.01
                                            momentum 0.5): rank 0 prints a RESULT line
  torch_backend.py BACKEND all_reduce MAXB  float32 SUM all_reduce, 4 B to MAXB, nccl-tests
                                            columns (bytes, time_us, algbw, busbw)
Either backend is set up the same way (env://), with one thread a process."""
import gzip
import os
import sys
import time
from random import Random

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

DATA = os.environ.get("DDP_DATA", "/usr/share/datasets/fashion-mnist")


def idx(name, off):
    with gzip.open(os.path.join(DATA, name)) as f:
        return np.frombuffer(f.read(), np.uint8, offset=off)


def load(split):
    x = idx(f"{split}-images-idx3-ubyte.gz", 16).reshape(-1, 784).astype(np.float32) / 255.0
    x = (x - 0.2860) / 0.3530
    y = idx(f"{split}-labels-idx1-ubyte.gz", 8).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def train(rank, world, epochs):
    torch.manual_seed(1234)
    x, y = load("train")
    xt, yt = load("t10k")
    idxs = list(range(len(x)))
    rng = Random()
    rng.seed(1234)
    rng.shuffle(idxs)
    part = len(x) // world
    mine = torch.tensor(idxs[rank * part:(rank + 1) * part])
    xs, ys = x[mine], y[mine]
    bsz = 128 // world
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    net = DDP(model)
    opt = optim.SGD(net.parameters(), lr=0.01, momentum=0.5)
    lossf = nn.CrossEntropyLoss()
    g = torch.Generator()
    g.manual_seed(rank)
    t_train = 0.0
    for _ in range(epochs):
        perm = torch.randperm(len(xs), generator=g)
        dist.barrier()
        t0 = time.perf_counter()
        for i in range(0, len(xs) - bsz + 1, bsz):
            b = perm[i:i + bsz]
            opt.zero_grad()
            lossf(net(xs[b]), ys[b]).backward()
            opt.step()
        dist.barrier()
        t_train += time.perf_counter() - t0
    with torch.no_grad():
        acc = (model(xt).argmax(1) == yt).float().mean().item()
    if rank == 0:
        samples = epochs * (len(xs) // bsz) * bsz * world
        print(f"RESULT backend={dist.get_backend()} world={world} epochs={epochs} train_s={t_train:.2f} "
              f"samples_per_s={samples / t_train:.0f} test_acc={acc:.4f}", flush=True)


def all_reduce(rank, world, maxbytes):
    size = 4
    while size <= maxbytes:
        t = torch.ones(size // 4, dtype=torch.float32)
        iters = max(5, min(1000, int(2e8 // size // 20)))
        for _ in range(3):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        dt = (time.perf_counter() - t0) / iters
        tt = torch.tensor([dt])
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        dt = tt.item()
        if rank == 0:
            alg = size / dt / 1e9
            print(f"{size:>12d} {dt * 1e6:>12.1f} {alg:>8.3f} {alg * 2 * (world - 1) / world:>8.3f}", flush=True)
        size *= 4


if __name__ == "__main__":
    backend, what, arg = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if backend == "ddpd":
        import torch_ddpd  # noqa: F401  registers the backend "ddpd"
    torch.set_num_threads(1)
    dist.init_process_group(backend)
    {"train": train, "all_reduce": all_reduce}[what](dist.get_rank(), dist.get_world_size(), arg)
    dist.destroy_process_group()
