"""The DDP tutorial's ToyModel under DistributedDataParallel on the backend "ddpd": after
N steps each rank's parameters equal those of one process trained on the concatenated
batches. Once with DDP's own all-reduce, once with a communication hook, both with small
buckets so that several overlap backward. Then under PowerSGD, whose hook waits inside a
future's callback for the group's next all-reduce: every rank ends with the same
parameters. ddp-run -n 2 -- python3 ddp_toy.py"""
import copy

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 5
PER_RANK = 20


class ToyModel(nn.Module):
    def __init__(self):
        super(ToyModel, self).__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def batches(size):
    """Every rank draws the same global batches; rank r trains on its slice of each."""
    g = torch.Generator().manual_seed(42)
    return [(torch.randn(size * PER_RANK, 10, generator=g), torch.randn(size * PER_RANK, 5, generator=g))
            for _ in range(STEPS)]


def train(model, data, rank, size):
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(model.parameters(), lr=0.1)
    for inputs, labels in data:
        if rank is not None:
            inputs = inputs[rank * PER_RANK:(rank + 1) * PER_RANK]
            labels = labels[rank * PER_RANK:(rank + 1) * PER_RANK]
        optimizer.zero_grad()
        loss_fn(model(inputs), labels).backward()
        optimizer.step()


def demo(rank, size, hook):
    torch.manual_seed(rank)  # different starting points: DDP must broadcast rank 0's
    model = ToyModel()
    ddp_model = DDP(model, bucket_cap_mb=0.0001)  # a bucket per layer or so
    if hook:
        ddp_model.register_comm_hook(state=None, hook=default_hooks.allreduce_hook)
    data = batches(size)
    train(ddp_model, data, rank, size)

    torch.manual_seed(0)
    alone = ToyModel()  # rank 0's start, on the whole batches
    train(alone, data, None, size)
    for (name, p), q in zip(model.named_parameters(), alone.parameters()):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), (name, (p - q).abs().max().item())
    print('Rank', rank, ': DDP', 'with a comm hook' if hook else 'with its own all-reduce',
          'matches one process on the concatenated batch')


def demo_powersgd(rank, size):
    torch.manual_seed(rank)
    model = ToyModel()
    ddp_model = DDP(model, bucket_cap_mb=0.0001)
    state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
    ddp_model.register_comm_hook(state, powerSGD.powerSGD_hook)
    start = [p.detach().clone() for p in model.parameters()]
    train(ddp_model, batches(size), rank, size)  # 2 steps plain, then 3 compressed
    mine = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.empty_like(mine) for _ in range(size)]
    dist.all_gather(everyone, mine)
    for r in range(size):
        assert torch.equal(everyone[r], everyone[0]), ("rank", r, "differs from rank 0")
    assert not all(torch.equal(p, q) for p, q in zip(model.parameters(), start)), "nothing was trained"
    print('Rank', rank, ': DDP with PowerSGD: every rank holds the same parameters')


if __name__ == "__main__":
    import torch_ddpd  # noqa: F401  registers the backend "ddpd"
    dist.init_process_group("ddpd")
    for hook in (False, True):
        demo(dist.get_rank(), dist.get_world_size(), hook)
    demo_powersgd(dist.get_rank(), dist.get_world_size())
