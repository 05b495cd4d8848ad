"""Every collective of the backend "ddpd", on every type and op libddp has, against a
serial reference computed here from what every rank must have sent; then what libddp
cannot do, which must raise a RuntimeError naming the operation (on every rank, before
anything is sent). ddp-run -n N -- python3 collectives.py   (N = 2, 3, 4)"""
import warnings

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore", message="torch.distributed.*deprecated")  # multigpu, coalesced: tested on purpose

R = dist.ReduceOp
TYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8,
         torch.int8, torch.bool]
COUNTS = [1, 7, 1000, 70000]


def data(rank, count, dtype, op=R.SUM):
    """Small whole numbers (exact in every type, whatever the order of a sum); 1 and 2 for
    products so that nothing overflows."""
    i = torch.arange(count, dtype=torch.int64)
    if dtype == torch.bool:
        return ((i + rank) % 3 == 0)
    v = (i * 7 + rank * 3) % 2 + 1 if op == R.PRODUCT else (i * 7 + rank * 3) % 13
    return v.to(dtype)


def reference(values, op, dtype):
    acc = values[0].clone()
    for v in values[1:]:
        if dtype == torch.bool:
            acc = acc | v if op in (R.SUM, R.MAX) else acc & v
        elif op in (R.SUM, R.AVG):
            acc = acc + v
        elif op == R.PRODUCT:
            acc = acc * v
        elif op == R.MIN:
            acc = torch.minimum(acc, v)
        else:
            acc = torch.maximum(acc, v)
    if op == R.AVG:
        acc = acc / len(values)
    return acc.to(dtype)


def supported(op, dtype):
    if op == R.AVG:
        return dtype.is_floating_point
    if dtype == torch.int8:
        return op in (R.SUM, R.PRODUCT)
    return True


def check(what, got, want):
    assert torch.equal(got, want), "%s: got %s, want %s" % (what, got.flatten()[:8], want.flatten()[:8])


def reductions(rank, size):
    for dtype in TYPES:
        for op in (R.SUM, R.AVG, R.PRODUCT, R.MIN, R.MAX):
            if not supported(op, dtype):
                continue
            for count in COUNTS:
                everyone = [data(r, count, dtype, op) for r in range(size)]
                want = reference(everyone, op, dtype)
                what = "%s %s x%d" % (dtype, op, count)
                t = everyone[rank].clone()
                dist.all_reduce(t, op=op)
                check("all_reduce " + what, t, want)
                t = everyone[rank].clone()
                dist.reduce(t, dst=size - 1, op=op)
                if rank == size - 1:
                    check("reduce " + what, t, want)
                # reduce_scatter: rank r ends with part r of the reduction of everyone's list
                parts = [[data(r * size + k, count, dtype, op) for k in range(size)] for r in range(size)]
                out = torch.zeros_like(parts[0][0])
                dist.reduce_scatter(out, [p.clone() for p in parts[rank]], op=op)
                check("reduce_scatter " + what, out, reference([parts[r][rank] for r in range(size)], op, dtype))
                out = torch.zeros_like(parts[0][0])
                dist.reduce_scatter_tensor(out, torch.cat(parts[rank]), op=op)
                check("reduce_scatter_tensor " + what, out, reference([parts[r][rank] for r in range(size)], op, dtype))
    print("Rank", rank, ": all_reduce, reduce, reduce_scatter: every type and op")


def movement(rank, size):
    for dtype in TYPES + [torch.int16, torch.complex64]:
        for count in COUNTS:
            everyone = [data(r, count, torch.int64).to(dtype) for r in range(size)]
            what = "%s x%d" % (dtype, count)
            t = everyone[rank].clone()
            dist.broadcast(t, src=1)
            check("broadcast " + what, t, everyone[1])
            out = [torch.zeros_like(t) for _ in range(size)]
            dist.all_gather(out, everyone[rank])
            for r in range(size):
                check("all_gather " + what, out[r], everyone[r])
            flat = torch.zeros(size * count, dtype=dtype)
            dist.all_gather_into_tensor(flat, everyone[rank])
            check("all_gather_into_tensor " + what, flat, torch.cat(everyone))
            gathered = [torch.zeros_like(t) for _ in range(size)] if rank == 0 else None
            dist.gather(everyone[rank], gather_list=gathered, dst=0)
            if rank == 0:
                for r in range(size):
                    check("gather " + what, gathered[r], everyone[r])
            out = torch.zeros_like(t)
            dist.scatter(out, scatter_list=everyone if rank == size - 1 else None, src=size - 1)
            check("scatter " + what, out, everyone[rank])
            # all-to-all: rank r sends its part j to rank j
            mine = torch.cat([everyone[(rank + j) % size] for j in range(size)])
            out = torch.zeros_like(mine)
            dist.all_to_all_single(out, mine)
            check("all_to_all_single " + what, out, torch.cat([everyone[(j + rank) % size] for j in range(size)]))
            both = mine.clone()
            dist.all_to_all_single(both, both)  # in place: the same as out of place
            check("all_to_all_single in place " + what, both, out)
            outs = [torch.zeros_like(t) for _ in range(size)]
            dist.all_to_all(outs, [everyone[(rank + j) % size] for j in range(size)])
            for j in range(size):
                check("all_to_all " + what, outs[j], everyone[(j + rank) % size])
    print("Rank", rank, ": broadcast, all_gather, gather, scatter, all_to_all: every type")


