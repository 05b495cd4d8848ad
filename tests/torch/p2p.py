"""Writing Distributed Applications: blocking and non-blocking point-to-point, as in the
tutorial but for the backend's name and the import. ddp-run -n 2 -- python3 p2p.py"""
import torch
import torch.distributed as dist


def run(rank, size):
    tensor = torch.zeros(1)
    if rank == 0:
        tensor += 1
        # Send the tensor to process 1
        dist.send(tensor=tensor, dst=1)
    else:
        # Receive tensor from process 0
        dist.recv(tensor=tensor, src=0)
    print('Rank ', rank, ' has data ', tensor[0])


def run_nonblocking(rank, size):
    tensor = torch.zeros(1)
    req = None
    if rank == 0:
        tensor += 2
        # Send the tensor to process 1
        req = dist.isend(tensor=tensor, dst=1)
        print('Rank 0 started sending')
    else:
        # Receive tensor from process 0
        req = dist.irecv(tensor=tensor, src=0)
        print('Rank 1 started receiving')
    req.wait()
    print('Rank ', rank, ' has data ', tensor[0], ' (non-blocking)')


if __name__ == "__main__":
    import torch_ddpd  # noqa: F401  registers the backend "ddpd"
    dist.init_process_group("ddpd")
    run(dist.get_rank(), dist.get_world_size())
    run_nonblocking(dist.get_rank(), dist.get_world_size())
