"""Writing Distributed Applications: synchronous SGD with average_gradients after
backward, a seeded DataPartitioner and global batch 128 split across ranks, as in the
tutorial but on Debian's Fashion-MNIST (read from its IDX files: there is no torchvision)
and for a few steps. Every rank must end with the same parameters, bit for bit, and the
loss must fall. ddp-run -n 2 -- python3 average_gradients.py [STEPS]"""
import gzip
import os
import struct
import sys
from math import ceil
from random import Random

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

DATA = os.environ.get("DDP_DATA", "/usr/share/datasets/fashion-mnist")


class Net(nn.Module):
    """The tutorial's network."""

    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


class Partition(object):
    """ Dataset-like object, but only access a subset of it. """

    def __init__(self, data, index):
        self.data = data
        self.index = index

    def __len__(self):
        return len(self.index)

    def __getitem__(self, index):
        data_idx = self.index[index]
        return self.data[data_idx]


class DataPartitioner(object):
    """ Partitions a dataset into different chuncks. """

    def __init__(self, data, sizes=[0.7, 0.2, 0.1], seed=1234):
        self.data = data
        self.partitions = []
        rng = Random()
        rng.seed(seed)
        data_len = len(data)
        indexes = [x for x in range(0, data_len)]
        rng.shuffle(indexes)

        for frac in sizes:
            part_len = int(frac * data_len)
            self.partitions.append(indexes[0:part_len])
            indexes = indexes[part_len:]

    def use(self, partition):
        return Partition(self.data, self.partitions[partition])


def read_idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        raw = f.read()
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(raw[4 + 4 * dims:]), dtype=torch.uint8).view(*shape)


def fashion_mnist():
    images = read_idx("train-images-idx3-ubyte.gz").float().div_(255).sub_(0.1307).div_(0.3081).unsqueeze(1)
    labels = read_idx("train-labels-idx1-ubyte.gz").long()
    return torch.utils.data.TensorDataset(images, labels)


def partition_dataset():
    """ Partitioning the dataset """
    dataset = fashion_mnist()
    size = dist.get_world_size()
    bsz = 128 / float(size)
    partition_sizes = [1.0 / size for _ in range(size)]
    partition = DataPartitioner(dataset, partition_sizes)
    partition = partition.use(dist.get_rank())
    train_set = torch.utils.data.DataLoader(partition, batch_size=int(bsz), shuffle=True)
    return train_set, bsz


def average_gradients(model):
    """ Gradient averaging. """
    size = float(dist.get_world_size())
    for param in model.parameters():
        dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
        param.grad.data /= size


def run(rank, size, steps):
    """ Distributed Synchronous SGD Example """
    torch.manual_seed(1234)
    train_set, bsz = partition_dataset()
    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.5)

    num_batches = ceil(len(train_set.dataset) / float(bsz))
    losses = []
    for step, (data, target) in enumerate(train_set):
        if step == steps:
            break
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        losses.append(loss.item())
        loss.backward()
        average_gradients(model)
        optimizer.step()
    print('Rank ', dist.get_rank(), ', steps ', len(losses), ' of ', num_batches, ': loss ',
          sum(losses[:10]) / 10, ' -> ', sum(losses[-10:]) / 10)
    assert sum(losses[-10:]) < sum(losses[:10]), "the loss did not fall"

    # the same parameters everywhere, bit for bit
    flat = torch.cat([p.data.view(-1) for p in model.parameters()])
    everyone = [torch.zeros_like(flat) for _ in range(size)]
    dist.all_gather(everyone, flat)
    assert all(torch.equal(everyone[0], other) for other in everyone), "ranks differ"
    print('Rank ', rank, ': parameters identical on every rank')


if __name__ == "__main__":
    import torch_ddpd  # noqa: F401  registers the backend "ddpd"
    torch.set_num_threads(1)
    dist.init_process_group("ddpd")
    run(dist.get_rank(), dist.get_world_size(), int(sys.argv[1]) if len(sys.argv) > 1 else 60)
