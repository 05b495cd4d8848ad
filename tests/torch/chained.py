"""Callbacks that wait for a call they post, as PowerSGD's hook does in each bucket's chain:
more of them in flight at once than any fixed number of communication threads (each waits
in a completion while the call it posted queues behind the others). Every tensor holds
ones, so that the sums are world whichever order the ranks' posts from completions take
(that order is the completions' race, as it is with gloo)."""
import torch
import torch.distributed as dist

IN_FLIGHT = 40


def main():
    import torch_ddpd  # noqa: F401  registers the backend "ddpd"
    dist.init_process_group("ddpd")
    rank, world = dist.get_rank(), dist.get_world_size()

    def then_reduce_again(fut):
        t = fut.value()[0]
        again = t / world
        dist.all_reduce(again, async_op=True).get_future().wait()  # waits in the completion
        return again

    for step in range(3):
        futures = []
        for _ in range(IN_FLIGHT):
            t = torch.ones(272)
            futures.append(dist.all_reduce(t, async_op=True).get_future().then(then_reduce_again))
        for f in futures:
            got = f.wait()
            assert torch.equal(got, torch.full((272,), float(world))), got
    print("rank %d: %d chains in flight, 3 times: all sums right" % (rank, IN_FLIGHT), flush=True)


if __name__ == "__main__":
    main()