def shapes(rank, size):
    # not contiguous: a transposed view, reduced in place
    m = torch.arange(12, dtype=torch.float32).view(3, 4) + rank
    t = m.t()
    dist.all_reduce(t)
    check("all_reduce of a transposed view", m, (torch.arange(12, dtype=torch.float32).view(3, 4) * size
                                                 + sum(range(size))))
    # several tensors a rank (gloo's meaning: one result over all of them)
    ts = [torch.ones(5) * (rank + 1), torch.ones(5) * 10]
    dist.all_reduce_multigpu(ts)
    for x in ts:
        check("all_reduce of two tensors", x, torch.ones(5) * (sum(r + 1 for r in range(size)) + 10 * size))
    # coalesced: one call for a list of tensors of different sizes
    ts = [torch.ones(3) * rank, torch.ones(2, 2) * rank]
    dist.all_reduce_coalesced(ts)
    check("all_reduce_coalesced", ts[1], torch.ones(2, 2) * sum(range(size)))
    # async, with futures, in order
    works = [dist.all_reduce(torch.ones(4) * (k + rank), async_op=True) for k in range(5)]
    for k, w in enumerate(works):
        got = w.get_future().wait()[0]
        check("async all_reduce %d" % k, got, torch.ones(4) * (k * size + sum(range(size))))
    # result() before the work completed is refused, as gloo's is: rank 0 calls only once the
    # others have asked (through torch's store, which no call of the group waits behind)
    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(2) * rank
    if rank == 0:
        store.wait(["collectives/result-asked-%d" % r for r in range(1, size)])
    w = dist.all_reduce(t, async_op=True)
    if rank != 0:
        try:
            w.result()
        except RuntimeError as e:
            assert "ddpd" in str(e) and "wait()" in str(e), str(e)
        else:
            raise AssertionError("result() of an all_reduce that rank 0 had not called returned")
        store.set("collectives/result-asked-%d" % rank, "1")
    w.wait()
    check("result() after wait()", w.result()[0], torch.ones(2) * sum(range(size)))
    # all_to_all_single with input and output partly in one buffer: as from a copy of the input
    buf = torch.arange(3 * size, dtype=torch.float32) + 100 * rank
    want = torch.zeros(2 * size)
    dist.all_to_all_single(want, buf[:2 * size].clone())
    dist.all_to_all_single(buf[size:], buf[:2 * size])
    check("all_to_all_single, input and output overlapping", buf[size:], want)
    # all_gather_into_tensor and reduce_scatter_tensor in place (the input is the rank's part of
    # the output, and the other way round, as FSDP calls them) and overlapping otherwise
    mine = torch.arange(3, dtype=torch.float32) + 10 * rank
    everyone = torch.cat([torch.arange(3, dtype=torch.float32) + 10 * r for r in range(size)])
    flat = torch.zeros(3 * size)
    flat[3 * rank:3 * rank + 3] = mine
    dist.all_gather_into_tensor(flat, flat[3 * rank:3 * rank + 3])
    check("all_gather_into_tensor in place", flat, everyone)
    flat = torch.zeros(3 * size + 1)
    flat[:3] = mine
    dist.all_gather_into_tensor(flat[1:], flat[:3])
    check("all_gather_into_tensor, input and output overlapping", flat[1:], everyone)
    full = torch.arange(2 * size, dtype=torch.float32) + rank
    want = sum(torch.arange(2 * size, dtype=torch.float32) + r for r in range(size))[2 * rank:2 * rank + 2]
    dist.reduce_scatter_tensor(full[2 * rank:2 * rank + 2], full)
    check("reduce_scatter_tensor in place", full[2 * rank:2 * rank + 2], want)
    full = torch.arange(2 * size, dtype=torch.float32) + rank
    dist.reduce_scatter_tensor(full[1:3], full)
    check("reduce_scatter_tensor, input and output overlapping", full[1:3], want)
    # point to point in a ring, non-blocking
    right, left = (rank + 1) % size, (rank - 1) % size
    got = torch.zeros(3)
    reqs = [dist.isend(torch.ones(3) * rank, right, tag=7), dist.irecv(got, left, tag=7)]
    for req in reqs:
        req.wait()
    check("isend/irecv ring", got, torch.ones(3) * left)
    # a group of ranks 0 and 1 (as the tutorial's all-reduce makes), and the world again
    group = dist.new_group([0, 1])
    if rank in (0, 1):
        t = torch.ones(1)
        dist.all_reduce(t, group=group)
        check("all_reduce in new_group([0, 1])", t, torch.ones(1) * 2)
    if size >= 4:  # two groups at once, each a job of its own
        pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        if rank < 4:
            t = torch.ones(1) * rank
            dist.all_reduce(t, group=pairs[rank // 2])
            check("all_reduce in one of two new groups", t, torch.ones(1) * (4 * (rank // 2) + 1))
    # a parameter (a leaf that requires grad), not contiguous: written in place, not autograd's business
    w = (torch.arange(6, dtype=torch.float32).view(2, 3) + rank).t().detach().requires_grad_()
    dist.broadcast(w, src=0)
    check("broadcast into a parameter", w.detach(), torch.arange(6, dtype=torch.float32).view(2, 3).t())
    dist.barrier()
    print("Rank", rank, ": views, lists, coalesced, async, result(), overlaps, isend/irecv, new_group")


def refused(rank, size):
    cases = [
        ("BAND", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=R.BAND)),
        ("AVG", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=R.AVG)),
        ("int8", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int8), op=R.MAX)),
        ("any source", lambda: dist.recv(torch.zeros(1))),
        ("uneven", lambda: dist.all_to_all_single(torch.zeros(size + 1), torch.zeros(size + 1),
                                                   [2] + [1] * (size - 1), [2] + [1] * (size - 1))),
        ("share memory", lambda: dist.all_reduce(torch.zeros(1).expand(4))),
        ("add up", lambda: dist.all_to_all_single(torch.zeros(2 * size), torch.zeros(2 * size),
                                                   [1] * size, [1] * size)),
        # refused before anything is sent: not on the comm thread, which would end the job
        ("only dense", lambda: dist.all_reduce_coalesced([torch.ones(2).to_sparse()])),
        ("only dense", lambda: dist._all_gather_base(torch.zeros(2 * size), torch.ones(2).to_sparse())),
        ("only dense", lambda: dist.all_to_all_single(torch.zeros(size), torch.ones(size).to_sparse())),
        ("itself", lambda: dist.send(torch.ones(1), dst=rank)),
        # a list to broadcast into: one shape, apart in memory (the copies would fail on the comm thread)
        ("shape", lambda: dist.broadcast_multigpu([torch.zeros(2, 3), torch.zeros(3, 2)], src=0)),
        ("share memory", lambda: dist.broadcast_multigpu((lambda b: [b[:3], b[1:]])(torch.zeros(4)), src=0)),
        ("negative", lambda: dist.send(torch.ones(1), dst=(rank + 1) % size, tag=-1)),
    ]
    for needle, call in cases:
        try:
            call()
        except RuntimeError as e:
            assert needle in str(e) and "ddpd" in str(e), str(e)
            continue
        raise AssertionError("no RuntimeError for " + needle)
    t = torch.ones(1)
    dist.all_reduce(t)  # nothing was sent by the refused calls: the ranks still agree
    check("all_reduce after the refusals", t, torch.ones(1) * size)
    print("Rank", rank, ": what libddp cannot do is refused")


if __name__ == "__main__":
    import torch_ddpd  # noqa: F401  registers the backend "ddpd"
    torch.set_num_threads(1)
    dist.init_process_group("ddpd")
    for part in (reductions, movement, shapes, refused):
        part(dist.get_rank(), dist.get_world_size())
    print("Rank", dist.get_rank(), ": all checks passed")
