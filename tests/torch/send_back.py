"""Point-to-point both ways: rank 0 sends [1, 2, 3] to rank 1 and [4, 5, 6] to rank 2;
each subtracts 1 and sends it back; rank 0 sums what came back.
ddp-run -n 3 -- python3 send_back.py   ->   "Rank 0 sum: [3.0, 5.0, 7.0]" """
import torch
import torch.distributed as dist


def run(rank, size):
    if rank == 0:
        dist.send(torch.tensor([1.0, 2.0, 3.0]), dst=1)
        dist.send(torch.tensor([4.0, 5.0, 6.0]), dst=2)
        back1, back2 = torch.zeros(3), torch.zeros(3)
        dist.recv(back1, src=1)
        dist.recv(back2, src=2)
        total = back1 + back2
        assert total.tolist() == [3.0, 5.0, 7.0], total
        print('Rank 0 sum:', total.tolist())
    else:
        tensor = torch.zeros(3)
        dist.recv(tensor, src=0)
        tensor -= 1
        dist.send(tensor, dst=0)
        print('Rank', rank, 'sent back', tensor.tolist())


if __name__ == "__main__":
    import torch_ddpd  # noqa: F401  registers the backend "ddpd"
    dist.init_process_group("ddpd")
    run(dist.get_rank(), dist.get_world_size())
