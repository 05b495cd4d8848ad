"""Point-to-point posted around other calls, as gloo runs it (apart from the collectives):
a receive whose message has not come does not hold up the calls posted after it. Three
patterns that each waited out the group's timeout when every call ran in posting order:
  1. both ranks post irecv, then isend, then wait (an exchange);
  2. batch_isend_irecv of a recv and a send on both ranks;
  3. rank 0 posts irecv, then all_reduce; rank 1 all_reduce, then send.
Then the receives of one source and tag keep their order (four messages, one tag)."""
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    import torch_ddpd  # noqa: F401  registers the backend "ddpd"
    dist.init_process_group("ddpd", timeout=timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2
    peer = 1 - rank

    got = torch.zeros(3)
    r = dist.irecv(got, src=peer, tag=1)
    s = dist.isend(torch.full((3,), float(rank)), dst=peer, tag=1)
    r.wait()
    s.wait()
    assert torch.equal(got, torch.full((3,), float(peer))), got

    got = torch.zeros(5)
    ops = [dist.P2POp(dist.irecv, got, peer, tag=2), dist.P2POp(dist.isend, torch.full((5,), 10.0 + rank), peer, tag=2)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    assert torch.equal(got, torch.full((5,), 10.0 + peer)), got

    total = torch.ones(4)
    if rank == 0:
        got = torch.zeros(2)
        req = dist.irecv(got, src=1, tag=3)
        dist.all_reduce(total)
        req.wait()
        assert torch.equal(got, torch.full((2,), 7.0)), got
    else:
        dist.all_reduce(total)
        dist.send(torch.full((2,), 7.0), dst=0, tag=3)
    assert torch.equal(total, torch.full((4,), 2.0)), total

    if rank == 0:
        outs = [torch.zeros(1) for _ in range(4)]
        reqs = [dist.irecv(o, src=1, tag=4) for o in outs]
        dist.barrier()
        for q in reqs:
            q.wait()
        assert [o.item() for o in outs] == [0.0, 1.0, 2.0, 3.0], outs
    else:
        dist.barrier()
        for k in range(4):
            dist.send(torch.full((1,), float(k)), dst=0, tag=4)
    print("rank %d: point-to-point around collectives: all patterns done" % rank, flush=True)


if __name__ == "__main__":
    main()
