"""Writing Distributed Applications: gather and reduce to rank 0, and the all-reduce of
arange(2) + 1 + 2 * rank - 1. ddp-run -n 4 -- python3 gather_reduce.py"""
import torch
import torch.distributed as dist


def gather(rank, size):
    tensor = torch.tensor([float(rank)])
    gathered = [torch.zeros(1) for _ in range(size)] if rank == 0 else None
    dist.gather(tensor, gather_list=gathered, dst=0)
    if rank == 0:
        values = [t.item() for t in gathered]
        assert values == [float(r) for r in range(size)], values
        print('Rank 0 gathered', values)


def reduce(rank, size):
    tensor = torch.ones(3)
    dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM)
    if rank == 0:
        assert tensor.tolist() == [float(size)] * 3, tensor
        print('Rank 0 has', tensor.tolist())


def all_reduce(rank, size):
    tensor = torch.arange(2, dtype=torch.int64) + 1 + 2 * rank - 1
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    expected = [sum(2 * r for r in range(size)), sum(2 * r + 1 for r in range(size))]
    assert tensor.tolist() == expected, tensor
    # the tutorial's line, written in one piece: under torchrun the ranks share one stdout,
    # and an unbuffered print of several arguments writes each apart (they interleave)
    print('Rank  %d  has  %s' % (rank, tensor.tolist()))


if __name__ == "__main__":
    import torch_ddpd  # noqa: F401  registers the backend "ddpd"
    dist.init_process_group("ddpd")
    for run in (gather, reduce, all_reduce):
        run(dist.get_rank(), dist.get_world_size())
